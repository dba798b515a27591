"""Fetch the public benchmark files into the data root, verified by SHA-256.

Loaders read the public layout under the data root (docs/DESIGN.md, "Datasets"); on a fresh machine those files are
missing and this module puts them there. Every file comes from the upstream source recorded in
``shared/data/*/PROVENANCE.md``, pinned to a commit, so a fresh download is byte-for-byte the local mirror and the
catalog's hashes are the mirror's hashes (``tests/test_download.py`` checks them against it).

Guarantees, because a half-written data file is worse than a missing one (a loader would silently read a prefix):
- a file appears under its final name only complete and verified: it is streamed to a temporary file in the same
  directory, hashed while it streams, and ``os.replace``d into place; on any failure the temporary file is deleted;
- a transfer shorter than its ``Content-Length`` is an error, not a short file (``http.client`` returns EOF quietly);
- archives are read member by member and only the catalogued members are written, each to its catalogued path, and
  never through a link, so a hostile archive cannot write outside the data root; a download that is no archive (an
  error page) or a damaged one is a ``DownloadError``;
- a download holds a lock on the data root, so two downloads into one root take turns, and the temporary file of a
  download that was killed (``kill -9``, a lost machine) is deleted by the next download into that root.

Some upstream hashes cannot be known offline (the official CFQ tarball); such entries carry ``sha256=None``, and the
download logs the computed hash with a warning that it is unverified. An archive without a known hash whose kept
members all have one (LEAR's zips: the mirror holds their members, not the zips) is verified through its members.

Tests and air-gapped sites point the catalog at another host with ``mirror=`` or ``ZOO_DOWNLOAD_MIRROR``, which
replaces the scheme and host of every URL (``https://raw.githubusercontent.com/a/b`` -> ``<mirror>/a/b``).

    python -m zoo.download scan_simple            # or a family: scan, scan_sp, geoquery_funql, text2sql, cfq, cogs
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import http.client
import logging
import lzma
import os
import re
import stat
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Callable, Collection, Iterator

from tqdm import tqdm

from zoo.results import atomic_path, locked_directory

log = logging.getLogger(__name__)

MIRROR_ENV = "ZOO_DOWNLOAD_MIRROR"
_CHUNK = 1 << 20
_TIMEOUT_S = 60


class DownloadError(RuntimeError):
    """A file could not be fetched or did not verify; nothing was left under its final name."""


class UnsafePathError(DownloadError):
    """An archive member or catalog destination would land outside the data root, or an archive member is a link."""


# ----------------------------------------------------------------------------------------------------------- catalog
@dataclass(frozen=True)
class Archive:
    """An upstream archive. ``sha256=None`` where no hash can be known offline; its members can still be verified."""

    url: str
    sha256: str | None = None


@dataclass(frozen=True)
class RemoteFile:
    """One file of the data root: its path there (the mirror layout), its expected SHA-256, and where it comes from:
    a plain ``url``, or ``member`` of ``archive``."""

    dest: str
    sha256: str | None
    url: str = ""
    archive: Archive | None = None
    member: str = ""


GITHUB = "https://raw.githubusercontent.com"


def _from_repo(repo: str, commit: str, hashes: dict[str, str], *, src: str = "", dest: str) -> tuple[RemoteFile, ...]:
    """Files ``<src><name>`` of ``repo`` at ``commit``, placed at ``<dest>/<name>``."""
    return tuple(RemoteFile(f"{dest}/{n}", h, url=f"{GITHUB}/{repo}/{commit}/{src}{n}") for n, h in hashes.items())


def _from_archive(archive: Archive, hashes: dict[str, str | None], *, src: str, dest: str) -> tuple[RemoteFile, ...]:
    """Members ``<src><name>`` of ``archive``, placed at ``<dest>/<name>``."""
    return tuple(RemoteFile(f"{dest}/{n}", h, archive=archive, member=f"{src}{n}") for n, h in hashes.items())


_SCAN = "brendenlake/SCAN", "c4b756cbc010d75c912f16c42c8f15dc6b7e6c8f"
_SCAN_MCD = "SegwangKim/SCAN", "9da9c8af84509a66e10dfbdfefb3d1e83f3d0bea"  # fork; upstream PR brendenlake/SCAN#2
_SUBS = "SALT-NLP/SUBS", "4f2d7917a247cae6a16799cdb779e25ceaf88763"  # holds span-based-sp's Google Drive datasets/
_SPAN_BASED_SP = "jonathanherzig/span-based-sp", "7c7f87b8ef9d3061652cd25758869e78b57179a4"
_TEXT2SQL = "jkkummerfeld/text2sql-data", "5050bad2309a93636ea4788d3660c9202bf11e0e"
_SEQ2SPARQL = "coastalcph/seq2sparql", "269fe063b79302cd02a7392c8823d7c20f17d21a"
_PARSEQ = "lukovnikov/parseq", "59522090c1db98a75a668a5f3f41358f5605a453"
_COGS = "najoungkim/COGS", "165a7b669eade971fa47bf568a2e51925360fed8"
_LEAR = f"{GITHUB}/thousfeet/LEAR/e26c9d875c593de6e2e51b9d66f65c6f07be9575"

# Archive hashes are unknown here: the mirror holds the extracted members, not the archives (PROVENANCE records
# only the prefix 23f530a385014d0a for LEAR's cfq_data.zip). Every member we keep is verified instead.
_CFQ_RELEASE = Archive("https://storage.googleapis.com/cfq_dataset/cfq1.1.tar.gz")
_LEAR_CFQ = Archive(f"{_LEAR}/CFQ_experiment/cfq_data.zip")
_LEAR_COGS = Archive(f"{_LEAR}/COGS_experiment/cogs_data.zip")

CATALOG: dict[str, tuple[RemoteFile, ...]] = {
    "scan": _from_repo(*_SCAN, dest="scan", hashes={
        "LICENSE": "5caff9408d400e1d9b271bf48b967154cdf6a37c16c965f91775da3af9291f67",
        "tasks.txt": "d824c7d9e9149ba497e25f701981dac79954e04bf670d22e5c209f076ac6c89f",
        "simple_split/tasks_train_simple.txt": "941bb8a088c5f53ceff12fde902dc008933cf0c4203cc672c47b5f79d73262dd",
        "simple_split/tasks_test_simple.txt": "1fe1c8f5a19d0dc40e41bab94278f45f66f3dc415a978bd29855a23440610fc6",
        "length_split/tasks_train_length.txt": "b034212dc7cf87ce62f3a067dd6ad49c4d5cd18d51d615d13825516bcb1ebbc2",
        "length_split/tasks_test_length.txt": "0760752ed34a75116ae11dcc1ee17526b7500060da1366540730fa24894d7db3",
        "add_prim_split/tasks_train_addprim_jump.txt":
            "e3c78485692e028eed4205e1b8b3fd0e785ef2c12d45b5b89204dadf5b239e23",
        "add_prim_split/tasks_test_addprim_jump.txt":
            "8147ae2651422c701162e174d9d66158daa57858a26b30317ac61797118ac7a5",
        "add_prim_split/tasks_train_addprim_turn_left.txt":
            "1b3fed86055dd7689d217f1b90cc8960aeb1cf200f4f209dc47935761b05304c",
        "add_prim_split/tasks_test_addprim_turn_left.txt":
            "15a82c2d25ac7c3c1fff7e18051fb085974ef3617de895c520d02144396a10e2",
        "template_split/tasks_train_template_around_right.txt":
            "d5d35d174d557645fc61f289424afa0d95fde21422c59a9819e2d0fcfa9d419f",
        "template_split/tasks_test_template_around_right.txt":
            "fc78a5d1077dc2c206d6c42ed89fb9022867618c3f331179bafd3ec1ca699474",
        "template_split/tasks_train_template_right.txt":
            "a09e125dc95c59843d087fd50852c57bc4e77997e2cd69aa04a9a934eea9089b",
        "template_split/tasks_test_template_right.txt":
            "506bed814f8a6ec1eef9c226eb9b2055bc984925902a94d020a23a41080993bb",
    }) + _from_repo(*_SCAN_MCD, dest="scan", hashes={
        "mcd_split/tasks_train_mcd1.txt": "ed923d807d0d5892b58728f57872e935029368c03fc21b6748b41b7e1e20edfe",
        "mcd_split/tasks_test_mcd1.txt": "3f447ddb0154f72ea8149d33ff18e3ccd16f639842d86936eb73d214e2b18deb",
        "mcd_split/tasks_train_mcd2.txt": "7e771bd0f8abe0867ededffba39136ead7a73259149952af65d66c106e2b2602",
        "mcd_split/tasks_test_mcd2.txt": "d11596d89367d6e827659a1e69abc377dd67cbf5622f7c949807b4d4120ccfed",
        "mcd_split/tasks_train_mcd3.txt": "06975756776dd2916c25db0f80d06cc4678a708fd72adbfc18384b2bdc9301cb",
        "mcd_split/tasks_test_mcd3.txt": "329c37df660295c7cc2725e838dbe3ac22f4ce2d7d7804135c94a82bb4dbf956",
    }),
    "scan_sp": _from_repo(*_SUBS, src="datasets/scan/dsl/", dest="scan_sp/dsl", hashes={
        "train_simple.json": "067c6ec83530b273b4aa35231213715c8282d5400d2ae31ea9d80cf48253e5db",
        "dev_simple.json": "e84d40a11bd295534bfd7313dce22acaee252eb6fde65395a1f8d33e7029f0ac",
        "test_simple.json": "f61ea1e737cbbddc8e0ddddbd921b4e8fb57357f09bd291a20946548a2b13629",
        "train_right.json": "f04e1e007bb34a9abb7012d30b8ca3a9a1ee02eca3b9b7cb760356f836985714",
        "dev_right.json": "d83d90d3f581e8921f71397a982a2a74df9afff1f5a3395a36d965e846931572",
        "test_right.json": "1250fc6a600ede1f50eb4b7b5f0acc2764d9c58ceee3c555280512f13b3856b1",
        "train_around_right.json": "f7db598b097c6acf4ef2d2107d010f2fc7a381fba72d843e159c0faedbdfd66f",
        "dev_around_right.json": "34b62416074645206ae5a7e1709aca30d2ece0b7bb04c5ecce15b0786f9631db",
        "test_around_right.json": "6cf82122d2e6e27b0eb3bc324b804a01f01035b0fe0fc1cc990653f7d8d2539f",
    }),
    "geoquery_funql": _from_repo(*_SUBS, src="datasets/geo/", dest="geoquery_funql", hashes={
        "funql/train.json": "8822cd0eac018428d2670b00cf3878f5f3d50a9d43c44ae7718d53a4ea4c8ccf",
        "funql/dev.json": "d99893a629c99850f6e43df8ed369ea5c0e30314cd3cfb84a597665b8fdbaebd",
        "funql/test.json": "3d987138c68ac80236c98cb0ebfaace7e633d53de0d2ee2719912f56820b6e68",
        "funql/train_orig.json": "6061406971960cf82a90cb06a5cb87a429198c4132227209d6310e3744b65e22",
        "funql/train_template.json": "842da4ea2acdfcda40944a9a9e56e131c8a1471ae352ab1578cd27d70fc30466",
        "funql/dev_template.json": "aaf4ca391be89740e25e7fe58ffe610eab181f70f1546ee30141616f3b9bf410",
        "funql/test_template.json": "8155e41ef87867f7223562d63b97e6203afd30681a9261cbed8c93b080ee14cc",
        "funql/train_orig_template.json": "b75f7bee14be0c9c46a44393504ea2c784b8ecc080a29023ad3a7a63d3baebe7",
        "funql/train_len.json": "fbf830cb65003890fe3cdcb8d97e87a2acbb9d73e9414682343fe6a0fd36a86b",
        "funql/dev_len.json": "91e06f97a9f21d28819fd2fb4f27830e5790fa97991890fa768f35f8128db9ed",
        "funql/test_len.json": "9d657cf570e6c39113933dd6d98e90f8a208509d6f6f4ffad58db84e045ad162",
        "funql/train_orig_len.json": "528dbd786aa96e4bcfd41becb7a122a434080b34818ecdf021ef878f432b0904",
        "funql/train_spans.json": "24ec3baed1d4a824560aaa5002f5714b601ff743c98f350763ba20681b26ccc1",
        "funql/dev_spans.json": "d3dd555f922f82662b073096cf95a5f22971e1a48c2e841caee78db3bdd8d5c0",
        "funql/test_spans.json": "b10568e15fd98b713905ddbc2fb01bd354848c4ca4335cc2561e062eb8e75e53",
        "funql/train_template_spans.json": "3e4dcfeff557b11be48cd4f9da50268ad3760ad844b5d18cea6ba52d13fdc66a",
        "funql/dev_template_spans.json": "e7b5594df1b77e8168987d30a9a2893e6e9b200365c1b3e5f679b64969773cd6",
        "funql/test_template_spans.json": "63cacd30c72912e32deda967928c4a263d62cadcf6b17483337952ed4d412870",
        "funql/train_len_spans.json": "b67da1037a24d54b380d978c17c479033c6046670b99793a802fc44f8eefd222",
        "funql/dev_len_spans.json": "cc1233dcf1664b022b55d2c531ae36b742caddb23332605419e5ba7d260be99d",
        "funql/test_len_spans.json": "9bdf21945223e2dd0d0382e88af33fb180d4c85d061cd065c3b123caa6687c43",
        "funql/train_150_spans.json": "2a70d026cf0d4d2e34613a08121a794099db720d4b56b85a3b2a97d0b6bddfaa",
        "funql/train_template_50_spans.json": "f1bf75b84190ac17819e2785dd3693ef218b155527cb02bd831dd61c03c94875",
        "funql/train_template_100_spans.json": "96f50d9bbb0fd52bb7fd8646fd2c017a64fe36942e032d20c8060f72734375f1",
        "funql/train_template_150_spans.json": "29f22362cc2b1668367008bcaa8a5688fa14dbf9807340d27fed07120bf05449",
        "funql/train_template_200_spans.json": "1d43530ac3ae629dd0d7b179d6d7386ea0a895ff3faeb39b16e97ee0f4aa3173",
        "raw/geoFunql-en.corpus": "1c92b21b367729e79bad24259ce68afb9427793caf4c327bdfb8957a3d144d62",
        "raw/geoFunql-en.init.corpus": "2860081b074fe7c62bfa56b3d897787897c29e60864a7f925022be74fccab4a1",
        "raw/split880.train.ids": "ef61f24a37ab1d07123d1f2b45e17720002bf6e00b364b9a66c716755de6e3fe",
        "raw/split880.test.ids": "cc42fd0683ff8f1a7130e1dfb69d3b0b19281de5545b3a2b1386c365abe4b1c3",
    }) + _from_repo(*_SPAN_BASED_SP, src="utils/geo_eval/", dest="geoquery_funql", hashes={
        "geobase.pl": "f3088e645e5ce1ed83e71dcf46ca4031a3c0247cd35bcac40061acd9ff71b75f",
    }),
    "text2sql": _from_repo(*_TEXT2SQL, src="data/", dest="text2sql", hashes={
        "geography.json": "b20ad8ed357029c9efa49aa64434729f624591850f66b1137cabcc0e45273c1b",
        "atis.json": "ce2d0bf341718061dc0e2ecc50d200b191121c762bb29c24b28749a2ebc9f4c7",
        "scholar.json": "390dc4f1851d78e323adc0ffcbeeb7ac98a6d4ee74fedbdf544a4ba540d98e93",
        "geography-db.sql": "4a3f067c6a972a35f8cf296a3e05fbe00a6a6737007f55eca9abb0f5e8196fc3",
        "geography-db.added-in-2020.sqlite": "98955372123cd9a8e761b00c2c67fbf221f1b8699927add538b53154c702dd3c",
        "geography-schema.csv": "09c8fc40f163f5209341d68ae820a23a57bfb5f31ecd7e9a915730bc11b59515",
        "geography-fields.txt": "d0546560bb87a609412730b7aa960a19c980c8dfc4181aaf41fd5a39dcb26ec3",
        "atis-schema.csv": "49bb428569a282fa29a5c662d40fcd2fe58873cf04d32806e797f76741a35ad7",
        "atis-fields.txt": "d76d913ed340c1618a0f19142ad5d4fe6f9d59ad459d6c185a49782e01282d9d",
        "scholar-schema.csv": "e44efecc1ffae3a74b506da349781133f008962879a429184f875868863542b8",
        "scholar-fields.txt": "5535b06da4e6cc7fb5b5c968698c4cf134ec00b8b25125ef5238fa0cd100c210",
        "README.md": "7242839e7184b77332ee1db8446540dde15eac4e5ad43f36a5d40da6becbbb92",
        "READ-history.md": "311cf1f73b3b24939919ebc4a0b1b91b79cd0348e6abceb72569e0d9bdad9328",
    }) + _from_repo(*_TEXT2SQL, dest="text2sql", hashes={
        "LICENSE.md": "a25e2777f4be4d0650eff0c901a249463c8bcdbeeee83405f5494a09c3e7e2ad",
        "known-issues.md": "6982c21abf1017ce3c5b5a1b22410d6648dfef6391f9e3c5e85dd5d07ec0df5a",
    }),
    # CFQ: LEAR's zip is Google's preprocessing of MCD1 (small); the split index files come from two GitHub copies
    # (identical blobs); the official release supplies dataset.json, which the full mcd2/mcd3/random splits need.
    "cfq": _from_archive(_LEAR_CFQ, src="data/mcd1/", dest="cfq/preprocessed/mcd1", hashes={
        "train/train_encode.txt": "8dfcfb15c7a12a4817edb6832b252896af66d21e56b5419621d07a43226aaad7",
        "train/train_decode.txt": "09f7a4cb00c56a9d73a78a3f9cc1d9504724151d42095a34f0abd142f85b0dc8",
        "dev/dev_encode.txt": "2d4c4c5ba9427292be2a0fe73c5a2d7f9261ae3895e23aa0cab6287ca34974fb",
        "dev/dev_decode.txt": "945d9fec888f3d3834f7efaa0728d298d271764a842beb46d442b0ea2877cbdf",
        "test/test_encode.txt": "96f903b16bfa898d8aea12b879c158bad01b8d02ad0086054cfdc6f81d651598",
        "test/test_decode.txt": "efd3a514a59b49ee0767c7c7414d876b03978a5d025495bb0fcb7fd1710b857f",
        "vocab.cfq.tokens": "f7fae35b05ff810bf4649dd80c1f9731498bbc19ae38a7f315ea6b6e4c0308da",
    }) + _from_repo(*_SEQ2SPARQL, src="cfq/splits/", dest="cfq/splits", hashes={
        "mcd1.json": "3a060e3e1a9178de870041270a7a6390d629cdd3789443878174bbbdfc0eee40",
        "mcd2.json": "40099aa8547ad8854b7232c03c049861a25eaa815f04daf5b535f2dba684593c",
        "mcd3.json": "8e91d52ddf8117d0cd5e7eabf62d164f3c2668bb8f0b39cba4bc296f8197fa8b",
        "random_split.json": "e77254b2e7975f3383bd8cb9b7bfc774cae68787dee5a45f2f4bf0709d710fda",
    }) + _from_repo(*_PARSEQ, src="datasets/cfq/", dest="cfq/splits", hashes={
        "question_pattern_split.json": "dcdbedc35dca81deb20f991ed32d5a453f8e0f3bd7b6b4251a027e8fd97d48b6",
        "question_complexity_split.json": "eb5c8e466b78f9b95e7986546b48ea45bd4886ddf28469e14d6a55c7b00a5169",
        "query_pattern_split.json": "ec3daeea80f60b5d33a41c86d476a4a6e63079ae5b75dcbde47b32e9ccaa5105",
        "query_complexity_split.json": "75f06ca9cfbae62dcd54c74c223b0259b56ddb0671ce0bfde6959d24f46f5fcf",
    }) + _from_archive(_CFQ_RELEASE, src="cfq/", dest="cfq", hashes={
        "dataset.json": None,  # about 4 GB unpacked; not in the mirror, so its hash is unknown here
    }),
    "cogs": _from_repo(*_COGS, src="data/", dest="cogs", hashes={
        "train.tsv": "220b3804b562c0156ee986eff1bdd15c27e52142549362a64f57baf86e304c78",
        "dev.tsv": "ab66388a309c7ac1ad210c781a6a0ce12281a9ef24619a12422a752cef61bc21",
        "test.tsv": "68f8e51e9f6d9cd22d64efe68dd21d7ea5ba327e9a2359481030161aea757035",
        "gen_cases_to_paper_sections.json": "d41606ea764176682c26012a98ab73f143b042a57ce4159de8120d69f60921f5",
    }) + _from_repo(*_COGS, dest="cogs", hashes={
        "LICENSE": "fad4a0b4259dd9f0fd6ce2b472541493bac2fb6e6f5fafee9fab7ec8f31aee4d",
    }) + _from_archive(_LEAR_COGS, src="cogs_data/", dest="cogs", hashes={
        # najoungkim/COGS's own gen.tsv is a Git LFS-sized file; LEAR's copy predates the 2022 fix of 50 examples
        "gen.tsv": "410369d993e7cf3af9bb75835a77b1a332b56e60985a8bf1e7d75c30e91d4828",
    }),
}

# Registry name -> family, first match wins (``scan_sp_`` must be tried before ``scan_``).
_NAME_RULES: tuple[tuple[str, str], ...] = (
    (r"scan_sp_", "scan_sp"),
    (r"scan_", "scan"),
    (r"geo_funql_", "geoquery_funql"),
    (r"\w+_sql_", "text2sql"),
    (r"cfq_", "cfq"),
    (r"cogs", "cogs"),
)


def family_of(name: str) -> str:
    """The catalog family that holds the files of a family or registry dataset name."""
    if name in CATALOG:
        return name
    for pattern, family in _NAME_RULES:
        if re.match(pattern, name):
            return family
    raise ValueError(f"unknown dataset or family {name!r}; families: {', '.join(CATALOG)}")


def default_root() -> Path:
    """``$ZOO_DATA``, else ``<checkout>/data`` (git-ignored), as in docs/DESIGN.md."""
    return Path(os.environ.get("ZOO_DATA") or Path(__file__).resolve().parents[1] / "data")


# ---------------------------------------------------------------------------------------------------------- download
@dataclass
class DownloadReport:
    """What one ``download`` call did, by destination path relative to the root."""

    family: str
    root: Path
    fetched: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unverified: dict[str, str] = field(default_factory=dict)  # URL[!member] -> computed sha256 where none was known


def download(
    name: str,
    root: str | os.PathLike | None = None,
    *,
    force: bool = False,
    mirror: str | None = None,
    files: Collection[str] | None = None,
) -> DownloadReport:
    """Fetch the catalogued files of ``name`` (a family or a registry dataset name) that are missing under ``root``.

    A file already present with the catalogued hash (or present at all, where no hash is known) is skipped unless
    ``force``. ``files`` restricts the work to those destination paths, so a dataset that reads three files need not
    pull the whole family (CFQ's full release is large); a path the catalog cannot fetch is an error.
    ``mirror`` (default ``$ZOO_DOWNLOAD_MIRROR``) replaces the scheme and host of every URL.
    """
    family = family_of(name)
    root = Path(root) if root is not None else default_root()
    mirror = mirror or os.environ.get(MIRROR_ENV)
    entries = _select(CATALOG[family], family, files)
    report = DownloadReport(family, root)
    try:
        # while the lock is held no other download writes there: a temporary file found beside a target is a
        # killed download's
        with locked_directory(root):
            _download(entries, root, mirror, force, report)
    except OSError as e:  # network errors are DownloadErrors already: this is the local disk
        raise DownloadError(f"cannot write the download under {root}: {e}") from e
    return report


def _download(entries: tuple[RemoteFile, ...], root: Path, mirror: str | None, force: bool,
              report: DownloadReport) -> None:
    todo: dict[Archive | None, list[RemoteFile]] = {}
    for entry in entries:
        target = _target(root, entry.dest)
        _remove_stale_temporaries(target)
        if not force and _is_present(target, entry.sha256):
            report.skipped.append(entry.dest)
        else:
            todo.setdefault(entry.archive, []).append(entry)
    for archive, wanted in todo.items():
        if archive is None:
            for entry in wanted:
                url = _with_mirror(entry.url, mirror)
                with _staged(_target(root, entry.dest)) as out:
                    _check(_fetch(url, out), entry.sha256, url, report)
        else:
            _extract(archive, wanted, root, mirror, report)
        report.fetched += [entry.dest for entry in wanted]


def _remove_stale_temporaries(target: Path) -> None:
    """Delete what a killed download of ``target`` left: ``zoo.results.atomic_path``'s temporary file beside it,
    ``.<name>.<8 random characters>.tmp`` (``tempfile.mkstemp``)."""
    if not target.parent.is_dir():
        return
    stale = re.compile(rf"\.{re.escape(target.name)}\.[a-z0-9_]{{8}}\.tmp")
    for path in target.parent.iterdir():
        if stale.fullmatch(path.name) and path.is_file():
            log.info("removing %s, left by a download that was killed", path)
            path.unlink(missing_ok=True)


def _select(entries: tuple[RemoteFile, ...], family: str, files: Collection[str] | None) -> tuple[RemoteFile, ...]:
    if files is None:
        return entries
    unknown = set(files) - {entry.dest for entry in entries}
    if unknown:
        raise DownloadError(f"no public source for {sorted(unknown)} in family {family!r} (derived or partial data?)")
    return tuple(entry for entry in entries if entry.dest in files)


def _target(root: Path, relpath: str) -> Path:
    """``root / relpath``, refusing paths that leave the root lexically (absolute, ``..``)."""
    path = PurePosixPath(relpath)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise UnsafePathError(f"refusing to write {relpath!r}: it escapes the data root {root}")
    return root.joinpath(*path.parts)


def _is_present(target: Path, sha256: str | None) -> bool:
    if not target.is_file():
        return False
    if sha256 is None:
        return True
    if _sha256_of(target) == sha256:
        return True
    log.warning("%s is present but its SHA-256 differs from the catalog; fetching it again", target)
    return False


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _with_mirror(url: str, mirror: str | None) -> str:
    if not mirror:
        return url
    parts = urllib.parse.urlsplit(url)
    return mirror.rstrip("/") + parts.path + (f"?{parts.query}" if parts.query else "")


@contextlib.contextmanager
def _staged(target: Path) -> Iterator[IO[bytes]]:
    """A binary file next to ``target`` that replaces it atomically if the block succeeds and vanishes if not."""
    with atomic_path(target) as tmp, open(tmp, "wb") as out:
        yield out


def _copy(src: IO[bytes], out: IO[bytes], total: int | None, label: str) -> tuple[str, int]:
    """Stream ``src`` into ``out`` with a progress bar; return the SHA-256 and the byte count."""
    digest, count = hashlib.sha256(), 0
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label, leave=False, disable=None) as bar:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
            count += len(chunk)
            bar.update(len(chunk))
    return digest.hexdigest(), count


def _fetch(url: str, out: IO[bytes]) -> str:
    """Stream ``url`` into ``out``; return its SHA-256. Every network failure becomes a ``DownloadError``."""
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
            length = response.headers.get("Content-Length")
            promised = int(length) if length is not None else None
            sha256, received = _copy(response, out, promised, Path(urllib.parse.urlsplit(url).path).name)
    except urllib.error.HTTPError as e:
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from e
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        raise DownloadError(f"{url}: transfer failed: {e}") from e
    if promised is not None and received != promised:
        raise DownloadError(f"{url}: truncated transfer: received {received} of {promised} bytes")
    return sha256


def _check(actual: str, expected: str | None, source: str, report: DownloadReport) -> None:
    """Raise on a hash mismatch; where nothing was known, log and record the computed hash for the catalog."""
    if expected is None:
        log.warning("WARNING: %s is unverified (no known checksum); computed sha256=%s", source, actual)
        report.unverified[source] = actual
    elif actual != expected:
        raise DownloadError(f"{source}: checksum mismatch: expected sha256 {expected}, got {actual}")


def _extract(
    archive: Archive, wanted: list[RemoteFile], root: Path, mirror: str | None, report: DownloadReport
) -> None:
    """Download ``archive`` once to a temporary file in the root and write the ``wanted`` members, each verified."""
    by_member = {_member_key(entry.member): entry for entry in wanted}
    root.mkdir(parents=True, exist_ok=True)
    url = _with_mirror(archive.url, mirror)
    with tempfile.TemporaryFile(dir=root, prefix=".archive.", suffix=".part") as blob:
        sha256 = _fetch(url, blob)
        if archive.sha256 is None and all(entry.sha256 for entry in wanted):
            log.info("%s: no known checksum for the archive; each member kept is verified instead", url)
        else:
            _check(sha256, archive.sha256, url, report)
        blob.seek(0)
        try:
            for name, is_regular, open_member in _members(blob):
                entry = by_member.pop(_member_key(name), None)
                if entry is None:
                    continue
                if not is_regular:
                    raise UnsafePathError(f"{url}: member {name!r} is a link or special file; not extracting")
                with open_member() as src, _staged(_target(root, entry.dest)) as out:
                    _check(_copy(src, out, None, PurePosixPath(name).name)[0], entry.sha256, f"{url}!{name}", report)
        except _DAMAGED_ARCHIVE as e:
            raise DownloadError(f"{url}: not a zip or tar archive, or a damaged one ({type(e).__name__}: {e})") from e
    if by_member:
        raise DownloadError(f"{url}: archive has no member(s) {sorted(by_member)}")


# What the zip, tar, gzip and xz readers raise on bytes that are no archive or a damaged one.
_DAMAGED_ARCHIVE = (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError)


def _member_key(name: str) -> str:
    """Member names compare without a leading ``./``. An absolute or ``..`` name anywhere in the archive refuses the
    whole archive: no honest release has one, so it is hostile or broken."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise UnsafePathError(f"refusing archive member {name!r}: it escapes the data root")
    return str(path)


def _members(blob: IO[bytes]) -> Iterator[tuple[str, bool, Callable[[], IO[bytes]]]]:
    """``(name, is_regular_file, opener)`` per member of a zip or tar(.gz) file, in archive order, so a large
    tar.gz is decompressed once."""
    if zipfile.is_zipfile(blob):
        with zipfile.ZipFile(blob) as zf:
            for info in zf.infolist():
                is_link = stat.S_ISLNK(info.external_attr >> 16)
                yield info.filename, not (info.is_dir() or is_link), lambda info=info: zf.open(info)
    else:
        blob.seek(0)
        with tarfile.open(fileobj=blob, mode="r:*") as tf:
            for member in tf:
                yield member.name, member.isfile(), lambda member=member: tf.extractfile(member)


# --------------------------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.download", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help=f"a dataset registry name or a family ({', '.join(CATALOG)})")
    parser.add_argument("--root", default=None, help="data root (default: $ZOO_DATA, else <checkout>/data)")
    parser.add_argument("--force", action="store_true", help="fetch again even when a verified copy is present")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        report = download(args.name, args.root, force=args.force)
    except (ValueError, DownloadError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for dest in report.fetched:
        print(f"fetched {report.root / dest}")
    for dest in report.skipped:
        print(f"skipped {report.root / dest} (already present)")
    print(f"{report.family}: {len(report.fetched)} fetched, {len(report.skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
