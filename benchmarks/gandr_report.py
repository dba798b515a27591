"""The GandR comparison (Zemlyanskiy et al. 2022 Tables 1 and 4, Figure 2) from the results files.

    python benchmarks/gandr_report.py     # writes results/gandr_table.md and results/gandr_alpha.png

- Test exact match of no retrieval (``baseline``), input TF-IDF (``input_tfidf-k4``) and GandR (``gandr-k4-a0.5``),
  one table per backbone and protocol (as ``ir_table.py``), with every other alpha as a column of its own.
- Template recall@k on the validation split (results/template_recall.csv, written by each GandR run) of input,
  output (oracle: the gold program) and hybrid retrieval.
- Copying: per run, how many test examples have their gold program among the exemplars' programs, and how many
  of those, and of the others, the model gets right (from each run's predictions.jsonl, into
  results/gandr_exemplars.csv). A run's predictions count only while its run directory holds its own (a later run of
  the same variant and seed, under another protocol, rewrites them); the rows of runs whose predictions are gone
  stay as the file had them.
- The alpha sweep: test exact match against the weight of output similarity, one line per dataset and backbone
  with at least two alphas (alpha = 0 is input similarity with GandR's two stages, the equal-compute control),
  beside the same dataset's no-retrieval (dashed) and input-retrieval (dotted) runs.
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from ir_table import CELL, method_tables, read_runs  # noqa: E402
from zoo import split_variant  # noqa: E402
from zoo.results import (ResultsFileError, atomic_path, path_from_row, read_predictions, read_rows,  # noqa: E402
                         results_table, runs_file, write_rows)

ALPHA = "gandr-k4-a"
# template_recall.csv: columns every row fills (python -m zoo.retrieval recall leaves alpha and seed empty, and
# writes no recall_hybrid)
RECALL_COLUMNS = ("data", "k", "n", "recall_input", "recall_output_oracle")


def retrieval_methods(runs: pd.DataFrame) -> list[str]:
    """baseline, input_tfidf-k4, gandr-k4-a0.5, then the other alphas in increasing order."""
    variants = {split_variant(v)[0] for v in runs["variant"].astype(str)}
    alphas = sorted((float(v[len(ALPHA):]), v) for v in variants if v.startswith(ALPHA) and v != f"{ALPHA}0.5")
    return ["baseline", "input_tfidf-k4", f"{ALPHA}0.5", *(v for _, v in alphas)]


def recall_table(recall: pd.DataFrame) -> list[str]:
    out = ["## Template recall@k on the validation split (%)", "",
           "Share of validation examples with at least one of the top k exemplars sharing the gold program's "
           "template (values masked). Hybrid: GandR's relevance on stage 1's preliminary predictions.", "",
           "| data | protocol | k | alpha | seed | n | input | output (oracle) | hybrid |",
           "|---|---|---|---|---|---|---|---|---|"]
    def cell(value, form="{:.1f}", scale=100):  # rows of python -m zoo.retrieval recall have no alpha, seed, hybrid
        return "–" if pd.isna(value) else form.format(scale * value)

    # rows from before the protocol was recorded (December 2) have none: those GandR rows ran gandr_cpu_short
    recall = recall.reindex(columns=[*RECALL_COLUMNS, "subsample", "alpha", "seed", "recall_hybrid", "protocol"])
    recall["protocol"] = recall["protocol"].fillna("")
    for row in recall.sort_values(["data", "subsample", "protocol", "alpha", "seed"]).itertuples():
        data = f"{row.data} ({row.subsample})" if isinstance(row.subsample, str) and row.subsample else row.data
        out.append(f"| {data} | {row.protocol or '–'} | {row.k} | {cell(row.alpha, '{:g}', 1)} | "
                   f"{cell(row.seed, '{:.0f}', 1)} | {row.n} | {cell(row.recall_input)} | "
                   f"{cell(row.recall_output_oracle)} | {cell(row.recall_hybrid)} |")
    return out + [""]


def exemplar_programs(augmented: str) -> list[str]:
    """The programs of the exemplars in ``x || x'_1 & y'_1 || ...`` (an utterance holding " & " would confuse it)."""
    return [segment.split(" & ", 1)[1] for segment in augmented.split(" || ")[1:] if " & " in segment]


def copying_key(row) -> tuple[str, ...]:
    """What names a run in the copying file (its cells are text there)."""
    return tuple(str(row[key]) for key in ("variant", "backbone", "data", "seed", "protocol"))


def own_predictions(run) -> Path | None:
    """The run's predictions.jsonl, if its run directory still holds the run's own: a run writes them just before
    its row, so a file written later is a later run's (None then, and without a file)."""
    path = path_from_row(str(run.run_dir)) / "predictions.jsonl"
    if not path.is_file():
        return None
    try:
        finished = datetime.fromisoformat(str(run.time)).timestamp()
    except (AttributeError, ValueError):  # a row without a time: the file is taken as its own
        return path
    return None if path.stat().st_mtime > finished + 60 else path


def copying(runs: pd.DataFrame, earlier: list[dict] = ()) -> list[dict]:
    """Per retrieval run whose predictions are on disk: gold programs among the exemplars, and exact matches; the
    ``earlier`` rows (of the copying file) of the runs whose predictions are not."""
    rows = {copying_key(row): dict(row) for row in earlier}
    for run in runs[runs["variant"].astype(str).str.match(r"input_tfidf|gandr")].itertuples():
        path = own_predictions(run)
        if path is None:
            continue
        predictions = read_predictions(path)
        hit = [p["gold"] in exemplar_programs(p["utterance"]) for p in predictions]
        row = {"variant": run.variant, "backbone": run.backbone, "data": run.data, "seed": run.seed,
               "protocol": run.protocol, "n_test": len(predictions), "gold_in_exemplars": sum(hit),
               "correct": sum(p["correct"] for p in predictions),
               "correct_with_gold_in_exemplars": sum(p["correct"] and h for p, h in zip(predictions, hit)),
               "correct_without": sum(p["correct"] and not h for p, h in zip(predictions, hit))}
        rows[copying_key(row)] = row
    return list(rows.values())


def copying_table(rows: list[dict]) -> list[str]:
    out = ["## Copying: is the gold program among the exemplars?", "",
           "Test examples whose gold program is one of their exemplars' programs, and the exact matches among those "
           "and among the others (results/gandr_exemplars.csv).", "",
           "| data | variant | backbone | seed | gold among exemplars | right, gold among them | right, gold not among them |",
           "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: tuple(str(r[key]) for key in ("data", "variant", "backbone", "seed"))):
        rest = int(r["n_test"]) - int(r["gold_in_exemplars"])  # (cells of the earlier file are text)
        out.append(f"| {r['data']} | {r['variant']} | {r['backbone']} | {r['seed']} | {r['gold_in_exemplars']} / "
                   f"{r['n_test']} | {r['correct_with_gold_in_exemplars']} / {r['gold_in_exemplars']} | "
                   f"{r['correct_without']} / {rest} |")
    return out + [""]


def alpha_sweep(runs: pd.DataFrame, out: Path) -> bool:
    """Plot exact match against alpha where a dataset has two alphas or more; False when none has."""
    runs = runs[runs["model"] == "seq2seq"].copy()
    runs["method"], runs["subsample"] = zip(*runs["variant"].astype(str).map(split_variant))
    runs["label"] = [f"{d}{' (' + s + ')' if s else ''}, {b}" for d, s, b in
                     zip(runs["data"], runs["subsample"], runs["backbone"])]
    sweeps = runs[runs["method"].str.startswith(ALPHA)].copy()
    sweeps["alpha"] = sweeps["method"].str[len(ALPHA):].astype(float)
    lines = [(label, part.groupby("alpha")["test_exact_match"].agg(["mean", "std", "count"]))
             for label, part in sweeps.groupby("label")]
    lines = [(label, points) for label, points in lines if len(points) >= 2]
    if not lines:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in lines:
        bars = ax.errorbar(points.index, 100 * points["mean"], yerr=100 * points["std"].fillna(0), marker="o",
                           capsize=3, label=label)
        # the same dataset without retrieval (dashed) and with input retrieval, stage 1 alone (dotted)
        for method, style in (("baseline", "--"), ("input_tfidf-k4", ":")):
            same = runs[(runs["label"] == label) & (runs["method"] == method)]
            if not same.empty:
                ax.axhline(100 * same["test_exact_match"].mean(), color=bars[0].get_color(), linestyle=style,
                           linewidth=1, label=f"{label}: {method}")
    ax.set_xlabel("alpha (weight of output similarity)")
    ax.set_ylabel("test exact match (%)")
    ax.set_title("GandR: exact match against alpha")
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=runs_file(), help="default: $ZOO_RESULTS, else results/runs.csv")
    parser.add_argument("--recall", type=Path, default=results_table("template_recall.csv"))
    parser.add_argument("--out", type=Path, default=results_table("gandr_table.md"))
    parser.add_argument("--plot", type=Path, default=results_table("gandr_alpha.png"))
    parser.add_argument("--copying", type=Path, default=results_table("gandr_exemplars.csv"))
    args = parser.parse_args(argv)
    try:
        runs = read_runs(args.runs)
        read_rows(args.recall, required=RECALL_COLUMNS)
    except ResultsFileError as e:
        sys.exit(f"error: {e}")
    runs["protocol"] = runs["protocol"].fillna("") if "protocol" in runs else ""
    # only the backbones, protocols and datasets with retrieval runs: their baselines are the ir_table's too, and a
    # protocol's other datasets (the IR grid's) have nothing to compare here
    retrieval = runs[runs["variant"].astype(str).str.match(r"input_tfidf|gandr")]
    if retrieval.empty:
        sys.exit(f"error: {args.runs}: no retrieval run (variant input_tfidf-... or gandr-...) to report")
    keys = ["backbone", "protocol", "data"]
    runs = runs[runs.set_index(keys).index.isin(retrieval.set_index(keys).index)]
    text = method_tables(runs, retrieval_methods(runs), [
        "# Exemplar retrieval (GandR): test exact match (%)", "",
        f"Generated by `python benchmarks/gandr_report.py` from results/runs.csv and results/template_recall.csv. "
        f"Columns: no retrieval, input TF-IDF, GandR (k exemplars, alpha = weight of output similarity). {CELL}"])
    if args.recall.is_file():
        text += "\n" + "\n".join(recall_table(pd.read_csv(args.recall, dtype={"subsample": str})))
    try:
        copied = copying(runs, read_rows(args.copying))
    except ResultsFileError as e:  # a damaged predictions.jsonl or copying file
        sys.exit(f"error: {e}")
    if copied:
        write_rows(args.copying, copied)
        text += "\n" + "\n".join(copying_table(copied))
    if alpha_sweep(runs, args.plot):
        text += f"\nThe alpha sweep: `{args.plot.name}`.\n"
    with atomic_path(args.out) as tmp:
        tmp.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
