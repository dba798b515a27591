"""Where measured numbers go: one row per run in ``results/runs.csv``, predictions in the run directory.

Both writers replace the target in one ``os.replace``, so a run killed mid-write leaves the old file intact and
never a half-written row; an exclusive lock on a sibling ``.lock`` file keeps concurrent runs (Hydra multirun,
several jobs on one disk) from losing each other's rows.
"""
from __future__ import annotations

import csv
import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence


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


def read_rows(path: str | Path) -> list[dict[str, str]]:
    path = Path(path)
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def append_row(path: str | Path, row: dict[str, Any], replacing: Sequence[str] = ()) -> None:
    """Append ``row`` to a CSV whose header grows to the union of all rows' keys (old rows get empty cells). With
    ``replacing`` (column names), an earlier row that agrees with ``row`` on all of them is dropped: for tables of
    current facts, such as one row per IR and dataset."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = [old for old in read_rows(path)
                if not replacing or any(old.get(key) != str(_cell(row[key])) for key in replacing)]
        header = list(rows[0].keys()) if rows else []
        header += [key for key in row if key not in header]
        with _atomic_writer(path) as handle:
            writer = csv.DictWriter(handle, fieldnames=header, restval="")
            writer.writeheader()
            writer.writerows(rows + [{k: _cell(v) for k, v in row.items()}])


def write_rows(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Replace the CSV at ``path`` with ``rows`` (a table a benchmark script recomputes as a whole)."""
    header = list(dict.fromkeys(key for row in rows for key in row))
    with _atomic_writer(Path(path)) as handle:
        writer = csv.DictWriter(handle, fieldnames=header, restval="")
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)


def _cell(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    with _atomic_writer(Path(path)) as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
