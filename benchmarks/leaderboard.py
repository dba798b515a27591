"""Leaderboard: measured runs (results/runs.csv) beside published numbers (benchmarks/published.csv).

Every `benchmarks/run.py` run appends one row to results/runs.csv (see zoo/results.py). This module groups those rows
by (model, variant, backbone, data, metric), averages over seeds and writes, atomically, into the output folder:

  leaderboard.csv  one row per group; metric values in percent (runs.csv stores fractions in [0, 1])
  LEADERBOARD.md   one table per dataset family, ours beside the published number of the same split
  zoo.csv, ZOO.md, zoo.png, zoo_heatmap.png
                   the headline table (one cell per method and split) and its figures: benchmarks/headline.py
  index.html       all of it as one self-contained page: benchmarks/html_report.py

Rebuilt from the repository's own results/runs.csv, it also puts the headline tables into README.md.

The runs table is `$ZOO_RESULTS` where set (where benchmarks/run.py appends), else results/runs.csv, and the
outputs go beside it. A table that cannot be read whole (a row that does not fit the header, an unclosed quote, a
byte that is not UTF-8, no model, variant, backbone, data or seed column) is an error naming its file, line and
column; a row whose metric is not a fraction, or that has none, is named and skipped.

Join rule for `published`: rows of published.csv with the same model, variant, data and metric; among those the first
(in file order) with the same backbone, else the first one. No row with the same variant -> empty. Datasets named
`*_partial` (a subset of the official split held by the local mirror) never get a published number.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

import headline  # noqa: E402
import html_report  # noqa: E402
from headline import FAMILY_ORDER, family  # noqa: E402
from zoo import split_variant  # noqa: E402
from zoo.ir import row_definition  # noqa: E402
from zoo.results import (RUN_KEYS, ResultsFileError, atomic_path, cell_error, fraction, read_rows,  # noqa: E402
                         runs_file)

# protocol: the experiment config that pinned the training budget, where one did (rows without one share "")
KEYS = ["model", "variant", "backbone", "data", "metric", "protocol", "ir_definition"]
PUBLISHED_COLUMNS = ["model", "variant", "backbone", "pretrained", "data", "metric", "value", "source"]
# test_examples_per_s is a speed and test_threshold (GGD) the decoding threshold chosen on dev, not test metrics
NOT_METRICS = ("_per_s", "_seconds", "_mb", "_threshold")
class LeaderboardError(RuntimeError):
    """Nothing to put on a leaderboard (no runs.csv, or no usable row in it)."""


def read_runs(path: Path) -> pd.DataFrame:
    """Long table (one row per run x test metric, value in percent); rows with a bad metric or none are reported and
    skipped, a table that cannot be read whole is a ResultsFileError."""
    if not path.is_file() or path.stat().st_size == 0:
        raise LeaderboardError(f"no runs at {path}: run benchmarks/run.py first (it appends to results/runs.csv)")
    runs = read_rows(path, required=RUN_KEYS)
    if not runs:
        raise LeaderboardError(f"no usable runs in {path}: run benchmarks/run.py first")
    metrics = [c for c in runs[0] if c.startswith("test_") and not c.endswith(NOT_METRICS)]
    if not metrics:
        raise LeaderboardError(f"{path}:1: no test_<metric> column: not a runs table?")
    records = []
    for run in runs:
        try:
            values = {col.removeprefix("test_"): fraction(path, run, col) for col in metrics}
        except ResultsFileError as bad:  # percent instead of a fraction, a word
            print(f"{bad}; row skipped", file=sys.stderr)
            continue
        values = {metric: 100.0 * value for metric, value in values.items() if value is not None}
        if not values:
            print(f"{path}:{run.line}: no test metric has a value; row skipped", file=sys.stderr)
        for metric, value in values.items():
            records.append({**{k: run.get(k, "") for k in ("model", "variant", "backbone", "data", "seed",
                           "params", "train_seconds", "hardware", "protocol", "best_val", "time", "git_commit",
                           "run_dir", "smoke")}, "metric": metric, "value": value,
                            # runs of the two IR definitions (zoo/ir/__init__.py) are apart
                            "ir_definition": row_definition(split_variant(run["variant"])[0],
                                                            run.get("ir_definition"))})
    if not records:
        raise LeaderboardError(f"no usable runs in {path}: all {len(runs)} rows were skipped (see above)")
    long = pd.DataFrame.from_records(records)
    # A re-run of the same seed replaces the earlier row (runs.csv is append-only, so the last one is the newest).
    return long[~long.duplicated(KEYS + ["seed"], keep="last")]


def read_published(path: Path) -> pd.DataFrame:
    """benchmarks/published.csv: the published numbers, in percent."""
    if not path.is_file():
        raise LeaderboardError(f"no published numbers at {path}")
    rows = read_rows(path, required=PUBLISHED_COLUMNS)
    for row in rows:  # (nan fails the range test too)
        if not 0.0 <= pd.to_numeric(row["value"], errors="coerce") <= 100.0:
            raise cell_error(path, row, "value", f"is {row['value']!r}, not a percentage")
    return pd.DataFrame(rows, columns=PUBLISHED_COLUMNS)


def published_number(published: pd.DataFrame, model: str, variant: str, backbone: str, data: str,
                     metric: str) -> tuple[float | None, str]:
    """The published number of (model, variant, data, metric) by the join rule above, and its source."""
    if data.endswith("_partial"):
        return None, ""
    same = published[(published["model"] == model) & (published["variant"] == variant)
                     & (published["data"] == data) & (published["metric"] == metric)]
    if same.empty:
        return None, ""
    best = same[same["backbone"] == backbone]
    hit = (best if not best.empty else same).iloc[0]
    how = f"{hit['backbone']}, {'pretrained' if hit['pretrained'] == 'yes' else 'from scratch'}"
    src = hit["source"]  # "gai2021 table 1 (no dev tuning)" -> "gai2021 table 1 (no dev tuning; lstm, from scratch)"
    return float(hit["value"]), f"{src[:-1]}; {how})" if src.endswith(")") else f"{src} ({how})"


def aggregate(long: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample std (ddof=1) over seeds, in percent rounded to 1 decimal; std empty for a single seed."""
    num = lambda s: pd.to_numeric(s, errors="coerce")  # noqa: E731
    board = long.groupby(KEYS, sort=True).agg(
        mean=("value", "mean"), std=("value", "std"), seeds=("value", "size"),
        params=("params", lambda s: num(s).median()),
        train_minutes=("train_seconds", lambda s: num(s).mean() / 60),
        hardware=("hardware", lambda s: "; ".join(sorted({h for h in s if h}))),
    ).reset_index()
    board[["mean", "std", "train_minutes"]] = board[["mean", "std", "train_minutes"]].round(1)
    joined = [published_number(published, *r) for r in
              board[["model", "variant", "backbone", "data", "metric"]].itertuples(index=False)]
    after_seeds = len(KEYS) + 3  # after mean, std, seeds
    board.insert(after_seeds, "published", [p for p, _ in joined])
    board.insert(after_seeds + 1, "published_source", [s for _, s in joined])
    board["params"] = board["params"].round().astype("Int64")
    return board


def _fmt(x, spec: str = ".1f") -> str:
    return "" if pd.isna(x) else format(x, spec)


def to_markdown(board: pd.DataFrame) -> str:
    out = ["# Leaderboard", "",
           "Measured by `benchmarks/run.py` (each run appends one row to `results/runs.csv`) and rebuilt with "
           "`python benchmarks/leaderboard.py`. **Ours** is the test metric in percent, mean ± sample std over "
           "**seeds** runs; **Published** is the paper's number for the same model, variant, split and metric "
           "(same backbone when the paper has one, otherwise the paper's backbone is named in **Source**). "
           "**Params** is the median parameter count, **Train min** the mean training time in minutes.", ""]
    fams = board["data"].map(family)
    for fam in FAMILY_ORDER:
        part = board[fams == fam]
        if part.empty:
            continue
        out += [f"## {fam}", "", "| Split | Model | Variant | Backbone | Metric | Ours | Seeds | Published | Source "
                "| Params | Train min | Hardware |", "|---" * 12 + "|"]
        for _, r in part.sort_values(["data", "metric", "model", "variant", "backbone"]).iterrows():
            ours = _fmt(r["mean"]) + (f" ± {r['std']:.1f}" if pd.notna(r["std"]) else "")
            pub = "n/a¹" if r["data"].endswith("_partial") else _fmt(r["published"])
            notes = [n for n in (r["protocol"], r["ir_definition"] and f"{r['ir_definition']} IRs") if n]
            variant = r["variant"] + (f" ({', '.join(notes)})" if notes else "")
            cells = [r["data"], r["model"], variant, r["backbone"], r["metric"], ours, str(r["seeds"]), pub,
                     r["published_source"], _fmt(r["params"], ","), _fmt(r["train_minutes"]), r["hardware"]]
            out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
        out.append("")
    if board["data"].str.endswith("_partial").any():
        out += ["¹ `*_partial` splits hold only the part of the official split that the local data mirror has; "
                "no published number is comparable, so none is shown.", ""]
    return "\n".join(out)


def build_leaderboard(runs_csv, published_csv=ROOT / "benchmarks" / "published.csv", out_dir=None,
                      readme: Path | None = None):
    """Write leaderboard.csv, LEADERBOARD.md, zoo.csv, ZOO.md, zoo.png, zoo_heatmap.png and index.html into out_dir
    (default: the folder of runs_csv), and the headline tables into ``readme`` between its markers where given;
    return the leaderboard table."""
    long = read_runs(Path(runs_csv))  # raises before anything is written
    published = read_published(Path(published_csv))
    board = aggregate(long, published)
    seeds = headline.seed_values(long)
    table = headline.headline(seeds, lambda *key: published_number(published, *key))
    out = Path(out_dir) if out_dir is not None else Path(runs_csv).parent
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "leaderboard.csv") as tmp:
        board.to_csv(tmp, index=False)
    with atomic_path(out / "LEADERBOARD.md") as tmp:
        tmp.write_text(to_markdown(board), encoding="utf-8")
    with atomic_path(out / "zoo.csv") as tmp:
        table.to_csv(tmp, index=False)
    zoo_md = headline.to_markdown(table)
    with atomic_path(out / "ZOO.md") as tmp:
        tmp.write_text(zoo_md, encoding="utf-8")
    figures = [out / "zoo.png", out / "zoo_heatmap.png"]
    for figure, draw in zip(figures, (lambda path: headline.plot_families(table, seeds, path),
                                      lambda path: headline.plot_heatmap(table, path))):
        if table.empty:  # (only smoke runs) no figure rather than an earlier one
            figure.unlink(missing_ok=True)
            continue
        with atomic_path(figure) as tmp:
            draw(tmp)
    with atomic_path(out / "index.html") as tmp:
        tmp.write_text(html_report.to_html(table, seeds, [f for f in figures if f.is_file()], out, ROOT),
                       encoding="utf-8")
    if readme is not None:
        headline.update_readme(readme, zoo_md)
    return board


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, help="runs table (default: $ZOO_RESULTS, else results/runs.csv)")
    ap.add_argument("--published", default=ROOT / "benchmarks" / "published.csv", type=Path)
    ap.add_argument("--out", type=Path, help="output folder (default: the runs table's)")
    args = ap.parse_args(argv)
    args.runs = args.runs or runs_file()
    args.out = args.out or args.runs.parent
    readme = ROOT / "README.md" if headline.own_results(args.runs, args.out) else None
    try:
        board = build_leaderboard(args.runs, args.published, args.out, readme)
    except (LeaderboardError, ResultsFileError) as e:
        print(f"leaderboard: {e}", file=sys.stderr)
        return 1
    print(f"leaderboard: {len(board)} rows -> {args.out}/: leaderboard.csv, LEADERBOARD.md, zoo.csv, ZOO.md, "
          f"zoo.png, zoo_heatmap.png, index.html{'; README.md headline table' if readme else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
