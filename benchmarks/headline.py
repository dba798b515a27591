"""The zoo's headline table and its two figures: one cell per method and benchmark split, built from the long
leaderboard table (benchmarks/leaderboard.py, which calls this on every rebuild).

    zoo.csv          one row per (method, split): the chosen protocol's mean ± std over seeds, the paper's number
    ZOO.md           one table per dataset family: rows = methods, columns = splits
    zoo.png          one panel per family: bars = methods (error bar: std over seeds, dots: the seeds), published
                     numbers as diamonds
    zoo_heatmap.png  methods x splits, coloured by the cell's mean

A method is model + variant (without its subsample suffix) + backbone, and, for IR pipelines, the IR definition
(zoo/ir/__init__.py). A split is the dataset, plus the subsample a run trained on where it did not use the whole
split (``cfq_mcd1 · train20000-eval2000``): such a column is not the benchmark and gets no published number.

What stays out: smoke runs (their rows say ``smoke``; ``debug=smoke`` writes them to the run directory, never to
results/runs.csv, unless ``results_file=`` asks), runs tested on examples held out of training to choose settings
(``data.heldout``, subsample ``heldout…``), runs of a protocol that hands the model part of the gold answer
(``GOLD_INFORMED``: the GGD authors' protocol gives it the gold query's variables; LEADERBOARD.md shows their
``emr`` beside the paper's), the stage metrics of multi-stage runs (``test_stage1_*``), and every
metric but the dataset's primary one: denotation accuracy where the dataset's programs execute (some run of it
reports ``test_denotation``), else exact match, and the cells of a superseded backbone (``SUPERSEDED``) where its
replacement measured the same method on the same split. Probes live in results/probes.csv, which is not read. When
a method ran on a split under several protocols (experiment configs with different budgets), the cell shows one:
the protocol with the best mean *validation* metric (``best_val``; ties: more seeds, then the newest row), never
chosen on test. A cell holding a run from a working tree with uncommitted changes (``git_commit`` ending in
``-dirty``) is marked †.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from zoo import split_variant

# Display order of the Markdown tables; a data name belongs to the family of its longest matching prefix.
FAMILIES = {"SCAN": ("scan_",), "SCAN-SP": ("scan_sp_",), "GeoQuery FunQL": ("geo_funql_",),
            "Text-to-SQL": ("geo_sql_", "atis_sql_", "scholar_sql_", "sql_"), "CFQ": ("cfq_",), "COGS": ("cogs",)}
FAMILY_ORDER = [*FAMILIES, "Other"]
METHOD_KEYS = ["model", "method", "backbone", "ir_definition"]
CELL_KEYS = METHOD_KEYS + ["data", "subsample", "split"]
DIRTY = "†"
# A from-scratch backbone the zoo replaced (issue 23: T5 mini did not converge on 2 CPU cores; BART at its sizes
# does): its cells give way to the replacement's wherever both measured the same method on the same split.
SUPERSEDED = {"t5-mini-scratch": "bart-mini-scratch"}
# Protocols whose runs read part of the gold answer at test time: comparable with a paper's protocol, never a result.
GOLD_INFORMED = {"ggd_authors_emr", "ggd_authors_emr_cpu"}


def family(data: str) -> str:
    matches = [(len(p), fam) for fam, prefixes in FAMILIES.items() for p in prefixes if data.startswith(p)]
    return max(matches)[1] if matches else "Other"


def method_label(model: str, method: str, backbone: str, ir_definition: str) -> str:
    """``seq2seq · rir (zoo IRs) · bart-mini-scratch``; a method named after its model (``ggd``) once."""
    name = model if method == model else f"{model} · {method}"
    return f"{name}{f' ({ir_definition} IRs)' if ir_definition else ''} · {backbone}"


def primary_metrics(long: pd.DataFrame) -> dict[str, str]:
    """Each dataset's primary metric: denotation where any run of it executes its programs, else exact match."""
    executes = set(long.loc[long["metric"] == "denotation", "data"])
    return {data: "denotation" if data in executes else "exact_match" for data in long["data"].unique()}


def seed_values(long: pd.DataFrame) -> pd.DataFrame:
    """The long table's rows that the headline reads: each run's primary metric, with method, subsample and split
    columns."""
    runs = long[long["smoke"].astype(str) != "True"]
    runs = runs[runs["metric"] == runs["data"].map(primary_metrics(runs))].copy()
    methods = runs["variant"].map(split_variant)
    runs["method"], runs["subsample"] = methods.str[0], methods.str[1]
    runs = runs[~runs["subsample"].str.startswith("heldout")].copy()  # settings' choices, not results
    runs = runs[~runs["protocol"].isin(GOLD_INFORMED)].copy()
    runs["split"] = runs["data"] + runs["subsample"].map(lambda s: f" · {s}" if s else "")
    runs["method_label"] = [method_label(*r) for r in runs[METHOD_KEYS].itertuples(index=False)]
    measured = set(runs[["model", "method", "backbone", "split"]].itertuples(index=False, name=None))
    replaced = [(model, method, SUPERSEDED.get(backbone), split) in measured for model, method, backbone, split
                in runs[["model", "method", "backbone", "split"]].itertuples(index=False, name=None)]
    return runs[[not r for r in replaced]]


COLUMNS = [*CELL_KEYS, "method_label", "metric", "protocol", "mean", "std", "seeds", "published", "published_metric",
           "published_source", "dirty", "other_protocols"]


def _published(published_of, cell: pd.Series) -> tuple[float | None, str, str]:
    """The paper's number for a cell, its metric and source: in the cell's metric, else (papers on SQL report exact
    match where the zoo's primary metric is denotation) in exact match, labelled; none for a subsample column."""
    if cell["subsample"]:
        return None, "", ""
    for metric in dict.fromkeys((cell["metric"], "exact_match")):
        value, source = published_of(cell["model"], cell["method"], cell["backbone"], cell["data"], metric)
        if value is not None:
            return value, metric, source
    return None, "", ""


def headline(runs: pd.DataFrame, published_of) -> pd.DataFrame:
    """One row per (method, split) from ``seed_values(long)``; ``published_of(model, variant, backbone, data,
    metric) -> (value or None, source)`` joins the paper's number."""
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS)
    num = lambda s: pd.to_numeric(s, errors="coerce")  # noqa: E731
    per_protocol = runs.groupby(CELL_KEYS + ["method_label", "metric", "protocol"], sort=False).agg(
        mean=("value", "mean"), std=("value", "std"), seeds=("value", "size"),
        val=("best_val", lambda s: num(s).mean()), newest=("time", "max"),
        dirty=("git_commit", lambda s: s.astype(str).str.endswith("-dirty").any())).reset_index()
    # the protocol shown: best validation mean, then more seeds, then the newest; never the test metric
    ranked = per_protocol.assign(val=per_protocol["val"].fillna(float("-inf"))).sort_values(
        ["val", "seeds", "newest"], ascending=False)
    chosen = ranked.drop_duplicates(CELL_KEYS, keep="first").copy()
    others = ranked.groupby(CELL_KEYS)["protocol"].agg(list)
    chosen["other_protocols"] = [" ".join(p or "(none)" for p in others[tuple(r[k] for k in CELL_KEYS)]
                                          if p != r["protocol"]) for _, r in chosen.iterrows()]
    joined = [_published(published_of, r) for _, r in chosen.iterrows()]
    chosen["published"], chosen["published_metric"], chosen["published_source"] = (list(c) for c in zip(*joined))
    chosen[["mean", "std"]] = chosen[["mean", "std"]].round(1)
    return chosen[COLUMNS].sort_values(["split", "method_label"]).reset_index(drop=True)


def cell_text(row: pd.Series) -> str:
    """``52.7 ± 3.1 (3)``, ``68.1 (1)``, † where a run came from a dirty tree."""
    spread = f" ± {row['std']:.1f}" if pd.notna(row["std"]) else ""
    return f"{row['mean']:.1f}{spread} ({row['seeds']}){DIRTY if row['dirty'] else ''}"


def paper_text(row: pd.Series) -> str:
    """``paper 33.7``, with ``EM`` where the paper's metric is exact match and the cell's is not; '' for none."""
    if pd.isna(row["published"]):
        return ""
    return f"paper {row['published']:.1f}{' EM' if row['published_metric'] != row['metric'] else ''}"


def family_splits(table: pd.DataFrame) -> dict[str, list[str]]:
    """Family name -> its splits, in the families' display order, splits sorted within."""
    fams: dict[str, list[str]] = {}
    for split, data in sorted(set(zip(table["split"], table["data"]))):
        fams.setdefault(family(data), []).append(split)
    return {fam: fams[fam] for fam in FAMILY_ORDER if fam in fams}


def to_markdown(table: pd.DataFrame) -> str:
    out = ["# The zoo's headline table", "",
           "Generated by `python benchmarks/leaderboard.py` from `results/runs.csv` (the per-protocol detail is in "
           "`LEADERBOARD.md`). A cell is the test metric in percent, mean ± sample std over seeds (seeds in "
           "brackets); the metric is denotation accuracy where the dataset's programs execute, else exact match. "
           "Where a method ran under several protocols, the one with the best mean validation metric is shown "
           "(`zoo.csv` names it and the others). *paper*: the published number for the same method and split "
           "(sources below each table; the paper's backbone may differ; *EM*: the paper reports exact match only). "
           f"{DIRTY}: includes a run from a working tree with uncommitted changes.", ""]
    for fam, splits in family_splits(table).items():
        part = table[table["split"].isin(splits)]
        out += [f"## {fam}", "", "| Method | " + " | ".join(s.replace(" · ", "<br>") for s in splits) + " |",
                "|---" * (len(splits) + 1) + "|"]
        for label, rows in sorted(part.groupby("method_label"), key=lambda kv: kv[0]):
            cells = {r["split"]: cell_text(r) + (f"<br>*{paper_text(r)}*" if paper_text(r) else "")
                     for _, r in rows.iterrows()}
            out.append(f"| {label} | " + " | ".join(cells.get(s, "") for s in splits) + " |")
        metrics = sorted({(s, m) for s, m in zip(part["split"], part["metric"])})
        out += ["", "Metric: " + ", ".join(f"{s} {m.replace('_', ' ')}" for s, m in metrics) + "."]
        sources = sorted(set(part["published_source"].dropna()) - {""})
        if sources:
            out += ["Paper numbers: " + "; ".join(sources) + "."]
        out.append("")
    return "\n".join(out)


def _tick(split: str) -> str:
    """A split's axis label on two lines where it is long: ``geo_sql_`` / ``template``, ``cfq_mcd1`` / subsample."""
    if " · " in split:
        return split.replace(" · ", "\n")
    return split if len(split) <= 15 else split[:split.rindex("_") + 1] + "\n" + split[split.rindex("_") + 1:]


def plot_families(table: pd.DataFrame, seeds: pd.DataFrame, path) -> None:
    """One panel per family; bars = methods measured there, error bars = std over seeds, dots = the seeds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    panels = list(family_splits(table).items())
    # each panel tall enough for its legend (one line per method)
    heights = [max(2.6, 0.17 * (table[table["split"].isin(s)]["method_label"].nunique() + 1)) for _, s in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(13.3, sum(heights) + 0.9 * len(panels)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (fam, splits) in zip(axes[:, 0], panels):
        part = table[table["split"].isin(splits)].sort_values("method_label")
        labels = sorted(part["method_label"].unique())
        colors = plt.cm.tab20(range(20)) if len(labels) > 10 else [f"C{i}" for i in range(10)]
        width = min(0.3, 0.84 / part.groupby("split").size().max())
        for x0, split in enumerate(splits):  # the methods measured on a split share its slot, centred
            bars = part[part["split"] == split]
            for k, (_, r) in enumerate(bars.iterrows()):
                x, i = x0 + (k - (len(bars) - 1) / 2) * width, labels.index(r["method_label"])
                std = 0.0 if pd.isna(r["std"]) else r["std"]  # clipped to the metric's range
                ax.bar(x, r["mean"], width, color=colors[i % len(colors)], yerr=[[min(std, r["mean"])],
                       [min(std, 100 - r["mean"])]], capsize=2, error_kw={"lw": 0.8})
                mine = seeds[(seeds["split"] == split) & (seeds["protocol"] == r["protocol"])
                             & (seeds["method_label"] == r["method_label"])]["value"]
                ax.plot([x] * len(mine), mine, ".", color="0.15", markersize=3)
                if pd.notna(r["published"]):
                    ax.plot(x, r["published"], "D", color="black", markerfacecolor="white", markersize=5)
        legend = [Patch(color=colors[i % len(colors)], label=label) for i, label in enumerate(labels)]
        legend.append(Line2D([], [], marker="D", color="black", markerfacecolor="white", ls="", label="published"))
        ax.set_xticks(range(len(splits)), [_tick(s) for s in splits], fontsize=8.5)
        ax.set_xlim(-0.55, len(splits) - 0.45)
        ax.set_ylim(0, 105)
        ax.set_ylabel("test %")
        ax.set_title(fam, loc="left", fontsize=11, fontweight="bold")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(handles=legend, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    fig.subplots_adjust(left=0.05, right=0.72, top=0.97, bottom=0.04, hspace=0.45)  # legends in the right 28%
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def plot_heatmap(table: pd.DataFrame, path) -> None:
    """Methods x splits (grouped by family), coloured and annotated by the cell's mean."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    splits = [s for fam_splits in family_splits(table).values() for s in fam_splits]
    labels = sorted(table["method_label"].unique())
    grid = np.full((len(labels), len(splits)), np.nan)
    for _, r in table.iterrows():
        grid[labels.index(r["method_label"]), splits.index(r["split"])] = r["mean"]
    fig, ax = plt.subplots(figsize=(min(15.5, 4.5 + 0.5 * len(splits)), 1.2 + 0.3 * len(labels)))
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0, vmax=100, aspect="auto")
    ax.set_facecolor("0.92")
    for (i, j), value in np.ndenumerate(grid):
        if not np.isnan(value):
            ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7,
                    color="white" if value < 60 else "black")
    ax.set_xticks(range(len(splits)), [s.replace(" · ", " ") for s in splits], fontsize=7.5, rotation=45,
                  ha="right", rotation_mode="anchor")
    ax.set_yticks(range(len(labels)), labels, fontsize=7.5)
    fig.colorbar(image, ax=ax, fraction=0.025, pad=0.01, label="test %")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


README_START, README_END = "<!-- zoo.md: start -->", "<!-- zoo.md: end -->"


def update_readme(readme, zoo_md: str) -> None:
    """Put ZOO.md's tables between the README's two markers; a README without both is an
    error naming it, so that the front page never silently stops following the results."""
    # the tables without ZOO.md's title and introduction (the README has its own), families under its section
    body = zoo_md[zoo_md.find("\n## "):].replace("\n## ", "\n### ") if "\n## " in zoo_md else ""
    splice_readme(readme, "zoo.md", body)


def own_results(runs: Path, out_dir: Path) -> bool:
    """Whether tables are built from the repository's own results/runs.csv into results/: only those reach the
    README, which follows the repository's own results, never a scratch ``$ZOO_RESULTS``."""
    root = Path(__file__).resolve().parents[1]
    return (runs.resolve(), out_dir.resolve()) == ((root / "results" / "runs.csv").resolve(),
                                                   (root / "results").resolve())


def splice_readme(readme, block: str, body: str) -> None:
    """Replace what stands between the README's ``<!-- {block}: start -->`` and ``<!-- {block}: end -->`` by
    ``body``, atomically; a README without both markers is an error naming it and them."""
    from zoo.results import atomic_path

    start, end = f"<!-- {block}: start -->", f"<!-- {block}: end -->"
    text = readme.read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise ValueError(f"{readme}: no {start} ... {end} block to put the {block} table in")
    head, rest = text.split(start, 1)
    with atomic_path(readme) as tmp:
        tmp.write_text(f"{head}{start}\n{body.strip()}\n{end}{rest.split(end, 1)[1]}", encoding="utf-8")
