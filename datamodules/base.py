"""What every dataset reader shares: the data root, clear errors, and line/JSON reading helpers.

Readers are plain functions ``reader(root) -> {"train": [...], "dev": [...], "test": [...]}`` registered with
``zoo.registry.register_dataset`` (docs/DESIGN.md, Contracts). They read the public release layout as it lies under the
data root (see ``../shared/data/README.md`` for the local mirror) and report a missing file or a malformed line in
words a user can act on: which file, which line, what was expected, and how to get the data.
"""
from __future__ import annotations

import json
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zoo.download import default_root
from zoo.formalisms import FormalismError, get_formalism
from zoo.registry import DATASETS, DatasetSpec, register_dataset
from zoo.types import Example

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = REPO_ROOT / "data"


# ----------------------------------------------------------------------------------------------------------------
# The data root
# ----------------------------------------------------------------------------------------------------------------
def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: ``root`` when given (``data.root=``), else ``$ZOO_DATA``, else ``<repo>/data``."""
    if root is not None and str(root) != "":
        return Path(root).expanduser().resolve()
    return default_root().expanduser().resolve()


def describe_root(root: str | os.PathLike) -> str:
    """Say how ``root`` was most likely chosen, so an error message tells the user which knob to turn."""
    root = Path(root).expanduser().resolve()
    env = os.environ.get("ZOO_DATA")
    if env and Path(env).expanduser().resolve() == root:
        how = "taken from $ZOO_DATA"
    elif root == DEFAULT_ROOT:
        how = "the default <repo>/data, used because data.root is null and $ZOO_DATA is unset"
    else:
        how = "given as data.root="
    return f"{root} ({how}; set data.root=<dir> or ZOO_DATA=<dir> to use another)"


# ----------------------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------------------
class MissingDataError(FileNotFoundError):
    """A file a dataset needs is not under the data root.

    ``download`` is the name to give ``python -m zoo.download`` (default: the dataset's); ``""`` when the files
    cannot be downloaded (then ``hint`` says where they come from).
    """

    def __init__(self, dataset: str, root: str | os.PathLike, missing: Sequence[str | os.PathLike],
                 hint: str = "", download: str | None = None):
        self.dataset, self.root, self.missing = dataset, Path(root), [Path(root) / m for m in missing]
        lines = [f"dataset {dataset!r} is missing {len(self.missing)} file(s):"]
        lines += [f"  {p}" for p in self.missing]
        lines.append(f"data root: {describe_root(root)}")
        if hint:
            lines.append(hint)
        if download != "":
            lines.append(f"download it with: python -m zoo.download {download or dataset} --root {self.root} "
                         "(or run with data.download=true)")
        super().__init__("\n".join(lines))

    def __str__(self) -> str:  # FileNotFoundError's default prefixes "[Errno None]"
        return str(self.args[0])


class DataConfigError(ValueError):
    """Data options that cannot apply to this dataset (a subsample larger than its training set...)."""


class DataFormatError(ValueError):
    """A line (or JSON entry) of a data file that does not have the documented format."""

    def __init__(self, path: str | os.PathLike, line: int | None, expected: str, detail: str = ""):
        self.path, self.line, self.expected = Path(path), line, expected
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: malformed data{': ' + detail if detail else ''}; expected {expected}")


# What reading a dataset raises for a fault of the data or its options, not of the code: every command says it in
# one line (zoo.launch.USER_ERRORS and the command-line tools catch this one tuple).
DATA_ERRORS = (MissingDataError, DataFormatError, DataConfigError)


# ----------------------------------------------------------------------------------------------------------------
# Registration with alternative layouts
# ----------------------------------------------------------------------------------------------------------------
def register(name: str, *, formalism: str, files: Sequence[str], family: str, description: str,
             alternatives: Sequence[Sequence[str]] = (), missing_hint: str = "", download: str | None = None,
             world: str | None = None, lowercase: bool = False, heldout: Callable | None = None):
    """``register_dataset`` plus what ``check_files`` needs: other complete file sets that also work, and the
    hint and download name for the missing-data message, and the ``world`` file (relative to the root) that the
    formalism's ``load_world`` reads for execution; ``lowercase``: every utterance of the dataset is lower-case, so
    ``zoo.inference`` lower-cases a new one; ``heldout``: the rule of the dataset's test split, ``(examples, size,
    seed) -> (kept, held out)`` (``heldout_longest`` ...), for ``data.heldout`` (all kept in ``DatasetSpec.extra``)."""

    return register_dataset(name, formalism=formalism, files=tuple(files), family=family, description=description,
                            alternatives=[tuple(a) for a in alternatives], missing_hint=missing_hint,
                            download=download, world=world, lowercase=lowercase, heldout=heldout)


def require_any(dataset: str, root: str | os.PathLike, layouts: Sequence[Sequence[str]], hint: str = "",
                download: str | None = None) -> int:
    """Index of the first layout (a set of paths relative to ``root``) whose files all exist; otherwise a
    ``MissingDataError`` naming what the first (preferred) layout lacks."""
    root = Path(root)
    for i, layout in enumerate(layouts):
        if all((root / f).is_file() for f in layout):
            return i
    missing = [f for f in layouts[0] if not (root / f).is_file()]
    raise MissingDataError(dataset, root, missing, hint, download)


def require(dataset: str, root: str | os.PathLike, rel: str) -> Path:
    """``root / rel`` if it is a file, else a ``MissingDataError`` for ``dataset``."""
    extra = DATASETS[dataset].extra if dataset in DATASETS else {}
    require_any(dataset, root, [(rel,)], extra.get("missing_hint", ""), extra.get("download"))
    return Path(root) / rel


def check_files(spec: DatasetSpec, root: str | os.PathLike) -> tuple[str, ...]:
    """The complete file layout ``spec`` will read under ``root``; ``MissingDataError`` when there is none."""
    layouts = [spec.files, *spec.extra.get("alternatives", ())]
    i = require_any(spec.name, root, layouts, spec.extra.get("missing_hint", ""), spec.extra.get("download"))
    return tuple(layouts[i])


# ----------------------------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------------------------
@contextmanager
def open_text(path: str | os.PathLike) -> Iterator[Any]:
    """``path`` opened as UTF-8 text (a byte-order mark skipped). A byte that is not UTF-8 becomes a
    ``DataFormatError`` naming the file, the line and the column, where Python's own error names neither."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            yield f
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except (PermissionError, IsADirectoryError) as e:  # a missing file is check_files' to report, with its remedy
        raise DataConfigError(f"{path}: cannot read it ({e.strerror})") from None


def not_utf8(path: str | os.PathLike) -> DataFormatError:
    """The error for the first line of ``path`` that is not UTF-8 (found again line by line: a decoding error
    only knows its offset in the chunk being decoded)."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                return DataFormatError(path, lineno, "UTF-8 text",
                                       f"byte 0x{line[e.start]:02x} at column {e.start + 1} is not UTF-8")
    return DataFormatError(path, None, "UTF-8 text", "not UTF-8")


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """``(1-based line number, line without its newline)`` for every non-blank line of a UTF-8 text file."""
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if line.strip():
                yield lineno, line


Parse = Callable[[str], tuple[str, str, dict[str, Any]]]


_CHECK_PROGRAMS = [True]


@contextmanager
def programs_unchecked() -> Iterator[None]:
    """Read without ``ProgramCheck``: ``python -m zoo.formalisms verify`` reports every broken program itself, where
    a reader stops at the first."""
    _CHECK_PROGRAMS.append(False)
    try:
        yield
    finally:
        _CHECK_PROGRAMS.pop()


class ProgramCheck:
    """Refuses a gold program that its formalism does not parse (``verify``'s "parsed"), and, where the formalism
    knows the grammar of the utterances (SCAN), one that is not what its utterance means ("interpreted"): a file
    cut inside a program (``... I_TURN_RIG``) or after a whole action must not be read as data. Each distinct
    program (SCAN: pair) is checked once: about a CPU second for all of cfq_mcd1 (120k queries) or cogs_gen."""

    def __init__(self, formalism: str):
        self.formalism = get_formalism(formalism)
        self.expected = f"a {formalism} program" + (" that its command means" if self.formalism.interprets else "")
        self.checked: set = set()

    def __call__(self, program: str, utterance: str = "") -> None:
        """Raise ``FormalismError`` saying what is wrong with ``program`` (of ``utterance``)."""
        key = (utterance, program) if self.formalism.interprets else program
        if key in self.checked or not _CHECK_PROGRAMS[-1]:
            return
        if self.formalism.interprets:
            canonical = self.formalism.canonical(program)
            meant = self.formalism.canonical(self.formalism.interpret(utterance))
            if canonical != meant:
                raise FormalismError(f"{self.formalism.name}: {utterance!r} means {meant!r}, not {canonical!r}")
        else:
            self.formalism.parse(program)
        self.checked.add(key)


def read_examples(path: str | os.PathLike, parse: Parse, expected: str,
                  formalism: str | None = None) -> list[Example]:
    """One ``Example`` per non-blank line: ``parse(line) -> (utterance, program, meta)``.

    ``parse`` signals a malformed line by raising ``ValueError``/``KeyError``/``TypeError``; that becomes a
    ``DataFormatError`` naming the file, the line and ``expected``. With ``formalism``, every program must pass
    its ``ProgramCheck``. ``meta["index"]`` is the example's position in the file. A file without examples is an
    error too: an empty split fails only later, inside training.
    """
    check = ProgramCheck(formalism) if formalism else None
    examples = []
    for lineno, line in iter_lines(path):
        try:
            utterance, program, meta = parse(line)
        except (ValueError, KeyError, TypeError) as e:
            raise DataFormatError(path, lineno, expected, str(e)) from None
        if not utterance.strip() or not program.strip():
            raise DataFormatError(path, lineno, expected, "empty utterance or program")
        if check is not None:
            try:
                check(program, utterance)
            except FormalismError as e:
                raise DataFormatError(path, lineno, check.expected, str(e)) from None
        examples.append(Example(utterance, program, {"index": len(examples), **meta}))
    return require_examples(examples, path, expected)


def require_examples(examples: list, path: str | os.PathLike, expected: str) -> list:
    """``examples``, unless there are none: then a ``DataFormatError`` for ``path``."""
    if not examples:
        raise DataFormatError(path, None, expected, "no examples")
    return examples


def json_record(line: str, *keys: str) -> dict[str, Any]:
    """One JSON-lines record whose ``keys`` hold strings (``ValueError`` naming the first that does not)."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError(f"a JSON {type(record).__name__} instead of an object")
    for k in keys:
        if not isinstance(record.get(k), str):
            found = "missing" if k not in record else type(record[k]).__name__
            raise ValueError(f"field {k!r} is {found}, not a string")
    return record


def register_line_dataset(name: str, *, formalism: str, family: str, description: str, files: dict[str, str],
                          parse: Parse, expected: str, lowercase: bool = False, heldout: Callable | None = None):
    """Register a dataset whose every part (train/dev/test) is one file with one example per line."""

    @register(name, formalism=formalism, files=tuple(files.values()), family=family, description=description,
              lowercase=lowercase, heldout=heldout)
    def read(root: str) -> dict[str, list[Example]]:
        return {part: read_examples(require(name, root, rel), parse, expected, formalism)
                for part, rel in files.items()}

    read.__name__ = read.__qualname__ = f"read_{name}"
    return read


def load_json(path: str | os.PathLike, expected: str) -> Any:
    """``json.load`` for a whole (small) file, a syntax error becoming a ``DataFormatError`` with its line."""
    with open_text(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise DataFormatError(path, e.lineno, expected, e.msg) from None


_WHITESPACE = re.compile(r"\s*")


def iter_json_array(path: str | os.PathLike, expected: str, chunk_chars: int = 1 << 22) -> Iterator[tuple[int, Any]]:
    """Stream the items of a file holding one top-level JSON array: ``(line the item starts on, item)``.

    Used for CFQ's ``dataset.json`` (several GB, 239,357 entries), which ``json.load`` would hold in memory whole;
    this keeps one ``chunk_chars`` window plus the current item.
    """
    decoder = json.JSONDecoder()
    with open_text(path) as f:
        buf, pos, lineno, eof = "", 0, 1, False

        def skip_space() -> bool:
            """Advance past whitespace, refilling the window; False at end of file."""
            nonlocal buf, pos, lineno, eof
            while True:
                end = _WHITESPACE.match(buf, pos).end()
                lineno += buf.count("\n", pos, end)
                pos = end
                if pos < len(buf):
                    return True
                if eof:
                    return False
                buf, pos = f.read(chunk_chars), 0
                eof = len(buf) < chunk_chars

        def fail(detail: str):
            raise DataFormatError(path, lineno, expected, detail)

        if not skip_space() or buf[pos] != "[":
            fail("the file does not start with '['")
        pos += 1
        first = True
        while True:
            if not skip_space():
                fail("unexpected end of file inside the array")
            if buf[pos] == "]":
                return
            if not first:
                if buf[pos] != ",":
                    fail(f"expected ',' or ']' between items, found {buf[pos]!r}")
                pos += 1
                if not skip_space():
                    fail("unexpected end of file after ','")
            first = False
            while True:  # decode one item, widening the window until it holds the whole item
                try:
                    item, end = decoder.raw_decode(buf, pos)
                    if end < len(buf) or eof:
                        break
                except json.JSONDecodeError as e:
                    # near the window's end the item may just be cut off: read on; anywhere else it is broken
                    if eof or (len(buf) - e.pos > 16 and not e.msg.startswith("Unterminated string")):
                        lineno += buf.count("\n", pos, e.pos)
                        fail(f"invalid JSON item: {e.msg}")
                chunk = f.read(chunk_chars)
                eof = len(chunk) < chunk_chars
                buf, pos = buf[pos:] + chunk, 0
            yield lineno, item
            lineno += buf.count("\n", pos, end)
            pos = end


# ----------------------------------------------------------------------------------------------------------------
# Held-out test sets from the training set (data.heldout): a dataset's split rule applied to its own training set
# ----------------------------------------------------------------------------------------------------------------
def _split(examples: list, held: set[int]) -> tuple[list, list]:
    return [e for i, e in enumerate(examples) if i not in held], [e for i, e in enumerate(examples) if i in held]


def heldout_longest(examples: list, size: int, seed: int) -> tuple[list, list]:
    """(kept, held out): the examples whose programs (in tokens) are at least as long as the ``size``-th longest,
    as a length split sends the longest programs to its test set. Programs as long as that one all go with it, so
    every held-out program is longer than every kept one: the held-out set is a length extrapolation, and may be
    larger than ``size`` (GeoQuery LENGTH's training set has 215 programs of its longest length, 16 tokens).
    ``seed`` plays no part."""
    lengths = [len(e.program.split()) for e in examples]
    cut = sorted(lengths, reverse=True)[size - 1]
    return _split(examples, {i for i, length in enumerate(lengths) if length >= cut})


def heldout_random(examples: list, size: int, seed: int) -> tuple[list, list]:
    """(kept, held out): a ``seed``-determined random ``size`` examples, as an IID split draws its test set."""
    return _split(examples, set(random.Random(seed).sample(range(len(examples)), size)))


def heldout_templates(template: Callable[[str], str]) -> Callable[[list, int, int], tuple[list, list]]:
    """A rule holding out whole program templates (``template(program)``) in a ``seed``-shuffled order until at
    least ``size`` examples are held out, as a template split keeps its test templates out of training."""

    def rule(examples: list, size: int, seed: int) -> tuple[list, list]:
        templates = [template(e.program) for e in examples]
        order = sorted(set(templates))
        random.Random(seed).shuffle(order)
        count, chosen, total = Counter(templates), set(), 0
        for name in order:
            if total >= size:
                break
            chosen.add(name)
            total += count[name]
        return _split(examples, {i for i, name in enumerate(templates) if name in chosen})

    return rule
