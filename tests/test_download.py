"""zoo.download against a loopback HTTP server: verification, atomicity, safe extraction, CLI; and the real catalog's
hashes against the local mirror (``ZOO_DATA``), which is what proves the catalog right."""
from __future__ import annotations

import hashlib
import io
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from zoo import download as dl  # noqa: E402
from zoo.download import Archive, DownloadError, RemoteFile, UnsafePathError  # noqa: E402

UPSTREAM = "https://upstream.example"  # catalog URLs; mirror= rewrites them to the loopback server


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def tar_gz_bytes(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, link in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, link
            tf.addfile(info)
    return buf.getvalue()


@pytest.fixture
def server():
    """Loopback server: ``routes[path] = body``; ``/truncated`` promises more bytes than it sends, then closes;
    ``/stalls`` sends a few bytes of 1000 and then nothing until the test ends."""
    routes: dict[str, bytes] = {}
    done = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path in ("/truncated", "/stalls"):
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"only a few bytes")
                self.wfile.flush()
                if self.path == "/stalls":
                    done.wait(timeout=60)
                self.close_connection = True
                return
            body = routes.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}", routes
    done.set()
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def catalog(monkeypatch):
    """Install a test family ``scan`` (so registry names like ``scan_simple`` resolve to it)."""

    def install(*entries: RemoteFile) -> None:
        monkeypatch.setitem(dl.CATALOG, "scan", tuple(entries))

    return install


def all_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


PLAIN = b"IN: walk OUT: I_WALK\n"
IN_ZIP = b"zip member\n"
IN_TAR = b"tar member\n"


def test_download_verifies_then_skips(server, catalog, tmp_path):
    base, routes = server
    routes["/repo/c0ffee/plain.txt"] = PLAIN
    routes["/a.zip"] = zip_bytes({"data/x/in_zip.txt": IN_ZIP, "data/x/unused.txt": b"not wanted"})
    routes["/b.tar.gz"] = tar_gz_bytes({"./rel/in_tar.txt": IN_TAR})
    zip_archive = Archive(f"{UPSTREAM}/a.zip", sha(routes["/a.zip"]))
    tar_archive = Archive(f"{UPSTREAM}/b.tar.gz")  # hash unknown: fetched, reported as unverified
    catalog(
        RemoteFile("scan/plain.txt", sha(PLAIN), url=f"{UPSTREAM}/repo/c0ffee/plain.txt"),
        RemoteFile("scan/sub/in_zip.txt", sha(IN_ZIP), archive=zip_archive, member="data/x/in_zip.txt"),
        RemoteFile("scan/in_tar.txt", None, archive=tar_archive, member="rel/in_tar.txt"),
    )

    report = dl.download("scan_simple", tmp_path, mirror=base)
    assert report.family == "scan"
    assert sorted(report.fetched) == ["scan/in_tar.txt", "scan/plain.txt", "scan/sub/in_zip.txt"]
    assert all_files(tmp_path) == ["scan/in_tar.txt", "scan/plain.txt", "scan/sub/in_zip.txt"]  # no temp files left
    assert (tmp_path / "scan/sub/in_zip.txt").read_bytes() == IN_ZIP
    assert report.unverified == {  # keyed by the URL actually fetched
        f"{base}/b.tar.gz": sha(routes["/b.tar.gz"]),
        f"{base}/b.tar.gz!./rel/in_tar.txt": sha(IN_TAR),
    }

    again = dl.download("scan", tmp_path, mirror=base)
    assert again.fetched == [] and len(again.skipped) == 3

    (tmp_path / "scan/plain.txt").write_bytes(b"stale")  # a wrong copy is replaced; force refetches the rest
    assert dl.download("scan", tmp_path, mirror=base).fetched == ["scan/plain.txt"]
    assert len(dl.download("scan", tmp_path, mirror=base, force=True).fetched) == 3
    assert (tmp_path / "scan/plain.txt").read_bytes() == PLAIN


def test_files_restricts_the_download(server, catalog, tmp_path):
    base, routes = server
    routes["/one"], routes["/two"] = b"1", b"2"
    catalog(*(RemoteFile(f"scan/{n}", sha(routes[f"/{n}"]), url=f"{UPSTREAM}/{n}") for n in ("one", "two")))
    assert dl.download("scan", tmp_path, mirror=base, files=["scan/two"]).fetched == ["scan/two"]
    assert all_files(tmp_path) == ["scan/two"]
    with pytest.raises(DownloadError, match="scan/derived"):
        dl.download("scan", tmp_path, mirror=base, files=["scan/derived"])


def test_checksum_mismatch_leaves_nothing(server, catalog, tmp_path, monkeypatch):
    base, routes = server
    routes["/f.txt"] = PLAIN
    catalog(RemoteFile("scan/f.txt", "0" * 64, url=f"{UPSTREAM}/f.txt"))
    monkeypatch.setenv(dl.MIRROR_ENV, base)  # the environment variable works like mirror=
    with pytest.raises(DownloadError) as err:
        dl.download("scan", tmp_path)
    assert f"{base}/f.txt" in str(err.value) and "0" * 64 in str(err.value) and sha(PLAIN) in str(err.value)
    assert all_files(tmp_path) == []


def test_truncated_transfer_leaves_nothing(server, catalog, tmp_path):
    base, _ = server
    catalog(RemoteFile("scan/t.txt", None, url=f"{UPSTREAM}/truncated"))
    with pytest.raises(DownloadError, match="truncated transfer: received 16 of 1000 bytes"):
        dl.download("scan", tmp_path, mirror=base)
    assert all_files(tmp_path) == []


def test_http_error_names_the_url(server, catalog, tmp_path):
    base, _ = server
    catalog(RemoteFile("scan/missing.txt", None, url=f"{UPSTREAM}/missing.txt"))
    with pytest.raises(DownloadError, match=r"127.0.0.1:\d+/missing.txt: HTTP 404"):
        dl.download("scan", tmp_path, mirror=base)


@pytest.mark.parametrize(
    "archive_body, member, dest",
    [
        (zip_bytes({"../evil.txt": b"x"}), "../evil.txt", "scan/evil.txt"),  # member climbs out
        (tar_gz_bytes({"/etc/evil.txt": b"x"}), "/etc/evil.txt", "scan/evil.txt"),  # absolute member
        (tar_gz_bytes({}, symlinks={"link.txt": "/etc/passwd"}), "link.txt", "scan/link.txt"),  # link member
        (zip_bytes({"ok.txt": b"x"}), "ok.txt", "../evil.txt"),  # catalog destination climbs out
    ],
    ids=["dotdot", "absolute", "symlink", "dest"],
)
def test_unsafe_archive_rejected(server, catalog, tmp_path, archive_body, member, dest):
    base, routes = server
    routes["/bad.archive"] = archive_body
    catalog(RemoteFile(dest, None, archive=Archive(f"{UPSTREAM}/bad.archive"), member=member))
    root = tmp_path / "root"
    with pytest.raises(UnsafePathError, match="escapes|link"):
        dl.download("scan", root, mirror=base)
    assert all_files(tmp_path) == []


def test_family_of():
    assert [dl.family_of(n) for n in ("scan_sp_simple", "scan_mcd1", "geo_funql_iid", "atis_sql_template")] == [
        "scan_sp", "scan", "geoquery_funql", "text2sql"]
    assert [dl.family_of(n) for n in ("cfq_mcd2_partial", "cogs_gen", "cogs", "text2sql")] == [
        "cfq", "cogs", "cogs", "text2sql"]
    with pytest.raises(ValueError, match="scan, scan_sp, geoquery_funql, text2sql, cfq, cogs"):
        dl.family_of("wikisql")


def test_cli(server, catalog, tmp_path, monkeypatch, capsys):
    base, routes = server
    routes["/f.txt"] = PLAIN
    catalog(RemoteFile("scan/f.txt", sha(PLAIN), url=f"{UPSTREAM}/f.txt"))
    monkeypatch.setenv(dl.MIRROR_ENV, base)
    monkeypatch.setenv("ZOO_DATA", str(tmp_path))  # the default root
    assert dl.main(["scan_simple"]) == 0
    assert f"fetched {tmp_path / 'scan/f.txt'}" in capsys.readouterr().out
    assert dl.main(["scan_simple", "--root", str(tmp_path)]) == 0
    assert "scan: 0 fetched, 1 skipped" in capsys.readouterr().out
    assert dl.main(["scan", "--force"]) == 0
    assert "scan: 1 fetched, 0 skipped" in capsys.readouterr().out

    # the module entry point, in a fresh interpreter: an unknown name fails listing the families
    proc = subprocess.run([sys.executable, "-m", "zoo.download", "nope", "--root", str(tmp_path)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert proc.returncode == 1 and "families: scan, scan_sp" in proc.stderr


MIRROR = Path(os.environ.get("ZOO_DATA", "/nonexistent"))
# Mirror files that no upstream holds: its own notes, and files derived from the others (partial CFQ splits).
NOT_UPSTREAM = re.compile(r"^README\.md$|PROVENANCE\.md$|^cfq/derived/|_partial/")


@pytest.mark.skipif(not (MIRROR / "scan").is_dir(), reason="ZOO_DATA does not point at the local data mirror")
def test_catalog_hashes_match_the_mirror():
    """The mirror is a byte-for-byte copy of the pinned upstream files, so this checks every catalog hash, and that
    the catalog covers every upstream file in the mirror."""
    catalogued = {entry.dest: entry.sha256 for entries in dl.CATALOG.values() for entry in entries}
    in_mirror = {p.relative_to(MIRROR).as_posix() for p in MIRROR.rglob("*") if p.is_file()}
    assert {dest for dest, h in catalogued.items() if h is None} == {"cfq/dataset.json"}  # the only unknown hash
    wrong = {dest for dest, h in catalogued.items() if h is not None and (
        dest not in in_mirror or dl._sha256_of(MIRROR / dest) != h)}
    assert wrong == set()
    assert {p for p in in_mirror if not NOT_UPSTREAM.search(p)} - catalogued.keys() == set()


def damaged_tar_gz() -> bytes:
    """A tar.gz cut in the middle of its one member, as a dropped connection without Content-Length leaves it."""
    whole = tar_gz_bytes({"rel/in_tar.txt": bytes(range(256)) * 400})
    return whole[: len(whole) // 2]


def damaged_zip() -> bytes:
    """A zip whose (stored) member has one byte changed: its CRC no longer matches."""
    return zip_bytes({"rel/in_tar.txt": IN_TAR * 50}).replace(IN_TAR, IN_TAR.upper(), 1)


@pytest.mark.parametrize("body", [b"<html>Service Unavailable</html>", damaged_tar_gz(), damaged_zip(),
                                  tar_gz_bytes({"x": b"y"})[:30]],
                         ids=["html", "cut_tar_gz", "bad_crc_zip", "cut_gzip"])
def test_a_download_that_is_no_archive_is_a_download_error(server, catalog, tmp_path, body):
    """A tarfile.ReadError (or BadZipFile, EOFError) traceback before; now one line naming the URL."""
    base, routes = server
    routes["/a.tar.gz"] = body
    catalog(RemoteFile("scan/in_tar.txt", sha(IN_TAR * 50), archive=Archive(f"{UPSTREAM}/a.tar.gz"),
                       member="rel/in_tar.txt"))
    with pytest.raises(DownloadError, match=rf"^{base}/a\.tar\.gz: not a zip or tar archive, or a damaged one \("):
        dl.download("scan", tmp_path, mirror=base)
    assert all_files(tmp_path) == []


def test_an_archive_without_a_hash_is_verified_through_its_members(server, catalog, tmp_path):
    """LEAR's zips have no known hash (the mirror holds their members): each member kept must match its own."""
    base, routes = server
    routes["/lear.zip"] = zip_bytes({"data/a.txt": IN_ZIP, "data/b.txt": b"tampered\n"})
    lear = Archive(f"{UPSTREAM}/lear.zip")
    catalog(RemoteFile("scan/a.txt", sha(IN_ZIP), archive=lear, member="data/a.txt"))
    report = dl.download("scan", tmp_path, mirror=base)
    assert report.fetched == ["scan/a.txt"] and report.unverified == {}  # not reported as unverified
    expected = sha(b"b\n")
    catalog(RemoteFile("scan/b.txt", expected, archive=lear, member="data/b.txt"))
    with pytest.raises(DownloadError, match=rf"lear\.zip!data/b\.txt: checksum mismatch: expected sha256 {expected}"):
        dl.download("scan", tmp_path, mirror=base)
    assert all_files(tmp_path) == ["scan/a.txt"]


def test_a_killed_download_leaves_nothing_that_the_next_one_keeps(server, catalog, tmp_path):
    """kill -9 in the middle of a transfer leaves atomic_path's hidden temporary file; the next download into the
    root deletes it (a download holds the root's lock, so no live download owns it)."""
    base, routes = server
    entry = RemoteFile("scan/f.txt", sha(PLAIN), url=f"{UPSTREAM}/stalls")
    script = ("import sys; from zoo import download as dl; from zoo.download import RemoteFile; "
              f"dl.CATALOG['scan'] = (RemoteFile('scan/f.txt', {entry.sha256!r}, url={entry.url!r}),); "
              "dl.download('scan', sys.argv[1], mirror=sys.argv[2])")
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path), base],
                             cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "scan").glob(".f.txt.*.tmp")):  # the transfer has begun, and stalls
            assert child.poll() is None and time.monotonic() < deadline, "the child never started writing"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    [left] = (tmp_path / "scan").glob(".f.txt.*.tmp")
    (tmp_path / "scan" / ".g.txt.abcdefgh.tmp").write_text("another file's: kept")  # not a target's leftover
    routes["/f.txt"] = PLAIN
    catalog(RemoteFile("scan/f.txt", sha(PLAIN), url=f"{UPSTREAM}/f.txt"))
    dl.download("scan", tmp_path, mirror=base)
    assert all_files(tmp_path) == ["scan/.g.txt.abcdefgh.tmp", "scan/f.txt"] and not left.exists()


def test_an_unwritable_root_is_a_download_error(server, catalog, tmp_path):
    base, routes = server
    routes["/f.txt"] = PLAIN
    catalog(RemoteFile("scan/f.txt", sha(PLAIN), url=f"{UPSTREAM}/f.txt"))
    (tmp_path / "root").write_text("a file where the data root should be")
    with pytest.raises(DownloadError, match=rf"^cannot write the download under {tmp_path / 'root'}: "):
        dl.download("scan", tmp_path / "root", mirror=base)


def test_offline_data_download_is_a_one_line_user_error(tmp_path, monkeypatch):
    """data.download=true without a network (what `make run` passes): a DownloadError saying that the download
    failed, with the URL, which benchmarks/run.py reports in one line (it printed a traceback)."""
    import importlib.util

    from conftest import compose_run
    from zoo.launch import run

    spec = importlib.util.spec_from_file_location("run_cli", Path(__file__).resolve().parents[1] / "benchmarks/run.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    with socket.socket() as closed:  # a port that nothing listens on: connection refused, as offline
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv(dl.MIRROR_ENV, f"http://127.0.0.1:{closed.getsockname()[1]}")
    cfg = compose_run("debug=smoke", "data=scan_simple", f"data.root={tmp_path / 'data'}", "data.download=true",
                      f"results_file={tmp_path / 'results.csv'}")
    with pytest.raises(DownloadError) as err:
        run(cfg, tmp_path / "run")
    assert isinstance(err.value, cli.USER_ERRORS)
    assert re.fullmatch(r"data\.download=true could not fetch 'scan_simple' into \S+ \(http://127\.0\.0\.1:\d+/"
                        r"brendenlake/SCAN/\w+/simple_split/tasks_(train|test)_simple\.txt: transfer failed: .*\); "
                        r"without network, copy the files listed above there", str(err.value))
