"""models/span_programs.py: program(T) by type-driven composition, checked on hand-made trees, on the authors' gold
span trees of GeoQuery, and through the constrained CKY of hard-EM."""
import json

import pytest
import torch

from models import cky
from models.cky import JOIN, PHI, SpanNode
from models.span_programs import Partial, gold_span_tree, labeled_spans, span_language
from zoo.formalisms import get_formalism

from conftest import DATA_ROOT, needs_mirror

funql, scan_sp = span_language("funql"), span_language("scan_sp")


def test_funql_composition_by_types():
    state, next_to_2, texas = funql.leaf("state"), funql.leaf("next_to_2"), funql.leaf("stateid ( 'texas' )")
    assert texas == ("stateid", "'texas'")
    borders_texas = funql.compose(next_to_2, texas)
    assert borders_texas == ("next_to_2", ("stateid", "'texas'"))
    assert funql.program(funql.compose(state, borders_texas)) == \
        "answer ( state ( next_to_2 ( stateid ( 'texas' ) ) ) )"
    assert funql.compose(borders_texas, state) == ("state", borders_texas)  # the function may come second
    assert funql.program(state) == "answer ( state ( all ) )"  # a kind alone ranges over all
    assert funql.compose(funql.leaf("capital_1"), funql.leaf("riverid ( 'mississippi' )")) is None  # of a state only
    assert funql.program(next_to_2) is None  # a predicate missing its argument is no program
    # exclude ( A , B ): the bare kind is A wherever it stands
    without = funql.compose(funql.leaf("exclude"), state)
    assert without == Partial("exclude", (("state", "all"), None))
    assert funql.program(funql.compose(("next_to_2", ("state", "all")), without)) == \
        "answer ( exclude ( state ( all ) , next_to_2 ( state ( all ) ) ) )"


def test_scan_sp_composition_by_types_and_sides():
    leaf = scan_sp.leaf
    walk_left = scan_sp.compose(leaf("i_walk"), leaf("i_left"))
    walk_around_left = scan_sp.compose(scan_sp.compose(leaf("i_walk"), leaf("i_around")), leaf("i_left"))
    assert scan_sp.program(walk_around_left) == "i_walk ( i_left , i_around )"  # slots by type, not by order
    assert scan_sp.program(leaf("i_walk")) == "i_walk ( )"
    assert scan_sp.program(leaf("i_turn")) is None  # "turn" needs a direction
    assert scan_sp.program(leaf("i_left")) is None  # a direction is no command
    # an argument left of the function fills its first open slot, one to its right the last
    walk_and = scan_sp.compose(walk_left, leaf("i_and"))
    assert scan_sp.program(scan_sp.compose(walk_and, leaf("i_jump"))) == "i_and ( i_walk ( i_left ) , i_jump ( ) )"
    after_jump = scan_sp.compose(leaf("i_after"), leaf("i_jump"))
    assert scan_sp.program(scan_sp.compose(walk_left, after_jump)) == "i_after ( i_walk ( i_left ) , i_jump ( ) )"


def test_tree_item_skips_phi_and_composes_ternary_outer_first():
    labels = ["largest_one", "state", "population_1"]
    # "state the most populous": the superlative stands between the kind and the attribute it ranks by
    tree = SpanNode(0, 4, JOIN, (SpanNode(0, 1, 1), SpanNode(1, 3, JOIN, (SpanNode(1, 2, PHI), SpanNode(2, 3, 0))),
                                 SpanNode(3, 4, 2)))
    # outer first: population_1 ( state ( all ) ), then largest_one takes it from the middle
    assert funql.program(funql.tree_item(tree, labels)) == \
        "answer ( largest_one ( population_1 ( state ( all ) ) ) )"
    binary = SpanNode(0, 4, JOIN, (SpanNode(0, 3, JOIN, tree.children[:2]), tree.children[2]))
    assert funql.tree_item(binary, labels) is None  # state with largest_one composes into nothing


def test_a_formalism_without_span_types_is_refused():
    with pytest.raises(ValueError, match="no type system for span trees"):
        span_language("cfq_sparql")


@needs_mirror
def test_program_of_the_authors_gold_trees_is_the_gold_program():
    formalism = get_formalism("funql")
    right = complete = 0
    for line in open(DATA_ROOT / "geoquery_funql" / "funql" / "train_spans.json"):
        record = json.loads(line)
        labels = sorted(funql.categories(record["program"]))
        tree = gold_span_tree(len(record["question"].split()), record["program"], record["gold_spans"], funql, labels)
        if tree is None:
            continue
        complete += 1
        item = funql.tree_item(tree, labels)
        right += funql.program(item) == formalism.canonical(record["program"])
    assert complete >= 490  # 513 trees; the rest are over word pieces or incomplete
    assert right == complete


def recovered(language, record, k, ternary, seed):
    question, program = record["question"].split(), record["program"]
    labels = sorted(language.categories(program))
    composition = language.composition_table(program, labels)
    generator = torch.Generator().manual_seed(seed)
    n = len(question)
    chart = cky.parse(torch.randn(n + 1, n + 1, len(labels), generator=generator),
                      torch.randn(n + 1, n + 1, generator=generator), k=k, ternary=ternary, composition=composition)
    best = next(chart.trees(), None)
    return best is not None and language.program(language.tree_item(best[1], labels)) == \
        get_formalism(language.formalism).canonical(program)


@needs_mirror
@pytest.mark.parametrize("language,path,k,ternary", [
    (funql, "geoquery_funql/funql/train.json", 5, True),
    (scan_sp, "scan_sp/dsl/train_simple.json", 24, False),
])
def test_constrained_cky_recovers_the_gold_program(language, path, k, ternary):
    # random span scores: only the constraint of hard-EM steers the search to the gold program
    with open(DATA_ROOT / path) as f:
        records = [json.loads(next(f)) for _ in range(40)]
    assert all(recovered(language, record, k, ternary, seed) for seed, record in enumerate(records))


def test_the_non_projective_example_of_figure_3_needs_the_ternary_rule():
    # "state with the most people": population_1 composes with the state two words away, around "most"
    program = "answer ( largest_one ( population_1 ( state ( all ) ) ) )"
    labels = sorted(funql.categories(program))
    composition = funql.composition_table(program, labels)
    words = "state with the most people".split()
    n = len(words)
    constant_scores = torch.full((n + 1, n + 1, len(labels)), float("-inf"))  # each constant on its word only
    for word, label in (("state", "state"), ("most", "largest_one"), ("people", "population_1")):
        constant_scores[words.index(word), words.index(word) + 1, labels.index(label)] = 1.0
    join_scores = torch.randn(n + 1, n + 1, generator=torch.Generator().manual_seed(0))
    programs = {}
    for ternary in (False, True):
        chart = cky.parse(constant_scores, join_scores, k=len(composition.table), ternary=ternary,
                          composition=composition)
        programs[ternary] = [funql.program(funql.tree_item(tree, labels)) for _, tree, _ in chart.trees()]
    assert programs[False] == []
    assert programs[True] and set(programs[True]) == {program}


def test_gold_span_tree_reads_the_authors_annotation_and_gives_its_labeled_spans():
    program = "answer ( population_1 ( stateid ( 'minnesota' ) ) )"  # "what is the population of minnesota ?"
    spans = [{"span": [0, 6], "type": "span"}, {"span": [3, 6], "type": "span"},
             {"span": [3, 3], "type": "population_1"}, {"span": [5, 5], "type": "stateid#'minnesota'"},
             {"span": [3, 4], "type": "span"}, {"span": [5, 6], "type": "span"}]
    labels = ["population_1", "stateid ( 'minnesota' )"]
    tree = gold_span_tree(7, program, spans, funql, labels)
    assert funql.program(funql.tree_item(tree, labels)) == program
    # φ: "what is the" before the meaning, "of" after population_1, "?" after the state
    assert [(node.start, node.end) for node in tree.nodes() if node.label == PHI] == [(0, 3), (4, 5), (6, 7)]
    assert labeled_spans(tree, labels) == {(0, 6, "join"), (3, 6, "join"), (3, 4, "join"), (3, 3, "population_1"),
                                           (5, 6, "join"), (5, 5, "stateid ( 'minnesota' )")}
    assert gold_span_tree(8, program, spans, funql, labels) is None  # not rooted at the whole utterance
    assert gold_span_tree(7, program, spans, funql, ["population_1"]) is None  # a constant outside Σ
    assert gold_span_tree(7, program, spans[:1], funql, labels) is None  # a join without children
