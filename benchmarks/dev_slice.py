"""Exact match of trained runs on the dev questions that match a pattern: where a seed fails, read on dev only.

Issue 24 asks where GGD's seeds differ. MCD splits withhold constructions from training, and a seed that never
learned to compose one fails on all of its questions at once; this script measures that on dev, so that what it
finds may feed a choice (the test set stays unread):

    python benchmarks/dev_slice.py "^Who was M[0-9] ' s" runs/ggd-authors_sizes-groupmax/cfq_mcd1/seed*

Each run is loaded as ``python -m zoo.parse`` loads it (``zoo.load``: its tested checkpoint, GGD's thresholds as
chosen on dev) and parses the dev questions whose utterance matches the regular expression; a question counts as
right by the same exact match as a run's (``zoo.metrics.exact_match_flags``; an unparsable prediction is wrong).
A row per (run, pattern) goes to ``results/dev_slices.csv`` (``--out``), replacing that pair's earlier row, with
how many training and dev questions match: a pattern with no training question is a construction that training
withheld. It also says what the wrong answers lack and add: ``most_missed`` and ``most_added`` name the structural
tokens (the formalism's ``structure``: CFQ relations and types, FunQL predicates, SQL columns) that the most wrong
answers have fewer or more of than the gold program, each with its number of questions.

``--ensemble`` scores the runs as one model, the mean of their scores (``average_with``: GGD's logits, span_cky's
span scores), at the first run's thresholds; its row names every run directory and seed (``variant`` gains
``+ensemble``). The weak seeds of MCD1 each fail on some withheld construction, not on the same one, which an
average may mend:

    python benchmarks/dev_slice.py --ensemble "" runs/ggd-authors_sizes-groupmax/cfq_mcd1/seed{1,2,3}
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from datamodules import read_splits  # noqa: E402
from zoo.formalisms import get_formalism  # noqa: E402
from zoo.inference import load, results_row  # noqa: E402
from zoo.metrics import exact_match_flags  # noqa: E402
from zoo.registry import get_dataset  # noqa: E402
from zoo.results import append_row, path_for_row, results_table  # noqa: E402
from zoo.train import git_commit  # noqa: E402


def structure_differences(predictions: list[str], golds: list[str], rights: list[bool],
                          formalism) -> tuple[Counter, Counter]:
    """For each structural token, in how many wrong answers it occurs fewer times (missed) or more times (added)
    than in the gold program."""
    missed, added = Counter(), Counter()
    for prediction, gold, right in zip(predictions, golds, rights):
        if not right:
            predicted, wanted = Counter(formalism.structure(prediction)), Counter(formalism.structure(gold))
            missed.update((wanted - predicted).keys())
            added.update((predicted - wanted).keys())
    return missed, added


def most_common(counts: Counter, n: int = 5) -> str:
    return "; ".join(f"{token} {count}" for token, count in counts.most_common(n))


def slice_row(run_dirs: list[Path], pattern: str) -> dict:
    """The row of one run (or of several, averaged: ``--ensemble``): its results row's identity, the pattern's
    counts and the run's exact match on it."""
    rows = [results_row(run_dir) for run_dir in run_dirs]
    for run_dir, recorded in zip(run_dirs, rows):
        if recorded is None:
            raise SystemExit(f"{run_dir}: no results row names this run directory, so its dataset is unknown")
    recorded = rows[0]
    if len({row["data"] for row in rows}) > 1:
        raise SystemExit(f"--ensemble: the runs are of different datasets ({', '.join(r['data'] for r in rows)})")
    data = recorded["data"]
    splits = read_splits(data)
    if "dev" not in splits:
        raise SystemExit(f"{run_dir}: dataset {data} has no dev split")
    matches = re.compile(pattern).search
    dev = [e for e in splits["dev"] if matches(e.utterance)]
    if not dev:
        raise SystemExit(f"no dev question of {data} matches {pattern!r}")
    parser, *others = [load(run_dir) for run_dir in run_dirs]
    if others:
        if not hasattr(parser.model, "average_with"):
            raise SystemExit(f"--ensemble: {recorded['model']} cannot average several runs (no average_with)")
        parser.model.average_with([other.model for other in others])
    predictions = parser.parse([e.utterance for e in dev])
    formalism = get_formalism(get_dataset(data).formalism)
    golds = [e.program for e in dev]
    rights = exact_match_flags(predictions, golds, formalism)
    missed, added = structure_differences(predictions, golds, rights, formalism)
    return {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git_commit": git_commit(),
            **{key: recorded[key] for key in ("model", "backbone", "data")},
            "variant": recorded["variant"] + ("+ensemble" if others else ""),
            "seed": "+".join(str(row["seed"]) for row in rows),
            "run_commit": " ".join(row["git_commit"] for row in rows),
            "run_dir": " ".join(path_for_row(run_dir) for run_dir in run_dirs), "pattern": pattern,
            "n_train": sum(bool(matches(e.utterance)) for e in splits["train"]), "n_dev": len(dev),
            "dev_exact_match": round(sum(rights) / len(dev), 6), "most_missed": most_common(missed),
            "most_added": most_common(added)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pattern", help="a regular expression, searched in each dev utterance")
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--out", default=str(results_table("dev_slices.csv")))
    parser.add_argument("--ensemble", action="store_true",
                        help="score the runs as one model, the mean of their scores (average_with), instead of each alone")
    args = parser.parse_args(argv)
    re.compile(args.pattern)  # a bad pattern fails before any run is loaded
    for run_dirs in [args.run_dirs] if args.ensemble else [[run_dir] for run_dir in args.run_dirs]:
        row = slice_row(run_dirs, args.pattern)
        append_row(args.out, row, replacing=("run_dir", "pattern"))
        print(f"{row['run_dir']}: {100 * row['dev_exact_match']:.1f}% of {row['n_dev']} dev questions "
              f"({row['n_train']} training questions match); wrong answers miss {row['most_missed'] or '-'}, "
              f"add {row['most_added'] or '-'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
