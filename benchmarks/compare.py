"""Paired comparison of trained runs on the same test set: which examples each model gets right, and is the
difference more than chance? (issue 26, item 3)

    python benchmarks/compare.py RUN_A RUN_B
    python benchmarks/compare.py --a RUN [RUN ...] --b RUN [RUN ...]        # several seeds a side
    python benchmarks/compare.py runs/seq2seq-baseline/scan_mcd1 runs/seq2seq-rir/scan_mcd1   # every seed of each

A RUN is, in this order:
  - a run directory holding ``predictions.jsonl`` (or that file itself);
  - a folder of seeds, ``runs/<model>-<variant>/<data>``: each ``seed*/`` below it that holds predictions;
  - a name looked up in the runs table (``$ZOO_RESULTS``, else results/runs.csv, ``--runs`` to choose): the rows
    whose ``run_dir`` ends with it, ``seq2seq-rir/scan_mcd1/seed1`` for one run, ``seq2seq-rir/scan_mcd1`` for
    every seed recorded (a re-run of a directory counts once).

Every run of both sides must hold the same test set: examples are aligned by position and each line's utterance
(without the exemplars a retrieval run appends after `` || ``) and gold program must agree, else an error names
both files and the first line that differs. An example is right by the dataset's primary metric: denotation
accuracy where every run has ``denotation_correct``, else exact match (``--metric`` to choose); a prediction that
did not parse or run is already wrong in predictions.jsonl.

Reported (Markdown on stdout and in ``compare.md``, tidy rows in ``compare.csv``, bars in ``compare.png``; by default
under ``results/compare/<A>-vs-<B>/`` beside the runs table, ``--out`` to choose; each file written atomically):
  - accuracy of each side (mean ± sample std over its runs);
  - per-example agreement (both right, only A, only B, both wrong), summed over every pair of an A and a B run;
  - McNemar's exact test for each pair of runs: a two-sided binomial test on the discordant examples;
  - a paired bootstrap confidence interval of the difference in accuracy (examples resampled, each example's
    correctness averaged over the runs of a side);
  - with two runs or more a side: the difference of the means with Welch's t interval over seeds, which is the
    seed-to-seed spread that one pair of runs cannot show;
  - accuracy by structural bucket: gold program length in tokens (every dataset), command length in words (SCAN),
    program depth (GeoQuery FunQL, SCAN-SP), number of triples and of variables (CFQ), and the query template
    (``*_template`` splits: the gold program with its values masked, the most frequent ones apart);
  - a few examples that only A gets right (right in every A run, wrong in every B run), and only B.
The dataset comes from the runs table or the run directory (``runs/<model>-<variant>/<data>/seed<N>``); ``--data``
overrides it.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.results import (ResultsFileError, atomic_path, path_from_row, read_predictions, read_rows,  # noqa: E402
                         results_table, runs_file, write_rows)

METRICS = {"exact_match": "correct", "denotation": "denotation_correct"}
EXEMPLARS = " || "  # zoo.retrieval appends exemplars to the utterance after this separator
SEED_DIR = re.compile(r"seed\d+")


class CompareError(ValueError):
    """Runs that cannot be compared: the message names the file or argument and what was expected."""


@dataclass
class Run:
    """One trained run: where its predictions are, what it is called and which dataset it was tested on."""

    label: str
    path: Path  # its predictions.jsonl
    data: str | None
    rows: list[dict] | None = None


# ----------------------------------------------------------------------------------------------------------------
# Finding runs
# ----------------------------------------------------------------------------------------------------------------
def _label(run_dir: Path) -> str:
    """``<model>-<variant>/<data>/seed<N>``: the last three parts of a run directory of the usual layout."""
    parts = run_dir.parts
    return "/".join(parts[-3:]) if SEED_DIR.fullmatch(run_dir.name) and len(parts) >= 3 else str(run_dir)


def _data_of(run_dir: Path) -> str | None:
    return run_dir.parent.name if SEED_DIR.fullmatch(run_dir.name) and len(run_dir.parts) >= 2 else None


def resolve_runs(spec: str, runs_csv: Path) -> list[Run]:
    """The runs ``spec`` names (a run directory, a folder of seeds, or a runs-table name; module docstring)."""
    path = Path(spec)
    if path.is_file():
        path = path.parent
    if path.is_dir():
        if (path / "predictions.jsonl").is_file():
            return [Run(_label(path), path / "predictions.jsonl", _data_of(path))]
        seeds = sorted((d for d in path.iterdir()
                        if SEED_DIR.fullmatch(d.name) and (d / "predictions.jsonl").is_file()),
                       key=lambda d: int(d.name[4:]))
        if seeds:
            return [Run(_label(d), d / "predictions.jsonl", _data_of(d)) for d in seeds]
        raise CompareError(f"{path}: no predictions.jsonl in it, nor in a seed*/ folder below it (a run that has "
                           "not finished testing?)")
    parts = Path(spec.strip("/")).parts
    found: dict[Path, Run] = {}
    for row in read_rows(runs_csv, required=("data", "seed", "run_dir")):
        run_dir = path_from_row(row["run_dir"])
        if parts and parts in (run_dir.parts[-len(parts):], run_dir.parent.parts[-len(parts):]):
            if not (run_dir / "predictions.jsonl").is_file():
                raise CompareError(f"{runs_csv}:{row.line}: the run {spec!r} names {run_dir}, which holds no "
                                   "predictions.jsonl")
            found.pop(run_dir, None)  # a re-run replaces the earlier row, and keeps the order of the latest
            found[run_dir] = Run(_label(run_dir), run_dir / "predictions.jsonl", row["data"])
    if not found:
        raise CompareError(f"{spec!r}: no such run directory, and no row of {runs_csv} whose run_dir ends with it "
                           "(expected a run directory or a name such as seq2seq-rir/scan_mcd1/seed1)")
    return sorted(found.values(), key=lambda run: run.label)


# ----------------------------------------------------------------------------------------------------------------
# Aligning and scoring
# ----------------------------------------------------------------------------------------------------------------
def own_utterance(utterance: str) -> str:
    """The example's utterance without the exemplars a retrieval run appends, so that such a run aligns with others."""
    return utterance.split(EXEMPLARS, 1)[0]


def check_aligned(runs: Sequence[Run]) -> None:
    """Every run holds the same test examples in the same order, else a CompareError at the first difference."""
    first = runs[0]
    for run in runs[1:]:
        if len(run.rows) != len(first.rows):
            raise CompareError(f"different test sets: {first.path} has {len(first.rows)} examples, {run.path} "
                               f"{len(run.rows)}")
        for line, (a, b) in enumerate(zip(first.rows, run.rows), 1):
            for field, key in (("utterance", lambda r: own_utterance(r["utterance"])), ("gold", lambda r: r["gold"])):
                if key(a) != key(b):
                    raise CompareError(f"different test sets: line {line} of {first.path} and of {run.path} differ "
                                       f"in {field}: {key(a)[:120]!r} against {key(b)[:120]!r}")


def choose_metric(runs: Sequence[Run], metric: str = "auto") -> str:
    """``denotation`` where every row of every run has ``denotation_correct`` (the primary metric of executable
    datasets), else ``exact_match``; a metric asked for must be in every row."""
    if metric == "auto":
        has = all(isinstance(row.get("denotation_correct"), bool) for run in runs for row in run.rows)
        return "denotation" if has else "exact_match"
    field = METRICS[metric]
    for run in runs:
        for line, row in enumerate(run.rows, 1):
            if not isinstance(row.get(field), bool):
                raise CompareError(f"{run.path}:{line}: no {field!r} (true or false) for --metric {metric}")
    return metric


def correctness(runs: Sequence[Run], metric: str) -> np.ndarray:
    """Runs x examples, True where the run's prediction is right by ``metric``."""
    return np.array([[row[METRICS[metric]] for row in run.rows] for run in runs], dtype=bool)


# ----------------------------------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------------------------------
def agreement(a: np.ndarray, b: np.ndarray) -> dict[str, int]:
    """The 2x2 table of two runs' per-example correctness: both right, only A right, only B right, both wrong."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    return {"both_right": int(np.sum(a & b)), "only_a": int(np.sum(a & ~b)), "only_b": int(np.sum(~a & b)),
            "both_wrong": int(np.sum(~a & ~b))}


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """McNemar's exact test: two-sided p of the discordant counts under "each discordant example is equally likely
    to favour either run" (a binomial test at 1/2). The examples both runs get right or wrong say nothing about
    which is better, and the exact test stays valid for the few discordant examples of small test sets."""
    if only_a + only_b == 0:
        return 1.0
    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def paired_bootstrap(a: np.ndarray, b: np.ndarray, resamples: int = 10_000, confidence: float = 0.95,
                     seed: int = 0) -> tuple[float, float, float]:
    """The observed mean of ``a - b`` over examples and its percentile bootstrap interval, resampling examples with
    replacement (both sides together: the examples are paired). ``a`` and ``b`` are per-example scores (0/1, or
    the mean over a side's runs).

    A resample's mean depends only on how many times it draws each distinct value of ``a - b`` (three values for
    one run a side), so the counts are drawn from the multinomial that resampling n examples gives: the same
    distribution as drawing indices, in memory that does not grow with the test set."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    values, counts = np.unique(diff, return_counts=True)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(diff), counts / len(diff), size=resamples)
    means = draws @ values / len(diff)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(diff.mean()), float(low), float(high)


def welch(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float, float]:
    """Difference of the means of two groups of seeds, Welch's t interval and two-sided p (unequal variances):
    nan where a side has fewer than two runs or neither side varies."""
    diff = float(np.mean(a) - np.mean(b))
    if len(a) < 2 or len(b) < 2 or (np.std(a) == 0 and np.std(b) == 0):
        return diff, math.nan, math.nan, math.nan
    with warnings.catch_warnings():  # a side whose seeds all agree makes scipy warn of lost precision; none is lost
        warnings.simplefilter("ignore", RuntimeWarning)
        test = stats.ttest_ind(a, b, equal_var=False)
    interval = test.confidence_interval(confidence)
    return diff, float(interval.low), float(interval.high), float(test.pvalue)


# ----------------------------------------------------------------------------------------------------------------
# Structural buckets
# ----------------------------------------------------------------------------------------------------------------
def program_length(gold: str, formalism) -> int:
    """Tokens of the gold program, as its formalism tokenises it (SQL operators, FunQL brackets and constants)."""
    return len(formalism.tokenize(gold))


def program_depth(gold: str, formalism) -> int:
    """Bracket nesting of a prefix term: ``answer ( population_1 ( stateid ( 'texas' ) ) )`` is 3."""
    depth = deepest = 0
    for token in formalism.tokenize(gold):
        depth += {"(": 1, ")": -1}.get(token, 0)
        deepest = max(deepest, depth)
    return deepest


def cfq_triples(gold: str, formalism) -> int:
    """Distinct triples of a CFQ query (type triples included, FILTERs not)."""
    return len(formalism.canonical_query(formalism.parse(gold)).triples)


def cfq_variables(gold: str, formalism) -> int:
    """Distinct variables of a CFQ query (``?x0``..``?x5``), the projected one included."""
    from zoo.formalisms.sparql import NODE_VARIABLE, term_kind

    query = formalism.parse(gold)
    terms = {t for c in query.conjuncts for t in c.ends} | {query.projection}
    return len({t for t in terms if t and term_kind(t) == NODE_VARIABLE})


def command_length(utterance: str, formalism=None) -> int:
    """Words of a SCAN command."""
    return len(own_utterance(utterance).split())


def template(gold: str, formalism) -> str:
    """The gold program with its values masked (``Formalism.template``): a template split holds out whole
    templates, so accuracy per template shows which unseen query shapes a model learnt."""
    return formalism.template(gold)


@dataclass(frozen=True)
class Bucketing:
    name: str  # section of compare.csv and title in compare.md
    measure: Callable  # (text, formalism) -> number or template
    reads: str  # "gold" or "utterance"
    formalism: str | None  # the formalism it parses with; None: the dataset's
    numeric: bool = True


def bucketings(data: str | None) -> tuple[list[Bucketing], str]:
    """The bucketings that apply to ``data`` and the name of its formalism (``tokens``, whitespace, when the
    dataset is not known)."""
    if data is None:
        return [Bucketing("program length (tokens)", program_length, "gold", "tokens")], "tokens"
    from zoo.registry import RegistryError, get_dataset
    try:
        formalism = get_dataset(data).formalism
    except RegistryError as unknown:
        raise CompareError(f"{unknown} (from --data, the runs table or the run directory)") from None
    chosen = [Bucketing("program length (tokens)", program_length, "gold", None)]
    if formalism in ("scan", "scan_sp"):
        chosen.append(Bucketing("command length (words)", command_length, "utterance", None))
    if formalism in ("funql", "scan_sp"):
        chosen.append(Bucketing("program depth", program_depth, "gold", None))
    if formalism == "cfq_sparql":
        chosen += [Bucketing("CFQ triples", cfq_triples, "gold", None),
                   Bucketing("CFQ variables", cfq_variables, "gold", None)]
    if data.endswith("_template"):
        chosen.append(Bucketing("query template", template, "gold", None, numeric=False))
    return chosen, formalism


def numeric_buckets(values: Sequence[int], bins: int = 4, exact_up_to: int = 10) -> tuple[list[str], list[str]]:
    """A label per value and the labels in order: one bucket per value when there are at most ``exact_up_to``
    distinct values, else ``bins`` quantile ranges (``3-5``) so that each bucket holds enough examples to read."""
    values = np.asarray(values)
    distinct = sorted(set(values.tolist()))
    if len(distinct) <= exact_up_to:
        return [str(v) for v in values.tolist()], [str(v) for v in distinct]
    edges = np.unique(np.quantile(values, [k / bins for k in range(1, bins)]))
    index = np.searchsorted(edges, values, side="left")  # bucket k holds edges[k-1] < v <= edges[k]
    names = {}
    for k in sorted(set(index.tolist())):
        members = values[index == k]
        low, high = int(members.min()), int(members.max())
        names[k] = str(low) if low == high else f"{low}-{high}"
    return [names[k] for k in index.tolist()], list(names.values())


def template_buckets(templates: Sequence[str], top: int = 8) -> tuple[list[str], list[str], dict[str, str]]:
    """The ``top`` most frequent templates as buckets T1.. (most frequent first), the rest as one ``other`` bucket;
    returns the labels per example, the labels in order and each label's template."""
    ranked = [t for t, _ in Counter(templates).most_common()]
    names = {t: f"T{k}" for k, t in enumerate(ranked[:top], 1)}
    rest = len(ranked) - len(names)
    other = f"other ({rest} templates)"
    labels = [names.get(t, other) for t in templates]
    order = list(names.values()) + ([other] if rest else [])
    return labels, order, {label: t for t, label in names.items()}


def bucket_labels(bucketing: Bucketing, rows: Sequence[dict], formalism_name: str, source: Path, bins: int,
                  top: int) -> tuple[list[str], list[str], dict[str, str]]:
    """Each example's bucket under ``bucketing``, the buckets in order, and what the labels stand for."""
    from zoo.formalisms import FormalismError, get_formalism

    formalism = get_formalism(bucketing.formalism or formalism_name)
    values = []
    for line, row in enumerate(rows, 1):
        try:
            values.append(bucketing.measure(row[bucketing.reads], formalism))
        except FormalismError as error:
            raise CompareError(f"{source}:{line}: {bucketing.name}: the gold program is not {formalism.name} "
                               f"({error}); is --data right?") from None
    if bucketing.numeric:
        return (*numeric_buckets(values, bins), {})
    return template_buckets(values, top)


def bucket_stats(correct: np.ndarray, labels: Sequence[str], order: Sequence[str]) -> list[dict]:
    """Per bucket: examples, correct predictions summed over runs, accuracy (their mean) and the std over runs."""
    labels = np.asarray(labels)
    out = []
    for label in order:
        mask = labels == label
        per_run = correct[:, mask].mean(axis=1)
        out.append({"bucket": label, "runs": correct.shape[0], "n": int(mask.sum()),
                    "correct": int(correct[:, mask].sum()), "accuracy": float(per_run.mean()),
                    "std": float(per_run.std(ddof=1)) if correct.shape[0] > 1 else math.nan})
    return out


# ----------------------------------------------------------------------------------------------------------------
# The comparison
# ----------------------------------------------------------------------------------------------------------------
def side_label(runs: Sequence[Run]) -> str:
    """``seq2seq-rir/scan_mcd1 (seeds 1, 2, 3)`` for the seeds of one setting, else the run labels joined."""
    if len(runs) == 1:
        return runs[0].label
    parents = {run.label.rsplit("/", 1)[0] for run in runs}
    if len(parents) == 1 and all(SEED_DIR.fullmatch(run.label.rsplit("/", 1)[-1]) for run in runs):
        return f"{parents.pop()} (seeds {', '.join(run.label.rsplit('/seed', 1)[1] for run in runs)})"
    return " + ".join(run.label for run in runs)


def compare(runs_a: Sequence[Run], runs_b: Sequence[Run], *, metric: str = "auto", data: str | None = None,
            resamples: int = 10_000, confidence: float = 0.95, seed: int = 0, bins: int = 4, top: int = 8,
            examples: int = 5) -> dict:
    """Everything the report shows, from runs whose predictions are read (``Run.rows``)."""
    runs = [*runs_a, *runs_b]
    check_aligned(runs)
    datas = {data} if data else {run.data for run in runs if run.data}
    if len(datas) > 1:
        raise CompareError(f"the runs are of different datasets ({', '.join(sorted(datas))}); --data chooses the "
                           "buckets")
    data = datas.pop() if datas else None
    metric = choose_metric(runs, metric)
    a, b = correctness(runs_a, metric), correctness(runs_b, metric)
    acc_a, acc_b = a.mean(axis=1), b.mean(axis=1)
    pairs = [(ra.label, rb.label, agreement(x, y)) for ra, x in zip(runs_a, a) for rb, y in zip(runs_b, b)]
    pooled = {key: sum(table[key] for _, _, table in pairs) for key in pairs[0][2]}
    chosen, formalism = bucketings(data)
    buckets = []
    for bucketing in chosen:
        labels, order, legend = bucket_labels(bucketing, runs[0].rows, formalism, runs[0].path, bins, top)
        buckets.append({"name": bucketing.name, "legend": legend, "a": bucket_stats(a, labels, order),
                        "b": bucket_stats(b, labels, order)})
    only_a = np.flatnonzero(a.all(axis=0) & ~b.any(axis=0))
    only_b = np.flatnonzero(b.all(axis=0) & ~a.any(axis=0))
    return {
        "a": side_label(runs_a), "b": side_label(runs_b), "runs_a": runs_a, "runs_b": runs_b, "data": data,
        "metric": metric, "n": a.shape[1], "acc_a": acc_a, "acc_b": acc_b, "confidence": confidence,
        "pairs": [(x, y, table, mcnemar_exact(table["only_a"], table["only_b"])) for x, y, table in pairs],
        "pooled": pooled, "bootstrap": paired_bootstrap(a.mean(axis=0), b.mean(axis=0), resamples, confidence, seed),
        "resamples": resamples, "seed": seed, "welch": welch(acc_a, acc_b, confidence), "buckets": buckets,
        "only_a": [_example(runs_a[0], runs_b[0], i) for i in only_a[:examples]], "n_only_a": len(only_a),
        "only_b": [_example(runs_b[0], runs_a[0], i) for i in only_b[:examples]], "n_only_b": len(only_b),
    }


def _example(right: Run, wrong: Run, index: int) -> dict:
    row, other = right.rows[index], wrong.rows[index]
    return {"line": int(index) + 1, "utterance": own_utterance(row["utterance"]), "gold": row["gold"],
            "right": row["prediction"], "wrong": other["prediction"], "error": other.get("error", "")}


# ----------------------------------------------------------------------------------------------------------------
# Outputs
# ----------------------------------------------------------------------------------------------------------------
def _pct(x: float, std: float = math.nan) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{100 * x:.1f}" + ("" if math.isnan(std) else f" ± {100 * std:.1f}")


def _signed(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:+.1f}"


def _cell(text: str, limit: int = 160) -> str:
    text = text if len(text) <= limit else text[:limit] + "…"
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`" if text else ""


def _std(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def to_markdown(result: dict) -> str:
    r, level = result, f"{100 * result['confidence']:g}%"
    pooled, (diff, low, high) = r["pooled"], r["bootstrap"]
    metric = {"exact_match": "exact match", "denotation": "denotation accuracy"}[r["metric"]]
    out = [f"# {r['a']} vs {r['b']}", "",
           f"Test set: {r['n']} examples{' of ' + r['data'] if r['data'] else ''}; an example is right by "
           f"{metric}. **A** = {r['a']}, **B** = {r['b']}.", "",
           "## Accuracy", "", "| side | runs | accuracy (%) | per run |", "|---|---|---|---|"]
    for side, runs, acc in (("A", r["runs_a"], r["acc_a"]), ("B", r["runs_b"], r["acc_b"])):
        per_run = ", ".join(f"{run.label.rsplit('/', 1)[-1]} {_pct(x)}" for run, x in zip(runs, acc))
        out.append(f"| {side} | {len(runs)} | {_pct(acc.mean(), _std(acc))} | {per_run} |")
    pairs = len(r["pairs"])
    out += ["", "## Agreement per example", "",
            f"Counts over {'the one pair of runs' if pairs == 1 else f'all {pairs} pairs of an A and a B run'}.", "",
            "| | B right | B wrong |", "|---|---|---|",
            f"| **A right** | {pooled['both_right']} | {pooled['only_a']} |",
            f"| **A wrong** | {pooled['only_b']} | {pooled['both_wrong']} |", "",
            "McNemar's exact test (two-sided binomial test on the examples only one run gets right):", "",
            "| A run | B run | only A | only B | p |", "|---|---|---|---|---|"]
    for x, y, table, p in r["pairs"]:
        out.append(f"| {x} | {y} | {table['only_a']} | {table['only_b']} | {p:.4g} |")
    out += ["", f"**Difference A − B: {_signed(diff)} points**, paired bootstrap {level} interval [{_signed(low)}, "
            f"{_signed(high)}] ({r['resamples']:,} resamples of the {r['n']} examples, seed {r['seed']}"
            + ("; each example's correctness averaged over a side's runs" if pairs > 1 else "") + ")."]
    wdiff, wlow, whigh, wp = r["welch"]
    if len(r["runs_a"]) > 1 and len(r["runs_b"]) > 1:
        out += ["", f"Over seeds: difference of the means {_signed(wdiff)} points, Welch's t {level} interval "
                f"[{_signed(wlow)}, {_signed(whigh)}], p = {'n/a' if math.isnan(wp) else f'{wp:.4g}'} "
                f"({len(r['runs_a'])} against {len(r['runs_b'])} runs; the interval is wide when the seeds "
                "disagree, whatever the test set's size)."]
    else:
        out += ["", "One run on a side: the seed-to-seed spread is unknown, and the intervals above say nothing "
                "about another seed; compare two runs or more a side (`--a RUN RUN --b RUN RUN`)."]
    for bucket in r["buckets"]:
        out += ["", f"## Accuracy by {bucket['name']}", "",
                "| bucket | n | A (%) | B (%) | A − B |", "|---|---|---|---|---|"]
        for x, y in zip(bucket["a"], bucket["b"]):
            label = x["bucket"] + (f" {_cell(bucket['legend'][x['bucket']])}" if x["bucket"] in bucket["legend"]
                                   else "")
            out.append(f"| {label} | {x['n']} | {_pct(x['accuracy'], x['std'])} | {_pct(y['accuracy'], y['std'])} "
                       f"| {_signed(x['accuracy'] - y['accuracy'])} |")
    for side, other, key in (("A", "B", "only_a"), ("B", "A", "only_b")):
        shown = r[key]
        total = r["n_" + key]
        out += ["", f"## Only {side} right: {total} example{'s' * (total != 1)}"
                + (f", the first {len(shown)} shown" if 0 < len(shown) < total else ""), ""]
        if len(r["runs_a"]) + len(r["runs_b"]) > 2:
            out += [f"Right in every {side} run and wrong in every {other} run; predictions of the first run of each.",
                    ""]
        if not shown:
            out.append("None." if total == 0 else "(none shown: --examples 0)")
            continue
        out += [f"| line | utterance | gold | {side} predicted | {other} predicted |", "|---|---|---|---|---|"]
        for e in shown:
            wrong = _cell(e["wrong"]) + (f" ({e['error'][:100]})" if e["error"] else "")
            out.append(f"| {e['line']} | {_cell(e['utterance'])} | {_cell(e['gold'])} | {_cell(e['right'])} "
                       f"| {wrong} |")
    return "\n".join(out) + "\n"


def to_rows(result: dict) -> list[dict]:
    """compare.csv: one tidy row per number. ``section`` is overall, run, agreement, mcnemar, difference or a
    bucketing's name; ``side`` A, B or A-B; ``n`` the examples (agreement: the count; mcnemar: the discordant
    examples); ``correct`` the right predictions summed over the side's ``runs``; ``accuracy`` their mean and ``std``
    its sample std over runs; ``estimate``, ``low``, ``high`` a difference A - B and its interval (fractions);
    ``p_value`` a test's; ``template`` what a template bucket (T1..) stands for."""
    r, rows = result, []
    for side, runs, acc in (("A", r["runs_a"], r["acc_a"]), ("B", r["runs_b"], r["acc_b"])):
        rows.append({"section": "overall", "bucket": "all", "side": side, "runs": len(runs), "n": r["n"],
                     "correct": int(round(acc.sum() * r["n"])), "accuracy": acc.mean(), "std": _std(acc)})
        rows += [{"section": "run", "bucket": run.label, "side": side, "runs": 1, "n": r["n"],
                  "correct": int(round(x * r["n"])), "accuracy": x} for run, x in zip(runs, acc)]
    rows += [{"section": "agreement", "bucket": key, "side": "A-B", "runs": len(r["pairs"]), "n": count}
             for key, count in r["pooled"].items()]
    rows += [{"section": "mcnemar", "bucket": f"{x} vs {y}", "side": "A-B", "runs": 2,
              "n": table["only_a"] + table["only_b"], "p_value": p} for x, y, table, p in r["pairs"]]
    diff, low, high = r["bootstrap"]
    rows.append({"section": "difference", "bucket": "paired_bootstrap", "side": "A-B", "n": r["n"],
                 "estimate": diff, "low": low, "high": high})
    diff, low, high, p = r["welch"]
    rows.append({"section": "difference", "bucket": "welch_over_seeds", "side": "A-B",
                 "runs": len(r["runs_a"]) + len(r["runs_b"]), "estimate": diff, "low": low, "high": high,
                 "p_value": p})
    for bucket in r["buckets"]:
        for side in ("a", "b"):
            rows += [{"section": bucket["name"], **stat, "side": side.upper(),
                      "template": bucket["legend"].get(stat["bucket"], "")} for stat in bucket[side]]
    columns = ["section", "bucket", "side", "runs", "n", "correct", "accuracy", "std", "estimate", "low", "high",
               "p_value", "template"]
    return [{c: ("" if isinstance(row.get(c), float) and math.isnan(row[c]) else row.get(c, "")) for c in columns}
            for row in rows]


def plot(result: dict, path: Path) -> None:
    """Accuracy by bucket, A beside B, one panel per bucketing; error bars are the std over a side's runs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = result["buckets"]
    widest = max(len(bucket["a"]) for bucket in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(min(13.0, max(6.0, 0.8 * widest + 2.5)), 2.9 * len(panels)),
                             squeeze=False)
    for ax, bucket in zip(axes[:, 0], panels):
        x = np.arange(len(bucket["a"]))
        for offset, side, color in ((-0.2, "a", "C0"), (0.2, "b", "C1")):
            name = f"{side.upper()}: {result[side]}"
            acc = np.array([100 * s["accuracy"] for s in bucket[side]])
            std = np.nan_to_num([100 * s["std"] for s in bucket[side]])
            err = [np.minimum(std, acc), np.minimum(std, 100 - acc)]  # clipped to the metric's range
            ax.bar(x + offset, acc, 0.4, yerr=err if std.any() else None, capsize=3, color=color, label=name)
        ticks = [s["bucket"] if len(s["bucket"]) <= 22 else s["bucket"][:21] + "…" for s in bucket["a"]]
        ax.set_xticks(x, [f"{tick}\nn={s['n']}" for tick, s in zip(ticks, bucket["a"])], fontsize=8)
        ax.set_title(f"by {bucket['name']}", fontsize=10)
        ax.set_ylabel(f"{result['metric'].replace('_', ' ')} (%)")
        ax.set_ylim(0, 105)
        ax.grid(axis="y", alpha=0.3)
    height = fig.get_size_inches()[1]
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="upper left", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / height))  # room above the panels for the legend naming A and B
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def _slug(runs: Sequence[Run]) -> str:
    label = side_label(runs).split(" (seeds")[0] if len(runs) > 1 else runs[0].label
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", label).strip("_")[:100]


def write_outputs(result: dict, out: Path) -> str:
    """compare.md, compare.csv and compare.png in ``out``, each replaced in one step; returns the Markdown."""
    markdown = to_markdown(result)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "compare.md") as tmp:
        tmp.write_text(markdown, encoding="utf-8")
    write_rows(out / "compare.csv", to_rows(result))
    with atomic_path(out / "compare.png") as tmp:
        plot(result, tmp)
    return markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pair", nargs="*", metavar="RUN", help="A then B, one run (or folder of seeds) each")
    parser.add_argument("--a", nargs="+", default=[], metavar="RUN", help="the runs of side A (seeds)")
    parser.add_argument("--b", nargs="+", default=[], metavar="RUN", help="the runs of side B (seeds)")
    parser.add_argument("--runs", type=Path, help="runs table for run names (default: $ZOO_RESULTS, else "
                        "results/runs.csv)")
    parser.add_argument("--metric", choices=["auto", *METRICS], default="auto",
                        help="auto: denotation where every run has it, else exact match")
    parser.add_argument("--data", help="the dataset, for the buckets (default: from the runs table or run directory)")
    parser.add_argument("--out", type=Path, help="output folder (default: results/compare/<A>-vs-<B>/ beside the "
                        "runs table)")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    parser.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--bins", type=int, default=4, help="quantile buckets of lengths with many values")
    parser.add_argument("--templates", type=int, default=8, help="templates shown apart (default 8)")
    parser.add_argument("--examples", type=int, default=5, help="examples shown that only one side gets right")
    args = parser.parse_args(argv)
    if args.pair and (args.a or args.b):
        parser.error("give A and B either as two RUN arguments or with --a and --b, not both")
    if args.pair and len(args.pair) != 2:
        parser.error(f"expected two RUN arguments (A and B), got {len(args.pair)}; use --a and --b for several")
    if not args.pair and not (args.a and args.b):
        parser.error("expected two RUN arguments, or --a RUN [RUN ...] and --b RUN [RUN ...]")
    if args.resamples < 1 or not 0 < args.confidence < 1 or args.bins < 1 or args.templates < 1 or args.examples < 0:
        parser.error("--resamples, --bins and --templates must be at least 1, --examples at least 0 and "
                     "--confidence between 0 and 1")
    specs_a, specs_b = ([args.pair[0]], [args.pair[1]]) if args.pair else (args.a, args.b)
    try:
        runs_csv = args.runs or runs_file()
        runs_a = [run for spec in specs_a for run in resolve_runs(spec, runs_csv)]
        runs_b = [run for spec in specs_b for run in resolve_runs(spec, runs_csv)]
        for run in runs_a + runs_b:
            run.rows = read_predictions(run.path)
        result = compare(runs_a, runs_b, metric=args.metric, data=args.data, resamples=args.resamples,
                         confidence=args.confidence, seed=args.seed, bins=args.bins, top=args.templates,
                         examples=args.examples)
        out = args.out or results_table("compare") / f"{_slug(runs_a)}-vs-{_slug(runs_b)}"
        markdown = write_outputs(result, out)
    except (CompareError, ResultsFileError, OSError) as error:
        print(f"compare: {error}", file=sys.stderr)
        return 1
    print(markdown)
    print(f"compare: wrote {out}/compare.md, compare.csv, compare.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
