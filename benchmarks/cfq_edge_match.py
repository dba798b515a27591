"""Rescore CFQ predictions the way the GGD reference implementation counted a question right, beside our exact match.

Our exact match (``zoo.metrics``) compares whole queries: query type, every relation, every type, gender and
nationality constant, every FILTER. The reference implementation of Gai et al. (github.com/gaiyu0/cfq) scored
something narrower. Its ``AttentionModel`` (``cfq/model.py``) predicts, and its ``emr`` counts, only the relation
tensor over the *gold* query's entities and variables. The relation vocabulary of its preprocessing notebooks
(``nb/preproc-templ.ipynb``, ``nb/preproc-np-v3.ipynb``) leaves out ``a`` (types), ``!=`` (FILTER) and gender and
nationality constants. The variables appended to the question are the gold query's. So the paper's 97.9 on MCD1
measures the edges between entities and variables, and nothing else.

This script reports two such views of our predictions: edge exact match, where a question counts as right when its
set of (subject, relation, object) triples whose subject and object are both anonymised entities (``M0``) or
variables (``?x0``) equals the gold's; and ``emr`` itself (``zoo.formalisms.sparql.emr_view``: the same, less
forward gender and nationality, with coordinated entities one node), which runs since then also record as
``test_emr``. They are comparison aids, not replacements. Our headline stays the full-query exact match. An
unparsable prediction counts as wrong.

    python benchmarks/cfq_edge_match.py                  # every CFQ run of results/runs.csv with its predictions
    python benchmarks/cfq_edge_match.py --model ggd --data cfq_mcd1

It also says where the wrong queries differ from the gold (``differences``): ``unparsable``, ``query_type`` (count
against select, or another projection), ``variables`` (how many), ``types`` (``?x0 a film.director``),
``attributes`` (the other constants: gender, nationality), ``filters`` and ``relations`` (the triples between
entities and variables), each column the share of all test questions wrong in that part (a question wrong in
several parts counts in each).

It rewrites ``results/cfq_edge_match.csv`` (atomically, ``zoo.results.write_rows``), one row per run: a run rescored
now replaces its earlier row, and the rows of runs whose predictions are gone (run directories do not outlive the
machine they ran on) stay. A run whose predictions file no longer matches its row's exact match (the directory was
reused) is skipped with a warning.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.formalisms import FormalismError, get_formalism  # noqa: E402
from zoo.formalisms.sparql import TYPE_RELATION, SparqlQuery, emr_view  # noqa: E402
from zoo.results import (RUN_KEYS, ResultsFileError, fraction, path_from_row, read_predictions,  # noqa: E402
                         read_rows, results_table, runs_file, write_rows)

NODE = re.compile(r"M\d+|\?x\d+")  # anonymised entities and variables; not constants such as m_05zppz
TOLERANCE = 1e-4  # a predictions file must reproduce its row's exact match to this precision


def edges(program: str) -> frozenset[tuple[str, str, str]] | None:
    """The triples between entities and variables of a CFQ query; None when it does not parse."""
    try:
        query = get_formalism("cfq_sparql").parse(program)
    except FormalismError:
        return None
    return frozenset((t.subject, t.relation, t.object) for t in query.triples
                     if NODE.fullmatch(t.subject) and NODE.fullmatch(t.object))


def emr(program: str, utterance: str) -> frozenset[tuple[str, str, str]] | None:
    """The reference implementation's view of a CFQ query; None when it does not parse."""
    try:
        return emr_view(get_formalism("cfq_sparql").parse(program), utterance)
    except FormalismError:
        return None


PARTS = ("unparsable", "query_type", "variables", "types", "attributes", "filters", "relations")


def _parts(query: SparqlQuery) -> dict[str, object]:
    triples = set(query.triples)
    return {"query_type": (query.query_type, query.projection),
            "variables": len({term for c in query.conjuncts for term in c.ends if term.startswith("?")}),
            "types": {t for t in triples if t.relation == TYPE_RELATION},
            "attributes": {t for t in triples if t.relation != TYPE_RELATION and not NODE.fullmatch(t.object)},
            "filters": set(query.filters),
            "relations": {t for t in triples if NODE.fullmatch(t.subject) and NODE.fullmatch(t.object)}}


def differences(prediction: str, gold: str) -> set[str]:
    """The ``PARTS`` in which a predicted query differs from the gold one (empty when they are the same)."""
    sparql = get_formalism("cfq_sparql")
    try:
        predicted = _parts(sparql.parse(prediction))
    except FormalismError:
        return {"unparsable"}
    expected = _parts(sparql.parse(gold))
    return {part for part in expected if predicted[part] != expected[part]}


def rescore(predictions: Path) -> dict[str, float | int]:
    """Exact match, edge exact match and emr (fractions) over one ``predictions.jsonl``, and the share of questions
    wrong in each of ``PARTS``."""
    n = exact = edge = emr_correct = 0
    wrong = dict.fromkeys(PARTS, 0)
    for record in read_predictions(predictions):
        gold, prediction, correct, utterance = (record[key] for key in ("gold", "prediction", "correct", "utterance"))
        n += 1
        exact += correct
        predicted = edges(prediction)
        edge += predicted is not None and predicted == edges(gold)
        predicted = emr(prediction, utterance)
        emr_correct += predicted is not None and predicted == emr(gold, utterance)
        if not correct:
            for part in differences(prediction, gold):
                wrong[part] += 1
    return {"n_test": n, "test_exact_match": exact / n, "test_edge_exact_match": edge / n, "test_emr": emr_correct / n,
            **{f"wrong_{part}": wrong[part] / n for part in PARTS}}


def _key(row: dict) -> tuple:
    """One run: its results row's identity (a run launched again at another commit is another run)."""
    return tuple(str(row[key]) for key in ("model", "variant", "backbone", "data", "seed", "git_commit", "run_dir"))


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
    table = []
    for row, exact_match in zip(rows, recorded):
        predictions = path_from_row(row["run_dir"]) / "predictions.jsonl"
        if not predictions.exists():
            print(f"skip {row['run_dir']}: no predictions.jsonl", file=sys.stderr)
            continue
        try:
            scores = rescore(predictions)
        except ResultsFileError as e:
            print(e, file=sys.stderr)
            return 1
        if abs(scores["test_exact_match"] - exact_match) > TOLERANCE:
            print(f"skip {row['run_dir']}: its predictions give exact match {scores['test_exact_match']:.4f}, "
                  f"its row {exact_match:.4f} (the directory was reused)", file=sys.stderr)
            continue
        out = {key: row[key] for key in ("model", "variant", "backbone", "data", "seed", "git_commit", "run_dir")}
        out.update({key: round(value, 6) if isinstance(value, float) else value for key, value in scores.items()})
        table.append(out)
        print(f"{row['model']:>6} {row['variant']:>13} {row['data']:>17} seed {row['seed']}: exact match "
              f"{100 * scores['test_exact_match']:.2f}, edge exact match {100 * scores['test_edge_exact_match']:.2f}, "
              f"emr {100 * scores['test_emr']:.2f}; wrong in "
              + ", ".join(f"{part} {100 * scores[f'wrong_{part}']:.2f}" for part in PARTS))
    if table:
        kept = [row for row in read_rows(args.out) if _key(row) not in {_key(new) for new in table}] \
            if Path(args.out).is_file() else []
        write_rows(args.out, kept + table)
        print(f"wrote {len(table)} rows to {args.out} ({len(kept)} earlier rows kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
