"""Leaderboard: measured runs (results/runs.csv) beside published numbers (benchmarks/published.csv).

Every `benchmarks/run.py` run appends one row to results/runs.csv (see zoo/results.py). This module groups those rows
by (model, variant, backbone, data, metric), averages over seeds and writes, atomically, into the output folder:

  leaderboard.csv  one row per group; metric values in percent (runs.csv stores fractions in [0, 1])
  LEADERBOARD.md   one table per dataset family, ours beside the published number of the same split
  leaderboard.png  grouped bars per dataset, error bars = std over seeds, published numbers as markers

Join rule for `published`: rows of published.csv with the same model, variant, data and metric; among those the first
(in file order) with the same backbone, else the first one. No row with the same variant -> empty. Datasets named
`*_partial` (a subset of the official split held by the local mirror) never get a published number.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.results import atomic_path  # noqa: E402

# protocol: the experiment config that pinned the training budget, where one did (rows without one share "")
KEYS = ["model", "variant", "backbone", "data", "metric", "protocol"]
# test_examples_per_s is a speed and test_threshold (GGD) the decoding threshold chosen on dev, not test metrics
NOT_METRICS = ("_per_s", "_seconds", "_mb", "_threshold")
# Display order of the Markdown tables; a data name belongs to the family of its longest matching prefix.
FAMILIES = {"SCAN": ("scan_",), "SCAN-SP": ("scan_sp_",), "GeoQuery FunQL": ("geo_funql_",),
            "Text-to-SQL": ("geo_sql_", "atis_sql_", "scholar_sql_", "sql_"), "CFQ": ("cfq_",), "COGS": ("cogs",)}


class LeaderboardError(RuntimeError):
    """Nothing to put on a leaderboard (no runs.csv, or no usable row in it)."""


def family(data: str) -> str:
    matches = [(len(p), fam) for fam, prefixes in FAMILIES.items() for p in prefixes if data.startswith(p)]
    return max(matches)[1] if matches else "Other"


def read_runs(path: Path) -> pd.DataFrame:
    """Long table (one row per run x test metric, value in percent); malformed rows are reported and skipped."""
    if not path.is_file() or path.stat().st_size == 0:
        raise LeaderboardError(f"no runs at {path}: run benchmarks/run.py first (it appends to results/runs.csv)")
    records = []
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        metrics = [c for c in header if c.startswith("test_") and not c.endswith(NOT_METRICS)]
        seen = 0
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            line, seen = reader.line_num, seen + 1
            if len(row) > len(header):
                print(f"{path}:{line}: {len(row)} cells for {len(header)} columns; row skipped", file=sys.stderr)
                continue
            run = dict(zip(header, row + [""] * (len(header) - len(row))))  # older rows lack newer columns
            values, bad = {}, None
            for col in metrics:
                cell = run[col].strip()
                if not cell:
                    continue
                try:
                    value = float(cell)
                except ValueError:
                    value = float("nan")
                if not 0.0 <= value <= 1.0:  # also catches nan; runs.csv stores fractions, never percent
                    bad = f"{col}={cell!r} is not a fraction in [0, 1]"
                    break
                values[col.removeprefix("test_")] = 100.0 * value
            if bad:
                print(f"{path}:{line}: {bad}; row skipped", file=sys.stderr)
                continue
            for metric, value in values.items():
                records.append({**{k: run.get(k, "") for k in ("model", "variant", "backbone", "data", "seed",
                               "params", "train_seconds", "hardware", "protocol")}, "metric": metric, "value": value})
    if not records:
        why = f"all {seen} rows were skipped (see above)" if seen else "run benchmarks/run.py first"
        raise LeaderboardError(f"no usable runs in {path}: {why}")
    long = pd.DataFrame.from_records(records)
    # A re-run of the same seed replaces the earlier row (runs.csv is append-only, so the last one is the newest).
    return long[~(long.duplicated(KEYS + ["seed"], keep="last") & (long["seed"] != ""))]


def _published(row: pd.Series, published: pd.DataFrame) -> tuple[float | None, str]:
    if row["data"].endswith("_partial"):
        return None, ""
    same = published[(published["model"] == row["model"]) & (published["variant"] == row["variant"])
                     & (published["data"] == row["data"]) & (published["metric"] == row["metric"])]
    if same.empty:
        return None, ""
    best = same[same["backbone"] == row["backbone"]]
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
    joined = [_published(r, published) for _, r in board.iterrows()]
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
    for fam in [*FAMILIES, "Other"]:
        part = board[fams == fam]
        if part.empty:
            continue
        out += [f"## {fam}", "", "| Split | Model | Variant | Backbone | Metric | Ours | Seeds | Published | Source "
                "| Params | Train min | Hardware |", "|---" * 12 + "|"]
        for _, r in part.sort_values(["data", "metric", "model", "variant", "backbone"]).iterrows():
            ours = _fmt(r["mean"]) + (f" ± {r['std']:.1f}" if pd.notna(r["std"]) else "")
            pub = "n/a¹" if r["data"].endswith("_partial") else _fmt(r["published"])
            variant = r["variant"] + (f" ({r['protocol']})" if r["protocol"] else "")
            cells = [r["data"], r["model"], variant, r["backbone"], r["metric"], ours, str(r["seeds"]), pub,
                     r["published_source"], _fmt(r["params"], ","), _fmt(r["train_minutes"]), r["hardware"]]
            out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
        out.append("")
    if board["data"].str.endswith("_partial").any():
        out += ["¹ `*_partial` splits hold only the part of the official split that the local data mirror has; "
                "no published number is comparable, so none is shown.", ""]
    return "\n".join(out)


def plot(board: pd.DataFrame, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [*FAMILIES, "Other"]
    cats = sorted({(d, m) for d, m in zip(board["data"], board["metric"])},
                  key=lambda c: (order.index(family(c[0])), c))
    series = sorted({(m, v, b) for m, v, b in zip(board["model"], board["variant"], board["backbone"])})
    board = board.assign(cat=list(zip(board["data"], board["metric"])),
                         series=list(zip(board["model"], board["variant"], board["backbone"])))
    width = 0.8 / board.groupby("cat").size().max()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(cats) + 3), 4.5))
    labelled = set()
    for x0, cat in enumerate(cats):
        bars = board[board["cat"] == cat].sort_values("series")
        for k, (_, r) in enumerate(bars.iterrows()):  # only the series measured here share the slot, centred
            x, i = x0 + (k - (len(bars) - 1) / 2) * width, series.index(r["series"])
            std = 0.0 if pd.isna(r["std"]) else r["std"]
            err = [[min(std, r["mean"])], [min(std, 100 - r["mean"])]]  # clipped to the metric's range
            label = "/".join(r["series"]) if r["series"] not in labelled else None
            ax.bar(x, r["mean"], width, yerr=err, capsize=3, color=f"C{i % 10}", label=label)
            labelled.add(r["series"])
            if pd.notna(r["published"]):
                ax.plot(x, r["published"], "kD", markersize=5, label=None if "pub" in labelled else "published")
                labelled.add("pub")
    rotate = len(cats) > 4  # long split names overlap beyond a few bars
    ax.set_xticks(range(len(cats)), [f"{d}\n{m}" for d, m in cats], fontsize=8, rotation=30 if rotate else 0,
                  ha="right" if rotate else "center", rotation_mode="anchor")
    ax.set_xlim(-0.6, len(cats) - 0.4)
    ax.set_ylabel("test metric (%)")
    ax.set_ylim(0, 105)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(*zip(*sorted(zip(handles, labels), key=lambda hl: (hl[1] == "published", hl[1]))), fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0), title="model/variant/backbone")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def build_leaderboard(runs_csv, published_csv=ROOT / "benchmarks" / "published.csv", out_dir=ROOT / "results"):
    """Write leaderboard.csv, LEADERBOARD.md and leaderboard.png into out_dir; return the leaderboard table."""
    long = read_runs(Path(runs_csv))  # raises LeaderboardError before anything is written
    published = pd.read_csv(published_csv, dtype=str, keep_default_na=False)
    board = aggregate(long, published)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "leaderboard.csv") as tmp:
        board.to_csv(tmp, index=False)
    with atomic_path(out / "LEADERBOARD.md") as tmp:
        tmp.write_text(to_markdown(board), encoding="utf-8")
    with atomic_path(out / "leaderboard.png") as tmp:
        plot(board, tmp)
    return board


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=ROOT / "results" / "runs.csv", type=Path, help="runs table (results/runs.csv)")
    ap.add_argument("--published", default=ROOT / "benchmarks" / "published.csv", type=Path)
    ap.add_argument("--out", default=ROOT / "results", type=Path, help="output folder")
    args = ap.parse_args(argv)
    try:
        board = build_leaderboard(args.runs, args.published, args.out)
    except LeaderboardError as e:
        print(f"leaderboard: {e}", file=sys.stderr)
        return 1
    print(f"leaderboard: {len(board)} rows -> {args.out}/leaderboard.csv, LEADERBOARD.md, leaderboard.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
