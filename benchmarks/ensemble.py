"""Test finished runs of one setting as one model: the mean of their scores, beyond the papers.

Issue 24 finds that GGD's weak seeds on MCD1 each fail on some construction that training withholds, and not on the
same one (README, "Averaging runs"). This script tests such an average the way a run tests its best checkpoint:

    python benchmarks/ensemble.py runs/ggd-authors_sizes-groupmax-authors_schedule/cfq_mcd1/seed{9,14}

Each run is loaded from its ``checkpoints/best.ckpt``; the first one's ``average_with`` (GGD's logits, span_cky's
span scores) makes them one model, which is then tested as ``zoo.train`` tests a run (``zoo.stages.averaged_test``):
GGD chooses its decision thresholds for the average on dev first, exactly as for one run, so the test set plays no
part in any choice. The runs must be finished runs (each with its results row) of one model, variant and dataset.

The predictions go to ``runs/<model>-<variant>+ensemble<K>/<data>/seed<s1>_<s2>...`` (beside the first run's
setting's directory; ``--run-dir`` for another place) and one row to the results file (``--results``, default
``$ZOO_RESULTS``, else results/runs.csv): variant ``<variant>+ensemble<K>``, the first run's seed (so the
leaderboard averages ensembles over seeds as it does single runs: give each ensemble its own first seed),
``member_seeds`` (``9+14``), ``stage_dirs`` (the runs), ``test_stage<i>_exact_match`` (each run alone, from its
row), the runs' training time summed, and as ``best_val`` the average's dev score at its chosen thresholds. A CFQ
run also gets its row in ``cfq_edge_match.csv`` (the error breakdown), as a run's test writes one.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.threads import use_passive_waiting  # noqa: E402

use_passive_waiting()
from zoo.cfq_breakdown import breakdown_row, record_breakdown, summary  # noqa: E402
from zoo.inference import results_row  # noqa: E402
from zoo.results import append_row, check_appendable, runs_file  # noqa: E402
from zoo.stages import averaged_test, combined_row, stage_checkpoint, test_metrics  # noqa: E402
from zoo.train import git_commit  # noqa: E402


def member_rows(run_dirs: list[Path]) -> list[dict[str, str]]:
    """Each run's results row; a run without one, without a best checkpoint, or of another setting is refused."""
    rows = []
    for run_dir in run_dirs:
        row = results_row(run_dir)
        if row is None:
            raise SystemExit(f"{run_dir}: no results row names this run directory (an unfinished run, or one recorded "
                             f"in another results file than {runs_file()}: set $ZOO_RESULTS)")
        if not stage_checkpoint(run_dir).is_file():
            raise SystemExit(f"{run_dir}: no checkpoints/best.ckpt or last.ckpt to load")
        rows.append(row)
    for key in ("model", "variant", "data"):
        if len({row[key] for row in rows}) > 1:
            raise SystemExit(f"the runs differ in {key} ({', '.join(row[key] for row in rows)}): an ensemble here "
                             "averages runs of one setting")
    if len({row["seed"] for row in rows}) < len(rows):
        raise SystemExit(f"the runs share a seed ({', '.join(row['seed'] for row in rows)}): give distinct runs")
    return rows


def ensemble(run_dirs: list[Path], run_dir: Path | None = None) -> tuple[dict, Path]:
    """Test the runs together: the results row (not yet written) and the directory of its predictions."""
    from datamodules import ParsingDataModule
    from zoo.parser import Parser, load_checkpoint

    rows = member_rows(run_dirs)
    first = rows[0]
    variant = f"{first['variant']}+ensemble{len(rows)}"
    seeds = [row["seed"] for row in rows]
    setting = run_dirs[0].resolve().parent.parent  # runs/<model>-<variant>
    run_dir = run_dir or (setting.with_name(f"{setting.name}+ensemble{len(rows)}") / first["data"]
                          / f"seed{'_'.join(seeds)}")
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoints = [load_checkpoint(stage_checkpoint(d)) for d in run_dirs]
    models = [Parser.from_checkpoint(checkpoint) for checkpoint in checkpoints]
    if not hasattr(models[0], "average_with"):
        raise SystemExit(f"model={first['model']} cannot average several runs (it has no average_with)")
    datamodule = ParsingDataModule(**checkpoints[0]["datamodule_hyper_parameters"])  # the first run's data settings
    datamodule.prepare_data()
    datamodule.setup()
    metrics, seconds = averaged_test(models, datamodule, run_dir)
    identity = {"model": first["model"], "variant": variant, "data": first["data"], "seed": first["seed"]}
    row = combined_row(identity, rows, run_dirs, run_dir, git_commit(), len(datamodule.train), len(datamodule.test),
                       seconds)
    row.update({"member_seeds": "+".join(seeds), **metrics,
                "best_val_metric": f"{first['best_val_metric']} (the average, at its chosen thresholds)",
                "best_val": getattr(models[0], "dev_score_at_thresholds", ""),  # (GGD's; span_cky tunes nothing)
                **{f"test_stage{i}_exact_match": test_metrics(r)["test_exact_match"] for i, r in enumerate(rows, 1)}})
    return row, run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="two or more finished runs of one setting")
    parser.add_argument("--run-dir", type=Path, default=None, help="where the predictions go (default: see above)")
    parser.add_argument("--results", type=Path, default=None, help="the results file (default: $ZOO_RESULTS, else "
                        "results/runs.csv)")
    args = parser.parse_args(argv)
    if len(args.run_dirs) < 2:
        parser.error("give two or more run directories")
    results = args.results or runs_file()
    check_appendable(results)  # before minutes of decoding
    row, run_dir = ensemble(args.run_dirs, args.run_dir)
    append_row(results, row)
    alone = ", ".join(f"{100 * row[f'test_stage{i}_exact_match']:.2f}" for i in range(1, len(args.run_dirs) + 1))
    print(f"{row['variant']} on {row['data']}, runs {row['member_seeds']}: test exact match "
          f"{100 * row['test_exact_match']:.2f} (each alone: {alone}); {row['test_examples_per_s']} test questions/s",
          flush=True)
    if row["data"].startswith("cfq"):
        breakdown = breakdown_row(row, run_dir / "predictions.jsonl")
        record_breakdown(breakdown, results.with_name("cfq_edge_match.csv"))
        print(f"CFQ breakdown: {summary(breakdown)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
