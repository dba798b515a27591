"""Metric values on hand-computed cases, including unparsable predictions and the CFQ canonical form."""
import pytest
import torch

from zoo.formalisms import FormalismError, get_formalism
from zoo.metrics import ExactMatch, exact_match_flags

SPARQL = get_formalism("cfq_sparql")
GOLD = "SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . ?x0 film.actor.film/ns:film.performance.film M1 }"


def test_cfq_canonical_sorts_and_deduplicates_conjuncts():
    shuffled = ("SELECT DISTINCT ?x0 WHERE { ?x0 film.actor.film/ns:film.performance.film M1 . "
                "?x0 a people.person . ?x0 a people.person }")
    assert SPARQL.canonical(shuffled) == SPARQL.canonical(GOLD)
    assert SPARQL.canonical(GOLD) == ("SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . "
                                      "?x0 film.actor.film/ns:film.performance.film M1 }")
    count = "SELECT count ( * ) WHERE { FILTER ( M0 != M1 ) . M0 people.person.spouse_s M1 }"
    assert SPARQL.parse(count).conjuncts == ("FILTER ( M0 != M1 )", "M0 people.person.spouse_s M1")
    with pytest.raises(FormalismError):
        SPARQL.parse("SELECT DISTINCT ?x0 WHERE { ?x0 a }")


def test_exact_match_hand_computed():
    scan = get_formalism("scan")
    preds = ["I_JUMP  I_WALK", "I_JUMP", "I_RUN I_RUN", "I_LOOK"]
    golds = ["I_JUMP I_WALK", "I_JUMP I_JUMP", "I_RUN I_RUN", "I_WALK"]
    assert exact_match_flags(preds, golds, scan) == [True, False, True, False]
    metric = ExactMatch(scan)
    metric.update(preds[:2], golds[:2])
    metric.update(preds[2:], golds[2:])
    assert metric.compute().item() == pytest.approx(0.5)
    assert metric.correct.item() == 2 and metric.total.item() == 4


def test_unparsable_prediction_is_wrong_not_a_crash():
    funql = get_formalism("funql")
    preds = ["answer ( state ( all ) )", "answer ( state ( all )", "SELECT DISTINCT"]
    golds = ["answer ( state ( all ) )"] * 3
    assert exact_match_flags(preds, golds, funql) == [True, False, False]
    assert exact_match_flags(["garbage", GOLD.replace("M1", "M1 .")], [GOLD, GOLD], SPARQL) == [False, False]


def test_state_is_sum_reduced_like_distributed_shards():
    """Two shards merged give the number one process gives: what dist_reduce_fx='sum' does across ranks."""
    scan = get_formalism("scan")
    whole, a, b = ExactMatch(scan), ExactMatch(scan), ExactMatch(scan)
    preds, golds = ["A", "B", "C"], ["A", "X", "C"]
    whole.update(preds, golds)
    a.update(preds[:1], golds[:1])
    b.update(preds[1:], golds[1:])
    a.merge_state(b)
    assert torch.equal(a.compute(), whole.compute())
    assert a.compute().item() == pytest.approx(2 / 3)


def test_bracket_programs_with_quoted_names_and_empty_arguments():
    funql, scan_sp = get_formalism("funql"), get_formalism("scan_sp")
    gold = "answer ( population_1 ( cityid ( 'des moines', _ ) ) )"
    assert funql.parse(gold) == ("answer", ("population_1", ("cityid", "'des moines'", "_")))
    assert exact_match_flags([gold, gold.replace("moines", "plaines")], [gold, gold], funql) == [True, False]
    assert scan_sp.parse("i_after ( i_run ( i_right ) , i_jump ( ) )") == (
        "i_after", ("i_run", "i_right"), ("i_jump",))
    with pytest.raises(FormalismError, match="unbalanced quote"):
        funql.parse("answer ( stateid ( 'rhode island ) )")
