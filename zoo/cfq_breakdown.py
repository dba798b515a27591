"""Where a CFQ run's wrong queries differ from the gold, and how the reference implementation would have scored them.

Our exact match (``zoo.metrics``) compares whole queries: query type, every relation, every type, gender and
nationality constant, every FILTER. The reference implementation of Gai et al. (github.com/gaiyu0/cfq) scored
something narrower: its ``emr`` counts only the relation tensor over the *gold* query's entities and variables
(README, "Reading the paper's 97.9"). ``rescore`` gives two such views of a run's ``predictions.jsonl`` beside its
exact match: edge exact match, where a question counts as right when its set of (subject, relation, object) triples
whose subject and object are both anonymised entities (``M0``) or variables (``?x0``) equals the gold's; and ``emr``
itself (``zoo.formalisms.sparql.emr_view``). They are comparison aids; the headline stays the full-query exact match.
An unparsable prediction counts as wrong.

It also says where the wrong queries differ from the gold (``differences``): ``unparsable``, ``query_type`` (count
against select, or another projection), ``variables`` (how many), ``types`` (``?x0 a film.director``),
``attributes`` (the other constants: gender, nationality), ``filters`` and ``relations`` (the triples between
entities and variables), each the share of all test questions wrong in that part (a question wrong in several parts
counts in each).

``record_breakdown`` writes one run's row into ``cfq_edge_match.csv``; ``zoo.train`` does when a CFQ run ends,
so that the breakdown outlives the run directory (which does not outlive the machine the run trained on), and
``benchmarks/cfq_edge_match.py`` rescores the runs whose predictions are still on disk.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from zoo.formalisms import FormalismError, get_formalism
from zoo.formalisms.sparql import TYPE_RELATION, SparqlQuery, emr_view
from zoo.results import append_row, read_predictions

NODE = re.compile(r"M\d+|\?x\d+")  # anonymised entities and variables; not constants such as m_05zppz
PARTS = ("unparsable", "query_type", "variables", "types", "attributes", "filters", "relations")
# a run, as its results row names it (a run launched again at another commit is another run)
RUN_COLUMNS = ("model", "variant", "backbone", "data", "seed", "git_commit", "run_dir")


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


def breakdown_row(run: dict[str, Any], predictions: Path) -> dict[str, Any]:
    """One run's row of ``cfq_edge_match.csv``: the columns that name it (``RUN_COLUMNS``), then ``rescore``'s."""
    row = {key: run[key] for key in RUN_COLUMNS}
    row.update({key: round(value, 6) if isinstance(value, float) else value
                for key, value in rescore(predictions).items()})
    return row


def record_breakdown(row: dict[str, Any], out: Path) -> None:
    """Write one run's ``breakdown_row`` into ``out``, replacing that run's earlier row (other runs' rows stay, also
    those whose predictions are gone)."""
    append_row(out, row, replacing=RUN_COLUMNS)


def summary(row: dict[str, Any]) -> str:
    """One line: the run's exact match, edge exact match and emr, and where its wrong queries differ, in percent."""
    return (f"exact match {100 * row['test_exact_match']:.2f}, edge exact match "
            f"{100 * row['test_edge_exact_match']:.2f}, emr {100 * row['test_emr']:.2f}; wrong in "
            + ", ".join(f"{part} {100 * row[f'wrong_{part}']:.2f}" for part in PARTS))
