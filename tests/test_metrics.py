"""Metric values on hand-computed cases, including unparsable predictions and the CFQ canonical form."""
import pytest
import torch

from zoo.formalisms import Formalism, FormalismError, get_formalism
from zoo.metrics import DenotationAccuracy, ExactMatch, ExampleScore, Scorer, exact_match_flags
from zoo.types import Example

SPARQL = get_formalism("cfq_sparql")
GOLD = "SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . ?x0 film.actor.film/ns:film.performance.film M1 }"


def test_cfq_canonical_sorts_and_deduplicates_conjuncts():
    shuffled = ("SELECT DISTINCT ?x0 WHERE { ?x0 film.actor.film/ns:film.performance.film M1 . "
                "?x0 a people.person . ?x0 a people.person }")
    assert SPARQL.canonical(shuffled) == SPARQL.canonical(GOLD)
    assert SPARQL.canonical(GOLD) == ("SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . "
                                      "?x0 film.actor.film/ns:film.performance.film M1 }")
    count = "SELECT count ( * ) WHERE { FILTER ( M0 != M1 ) . M0 people.person.spouse_s M1 }"
    assert tuple(map(str, SPARQL.parse(count).conjuncts)) == ("FILTER ( M0 != M1 )", "M0 people.person.spouse_s M1")
    with pytest.raises(FormalismError):
        SPARQL.parse("SELECT DISTINCT ?x0 WHERE { ?x0 a }")


def test_exact_match_hand_computed():
    scan = get_formalism("scan")
    preds = ["I_JUMP  I_WALK", "I_JUMP", "I_RUN I_RUN", "I_LOOK"]
    golds = ["I_JUMP I_WALK", "I_JUMP I_JUMP", "I_RUN I_RUN", "I_WALK"]
    assert exact_match_flags(preds, golds, scan) == [True, False, True, False]
    scores = Scorer(scan).score_batch(preds, [Example("", gold, {}) for gold in golds])
    metric = ExactMatch()
    metric.update(scores[:2])
    metric.update(scores[2:])
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
    whole, a, b = ExactMatch(), ExactMatch(), ExactMatch()
    scores = [ExampleScore(True), ExampleScore(False), ExampleScore(True)]
    whole.update(scores)
    a.update(scores[:1])
    b.update(scores[1:])
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


class Sums(Formalism):
    """A toy executable language: ``+ 1 2`` denotes 3; each execution is counted to check the gold cache."""

    name = "toy_sums"
    executable = True

    def __init__(self):
        self.executions = 0

    def parse(self, program):
        tokens = program.split()
        if not tokens or tokens[0] != "+" or not all(t.isdigit() for t in tokens[1:]):
            raise FormalismError(f"toy_sums: expected '+' and digits, got {program!r}")
        return tokens

    def execute(self, program, world=None, meta=None):
        self.executions += 1
        numbers = [int(t) for t in self.parse(program)[1:]]
        if meta and meta.get("forbid") in numbers:
            raise FormalismError(f"toy_sums: {meta['forbid']} is forbidden")
        return sum(numbers)


def test_denotation_accuracy_hand_computed_with_reasons_and_cached_golds():
    sums = Sums()
    scorer = Scorer(sums)
    assert scorer.executes  # executable and needs no world
    examples = [Example("", "+ 1 2", {}), Example("", "+ 3", {}), Example("", "+ 4", {}),
                Example("", "+ 5", {"forbid": 7})]
    predictions = ["+ 2 1", "+ 3", "three", "+ 7"]
    scores = scorer.score_batch(predictions, examples)
    assert [s.exact_match for s in scores] == [False, True, False, False]
    assert [s.denotation for s in scores] == [True, True, False, False]
    assert "expected '+' and digits" in scores[2].error and "7 is forbidden" in scores[3].error
    assert scores[0].error is None
    executions = sums.executions
    scorer.score_batch(predictions, examples)  # golds come from the cache the second time
    assert sums.executions - executions == 3  # only the three parsable predictions ran again
    metric, exact = DenotationAccuracy(), ExactMatch()
    metric.update(scores)
    exact.update(scores)
    assert metric.compute().item() == pytest.approx(0.5) and exact.compute().item() == pytest.approx(0.25)


def test_a_gold_program_that_fails_scores_wrong_and_says_so():
    scores = Scorer(Sums()).score_batch(["+ 1"], [Example("", "+ 1", {"forbid": 1})])
    assert scores[0].exact_match and scores[0].denotation is False
    assert scores[0].error.startswith("gold program failed")


def test_formalisms_without_a_world_report_no_denotation():
    sql = get_formalism("sql")
    scores = Scorer(sql, world=None).score_batch(["SELECT 1"], [Example("", "SELECT 1", {})])
    assert scores[0].denotation is None
    metric = DenotationAccuracy()
    metric.update(scores)
    assert metric.total.item() == 0


def test_cfq_emr_is_the_ggd_authors_relation_match_hand_computed():
    """emr (Gai et al.'s reference implementation) sees relations between entities and variables only: a query that
    differs in a type, a filter, a forward gender or nationality, or the query type matches under emr and not under
    exact match; a missing relation misses both; an unparsable prediction is wrong under both."""
    from zoo.metrics import EdgeMatchRate

    question = "Did M0 direct a male film editor"
    gold = ("SELECT count ( * ) WHERE { ?x0 a film.editor . ?x0 people.person.gender m_05zppz . "
            "M0 film.director.film ?x0 . FILTER ( M0 != ?x0 ) }")
    predictions = [
        gold,
        gold.replace("?x0 a film.editor . ", ""),  # a type left out
        gold.replace(" . FILTER ( M0 != ?x0 )", ""),  # a filter left out
        gold.replace("?x0 people.person.gender m_05zppz", "?x0 people.person.gender m_02zsn"),  # the other gender
        gold.replace("SELECT count ( * )", "SELECT DISTINCT ?x0"),  # the query type
        gold.replace("film.director.film", "film.producer.film"),  # a relation: wrong under both
        "SELECT count ( * ) WHERE { M0 film.director.film",  # unparsable
    ]
    scores = Scorer(get_formalism("cfq_sparql")).score_batch(predictions, [Example(question, gold, {})] * 7)
    assert [s.exact_match for s in scores] == [True, False, False, False, False, False, False]
    assert [s.emr for s in scores] == [True, True, True, True, True, False, False]
    assert scores[0].fields() == {"correct": True, "emr_correct": True}
    metric = EdgeMatchRate()
    metric.update(scores)
    assert metric.compute().item() == pytest.approx(5 / 7)
    assert Scorer(get_formalism("funql")).score("answer(state(all))", Example("q", "answer(state(all))", {})).emr \
        is None  # only CFQ has the view


def test_cfq_emr_merges_coordinated_entities_into_one_node():
    from zoo.formalisms.sparql import coordinated_entities

    assert coordinated_entities("Did M1 , M2 , and M3 marry M0 and M4 or M5") == {
        "M1": "M1", "M2": "M1", "M3": "M1", "M0": "M0", "M4": "M0"}
    question = "Was M0 edited by M1 and M2"
    gold = "SELECT count ( * ) WHERE { M0 film.film.edited_by M1 . M0 film.film.edited_by M2 }"
    half = "SELECT count ( * ) WHERE { M0 film.film.edited_by M1 }"  # one of the group: the group's relation holds
    [score] = Scorer(get_formalism("cfq_sparql")).score_batch([half], [Example(question, gold, {})])
    assert score.emr and not score.exact_match
