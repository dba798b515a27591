"""Rescore CFQ predictions the way the GGD reference implementation counted a question right, beside our exact match.

    python benchmarks/cfq_edge_match.py                  # every CFQ run of results/runs.csv with its predictions
    python benchmarks/cfq_edge_match.py --model ggd --data cfq_mcd1

The views and the breakdown of the wrong queries (unparsable, query type, variables, types, attributes, filters,
relations) are ``zoo.cfq_breakdown``'s, which every CFQ run also records when it ends. This script rescores the runs
whose predictions are still on disk (run directories do not outlive the machine they ran on), into
``results/cfq_edge_match.csv``, one row per run: a run rescored now replaces its earlier row, and the rows of runs
whose predictions are gone stay. A run whose predictions file no longer matches its row's exact match (the directory
was reused) is skipped with a warning.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.cfq_breakdown import breakdown_row, record_breakdown, summary  # noqa: E402
from zoo.results import (RUN_KEYS, ResultsFileError, fraction, path_from_row, read_rows, results_table,  # noqa: E402
                         runs_file)

TOLERANCE = 1e-4  # a predictions file must reproduce its row's exact match to this precision


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=str(runs_file()),
                        help="results file to read runs from (default: $ZOO_RESULTS, else results/runs.csv)")
    parser.add_argument("--out", default=str(results_table("cfq_edge_match.csv")))
    parser.add_argument("--model", help="only rows of this model")
    parser.add_argument("--data", help="only rows of this dataset")
    args = parser.parse_args(argv)
    if not Path(args.runs).is_file():
        print(f"no results file at {args.runs}: give --runs, or run benchmarks/run.py first", file=sys.stderr)
        return 1
    try:
        rows = [r for r in read_rows(args.runs, required=(*RUN_KEYS, "git_commit", "run_dir", "test_exact_match"))
                if r["data"].startswith("cfq_") and (args.model is None or r["model"] == args.model)
                and (args.data is None or r["data"] == args.data)]
        recorded = [fraction(args.runs, row, "test_exact_match") for row in rows]
    except ResultsFileError as e:
        print(e, file=sys.stderr)
        return 1
    if not rows:
        print(f"no CFQ rows in {args.runs} for model={args.model} data={args.data}", file=sys.stderr)
        return 1
    written = 0
    for row, exact_match in zip(rows, recorded):
        predictions = path_from_row(row["run_dir"]) / "predictions.jsonl"
        if not predictions.exists():
            print(f"skip {row['run_dir']}: no predictions.jsonl", file=sys.stderr)
            continue
        try:
            breakdown = breakdown_row(row, predictions)
        except ResultsFileError as e:
            print(e, file=sys.stderr)
            return 1
        if abs(breakdown["test_exact_match"] - exact_match) > TOLERANCE:
            print(f"skip {row['run_dir']}: its predictions give exact match {breakdown['test_exact_match']:.4f}, "
                  f"its row {exact_match:.4f} (the directory was reused)", file=sys.stderr)
            continue
        record_breakdown(breakdown, Path(args.out))
        written += 1
        print(f"{row['model']:>6} {row['variant']:>13} {row['data']:>17} seed {row['seed']}: {summary(breakdown)}")
    if written:
        print(f"wrote {written} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
