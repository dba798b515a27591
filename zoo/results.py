"""Where measured numbers go: one row per run in ``results/runs.csv``, predictions in the run directory.

Both writers replace the target in one ``os.replace``, so a run killed mid-write leaves the old file intact and
never a half-written row; an exclusive lock on a sibling ``.lock`` file keeps concurrent runs (Hydra multirun,
several jobs on one disk) from losing each other's rows.

Readers take a table only whole: a row that does not fit its header (cut off, shifted by a stray comma, swallowed by
an unclosed quote), a byte that is not UTF-8 or a missing column is a ``ResultsFileError`` naming the file, line and
column, never a row averaged into the wrong cell. ``$ZOO_RESULTS`` (configs/run.yaml's ``results_file``) moves the
runs table, and every other table with it (``results_table``). Rows record run directories relative to the
repository (``path_for_row``), so they stay true in another checkout.
"""
from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
# What names a run in a runs table: readers that group or look up runs require these columns.
RUN_KEYS = ("model", "variant", "backbone", "data", "seed")


class ResultsFileError(ValueError):
    """A results table that cannot be read as one: the message names the file, the line and the column."""


class Row(dict):
    """One row of a results table: its cells by column name, and the ``line`` of the file it starts on."""

    def __init__(self, cells: Iterable[tuple[str, str]], line: int):
        super().__init__(cells)
        self.line = line


def setting(variable: str, default: str) -> str:
    """``$variable``, else ``default``: set but empty (``ZOO_RESULTS= python ...``) counts as unset, as for every
    variable of the zoo. The configs read ``ZOO_RESULTS`` and ``ZOO_RUNS`` through it too (``${zoo_env:...}``,
    registered in zoo/__init__.py): with OmegaConf's ``oc.env`` an empty ``ZOO_RESULTS`` sent a run's row into its
    run directory while every reader read results/runs.csv, and an empty ``ZOO_RUNS`` put run directories under /."""
    return os.environ.get(variable) or default


def runs_file() -> Path:
    """The runs table, as configs/run.yaml's ``results_file`` reads it: ``$ZOO_RESULTS``, else results/runs.csv; a
    relative path is the repository's."""
    return REPO_ROOT / setting("ZOO_RESULTS", "results/runs.csv")


def results_table(name: str) -> Path:
    """The default path of the table ``name`` (``formalisms.csv``, ``leaderboard.csv``...): beside the runs table,
    so that a scratch ``$ZOO_RESULTS`` never sends the other tables into the repository's results/."""
    return runs_file().parent / name


def path_for_row(path: str | Path) -> str:
    """A directory as a results row records it: relative to the repository when inside it, so the row stays true in
    another checkout or on another machine; absolute otherwise (``$ZOO_RUNS`` on another disk)."""
    path = Path(os.path.abspath(path))
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def path_from_row(recorded: str) -> Path:
    """A directory that a results row records (``run_dir``, each of ``stage_dirs``): relative to the repository, or
    absolute, as rows recorded them before issue 25 (``/work/main/runs/...``)."""
    return REPO_ROOT / recorded


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path``; whatever the block writes there replaces ``path`` when it succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; results are meant to be read by everyone
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextmanager
def _atomic_writer(path: Path) -> Iterator[Any]:
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


def read_rows(path: str | Path, required: Sequence[str] = ()) -> list[Row]:
    """The rows of the table at ``path`` (none when there is no file), each column of ``required`` present and
    filled in every row, a ``seed`` in one spelling (``_one_spelling``). A table that cannot be read whole is a
    ``ResultsFileError``: a reader would otherwise average the wrong cells, and a writer drop rows."""
    path = Path(path)
    if not path.exists():
        return []
    text = _utf8_text(path)
    lines = io.StringIO(text, newline="").readlines()
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header, rows, start = None, [], 1  # start: the line the next record begins on
    try:
        for cells in reader:
            first, start = start, reader.line_num + 1
            if len(cells) <= 1 and not "".join(cells).strip():
                continue  # a blank line
            if header is None:
                header = _checked_header(path, first, cells, required)
            elif len(cells) != len(header):
                raise ResultsFileError(_misfit(path, lines, first, reader.line_num, len(cells), header))
            else:
                rows.append(row := Row(zip(header, cells), first))
                if "seed" in row:
                    row["seed"] = _one_spelling(row["seed"])
                for column in required:
                    if not row[column].strip():
                        raise cell_error(path, row, column, "is empty")
    except csv.Error as error:
        if "end of data" in str(error):
            consequence = "the file ends inside it"
        else:
            consequence = f"it runs on to line {reader.line_num} ({error})" if reader.line_num > start else str(error)
        raise ResultsFileError(_quote_problem(path, lines, start, header or [], consequence)
                               or f"{path}:{reader.line_num}: {error}") from None
    return rows


def _one_spelling(seed: str) -> str:
    """A seed as its run wrote it: "1.0", as pandas saves seed 1 when the column has a blank (a column of floats),
    is "1", so that readers that group or replace rows by seed take the two for one seed; any other cell stays."""
    try:
        value = float(seed)
    except ValueError:
        return seed
    return str(int(value)) if value.is_integer() else seed


def check_appendable(*paths: str | Path | None) -> None:
    """Read the tables a command will append to (None or '' for none) before it works: one that its rows could not
    join is a ResultsFileError now, not rows set aside when the work is done."""
    for path in paths:
        if path:
            read_rows(path)


def cell_error(path: str | Path, row: Row, column: str, problem: str) -> ResultsFileError:
    """``<path>:<line>: column <k> (<name>) <problem>``: a cell that a reader cannot use."""
    return ResultsFileError(f"{path}:{row.line}: column {list(row).index(column) + 1} ({column}) {problem}")


def fraction(path: str | Path, row: Row, column: str) -> float | None:
    """The metric in ``row[column]``, a fraction in [0, 1] as runs tables store them (never percent); None when
    the cell is empty (a metric the run's dataset does not have)."""
    cell = row.get(column, "").strip()
    if not cell:
        return None
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # also nan
        raise cell_error(path, row, column, f"is {cell!r}, not a fraction in [0, 1]")
    return value


def _utf8_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ResultsFileError(f"{path}: cannot read it ({error.strerror})") from None
    data = data.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark, as spreadsheets save
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ResultsFileError(f"{_position(path, data, error.start)}: byte 0x{data[error.start]:02x} is not UTF-8 "
                               "(results tables are UTF-8 text)") from None
    if b"\0" in data:  # what a crash leaves in the blocks a file had not yet written
        raise ResultsFileError(f"{_position(path, data, data.index(0))}: a NUL byte (damaged on disk?)")
    return text


def _position(path: Path, data: bytes, offset: int) -> str:
    """``<path>:<line>:<column>`` of a byte offset."""
    line, column = data.count(b"\n", 0, offset) + 1, offset - data.rfind(b"\n", 0, offset)
    return f"{path}:{line}:{column}"


def _checked_header(path: Path, line: int, header: list[str], required: Sequence[str]) -> list[str]:
    for k, name in enumerate(header, 1):
        if not name.strip():
            raise ResultsFileError(f"{path}:{line}: column {k} has no name")
        if header.index(name) + 1 < k:
            raise ResultsFileError(f"{path}:{line}: column {k} repeats the name {name!r} of column "
                                   f"{header.index(name) + 1}")
    for name in required:
        if name not in header:
            raise ResultsFileError(f"{path}:{line}: no column {name!r} (expected the columns {', '.join(required)})")
    return header


def _misfit(path: Path, lines: list[str], first: int, last: int, cells: int, header: list[str]) -> str:
    """Why a record of ``cells`` cells from line ``first`` to ``last`` does not fit the header."""
    if last > first:  # a line break inside a quoted cell: mostly a quote that was never closed
        problem = _quote_problem(path, lines, first, header, f"it runs on to line {last}")
        if problem:
            return problem
    if last == len(lines) and not lines[-1].endswith(("\n", "\r")) and cells < len(header):
        return f"{path}:{first}: {cells} cells for {len(header)} columns: the file ends in the middle of this row"
    return f"{path}:{first}: {cells} cells for the {len(header)} columns of the header"


def _quote_problem(path: Path, lines: list[str], line: int, header: list[str], consequence: str) -> str | None:
    """Names the cell of ``line`` whose quote is not closed where a cell can end, if there is one."""
    cell = _unclosed_quote(lines[line - 1]) if line <= len(lines) else None
    if cell is None:
        return None
    name = f" ({header[cell]})" if cell < len(header) else ""
    return f"{path}:{line}: column {cell + 1}{name}: the quote that opens this cell does not close at a cell's end; " \
           f"{consequence}"


def _unclosed_quote(line: str) -> int | None:
    """The index of the cell of one CSV line whose opening quote has no closing quote right before a comma or the
    end of the line, None when every quoted cell closes."""
    line, cell, i = line.rstrip("\r\n"), 0, 0
    while True:
        if line.startswith('"', i):
            end = line.find('"', i + 1)
            while end != -1 and line.startswith('"', end + 1):  # "" is a quote inside the cell
                end = line.find('"', end + 2)
            if end == -1 or line[end + 1:end + 2] not in ("", ","):
                return cell
            i = end + 1
        else:
            i = line.find(",", i)
            if i == -1:
                return None
        if i == len(line):
            return None
        i, cell = i + 1, cell + 1


@contextmanager
def locked_directory(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` itself (created if need be; no lock file is left behind), held until the
    block ends: processes that write into one directory (a data root being downloaded, a stage being trained) take
    turns there."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def append_row(path: str | Path, row: dict[str, Any], replacing: Sequence[str] = ()) -> None:
    """Append ``row`` to a CSV whose header grows to the union of all rows' keys (old rows get empty cells). With
    ``replacing`` (column names), an earlier row that agrees with ``row`` on all of them is dropped: for tables of
    current facts, such as one row per IR and dataset."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            rows = read_rows(path)
        except ResultsFileError as damage:  # the row is a finished measurement: keep it, beside the table
            raise ResultsFileError(f"{damage}; the new row went to {_set_aside(path, row)} instead: repair "
                                   f"{path.name} and append it there") from None
        rows = [old for old in rows if not replacing or any(old.get(key) != str(_cell(row[key])) for key in replacing)]
        header = list(rows[0].keys()) if rows else []
        header += [key for key in row if key not in header]
        with _atomic_writer(path) as handle:
            writer = csv.DictWriter(handle, fieldnames=header, restval="")
            writer.writeheader()
            writer.writerows(rows + [{k: _cell(v) for k, v in row.items()}])


def _set_aside(path: Path, row: dict[str, Any]) -> Path:
    """A new table beside ``path`` that holds ``row`` alone."""
    fd, aside = tempfile.mkstemp(dir=path.parent, prefix=f"{path.stem}.unappended-", suffix=path.suffix)
    os.close(fd)
    write_rows(aside, [row])
    return Path(aside)


def write_rows(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Replace the CSV at ``path`` with ``rows`` (a table a benchmark script recomputes as a whole)."""
    header = list(dict.fromkeys(key for row in rows for key in row))
    with _atomic_writer(Path(path)) as handle:
        writer = csv.DictWriter(handle, fieldnames=header, restval="")
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)


def _cell(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value


# The fields of every row of a run's predictions.jsonl (zoo.parser's test_step), and their types.
PREDICTION_FIELDS = {"utterance": str, "gold": str, "prediction": str, "correct": bool}
_JSON_KINDS = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a run's ``predictions.jsonl``, each a JSON object with ``PREDICTION_FIELDS``. A line that is not
    one, or a file without rows, is a ``ResultsFileError`` naming the file and the line: a report would otherwise
    stop in a traceback, or count a damaged run as a smaller one."""
    path = Path(path)
    expected = f"expected one JSON object per line with {', '.join(PREDICTION_FIELDS)}"
    rows = []
    # split at line feeds alone: write_jsonl keeps U+2028 and its kin unescaped, and str.splitlines splits at them
    for number, line in enumerate(_utf8_text(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ResultsFileError(f"{path}:{number}:{error.colno}: not JSON ({error.msg}); {expected}") from None
        if not isinstance(row, dict):
            raise ResultsFileError(f"{path}:{number}: a JSON {_JSON_KINDS[type(row)]}, not an object; {expected}")
        for field, kind in PREDICTION_FIELDS.items():
            if field not in row:
                raise ResultsFileError(f"{path}:{number}: no field {field!r}; {expected}")
            if not isinstance(row[field], kind):
                raise ResultsFileError(f"{path}:{number}: field {field!r} is of type {_JSON_KINDS[type(row[field])]}"
                                       f", not {_JSON_KINDS[kind]}; {expected}")
        rows.append(row)
    if not rows:
        raise ResultsFileError(f"{path}: no predictions; {expected}")
    return rows


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    with _atomic_writer(Path(path)) as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def merge_rows(source: str | Path, target: str | Path) -> int:
    """Append to ``target`` each row of ``source`` that it does not hold yet (a run is the same run when its time,
    commit, model, variant, backbone, data, seed and run directory agree; in a table of other rows, such as
    ``ggd_speed.csv``, which has no ``time``, a row is the same row when all its cells agree): the rows of another
    machine, such as a GPU machine's results file copied back. Returns how many were appended; merging twice
    appends none."""
    header = next(csv.reader(io.StringIO(_utf8_text(Path(source)))), []) if Path(source).exists() else []
    runs = "time" in header or not header
    rows = read_rows(source, required=("time", *RUN_KEYS) if runs else ())
    identity = ("time", "git_commit", *RUN_KEYS, "run_dir") if runs else tuple(header)
    held = {tuple(row.get(key, "") for key in identity) for row in read_rows(target)}
    added = 0
    for row in rows:
        if tuple(row.get(key, "") for key in identity) not in held:
            append_row(target, dict(row))
            added += 1
    return added
