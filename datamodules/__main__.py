"""``python -m datamodules stats [--root R]``: split sizes of every registered dataset present under the data root.

``dev`` is the real dev set where the dataset has one, else the validation slice that ``ParsingDataModule`` holds
out of train with its default ``val_fraction``/``val_seed`` (marked ``*``; ``train`` is then shown without it).
"""
from __future__ import annotations

import argparse
import inspect

from datamodules import ParsingDataModule
from datamodules.base import (DataConfigError, DataFormatError, MissingDataError, check_files, describe_root,
                              resolve_root)
from datamodules.datamodule import clear_cache
from zoo.registry import DATASETS


def stats(root: str | None) -> str:
    root = resolve_root(root)
    defaults = inspect.signature(ParsingDataModule).parameters
    rows, missing, unreadable = [], [], []
    for name, spec in DATASETS.items():
        try:
            check_files(spec, root)
        except MissingDataError as e:
            more = f" and {len(e.missing) - 1} more" if len(e.missing) > 1 else ""
            note = f"  {name}: missing {e.missing[0].relative_to(root)}{more}"
            if f"{name}_partial" in DATASETS:
                note += f" (a partial subset is {name}_partial)"
            missing.append(note)
            continue
        dm = ParsingDataModule(name, root=str(root))
        try:
            dm.setup()
        except (DataFormatError, DataConfigError) as e:  # names the file and line; the other datasets still count
            unreadable.append(f"  {name}: {e}")
            continue
        dev = f"{len(dm.val):,}" + ("*" if dm.val_held_out else "")
        rows.append((name, spec.formalism, f"{len(dm.train):,}", dev, f"{len(dm.test):,}"))
        clear_cache()  # one dataset in memory at a time
    header = ("name", "formalism", "train", "dev", "test")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row):  # names left-aligned, counts right-aligned
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    lines = [f"data root: {describe_root(root)}", "", fmt(header), fmt(tuple("-" * w for w in widths))]
    lines += [fmt(r) for r in rows]
    if any(r[3].endswith("*") for r in rows):
        lines.append(f"\n* held out from train by ParsingDataModule (val_fraction={defaults['val_fraction'].default}, "
                     f"val_seed={defaults['val_seed'].default}); train is counted without it.")
    if missing:
        lines += ["", "not present under this root (skipped):", *missing]
    if unreadable:
        lines += ["", "present but not readable (skipped):", *unreadable]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m datamodules", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    stats_parser = commands.add_parser("stats", help="split sizes of every dataset present under the data root")
    stats_parser.add_argument("--root", default=None, help="data root (default: $ZOO_DATA, else <repo>/data)")
    args = parser.parse_args(argv)
    if args.command == "stats":
        print(stats(args.root))


if __name__ == "__main__":
    main()
