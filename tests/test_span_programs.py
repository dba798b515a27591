"""models/span_programs.py: program(T) by type-driven composition, checked on hand-made trees, on the authors' gold
span trees of GeoQuery, and through the constrained CKY of hard-EM."""
import json

import pytest
import torch

from models import cky
from models.cky import JOIN, PHI, SpanNode
from models.span_programs import Partial, span_language
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


def word_span_tree(question, program, spans, language):
    """The authors' gold span tree (inclusive ends, "span" = join, gaps = φ) as a SpanNode over words, with its
    labels; None when it is over word pieces or leaves a join without children (incomplete in the data)."""
    constants = {f"{head}#{args[0]}": label for label in language.categories(program)
                 if "(" in label for head, *args in [language.leaf(label)]}
    items = sorted(((s["span"][0], s["span"][1] + 1, s["type"]) for s in spans), key=lambda t: (t[0], -t[1]))
    if items[0][:2] != (0, len(question.split())):
        return None, None
    labels = []

    def build(start, end, label, inner):
        children, position, index = [], start, 0
        while index < len(inner):
            a, b, child_label = inner[index]
            nested = [t for t in inner[index + 1:] if a <= t[0] and t[1] <= b]
            if position < a:
                children.append(SpanNode(position, a, PHI))
            children.append(build(a, b, child_label, nested))
            position, index = b, index + 1 + len(nested)
        if children and position < end:
            children.append(SpanNode(position, end, PHI))
        if label == "span":
            complete = children and all(child is not None for child in children)
            return SpanNode(start, end, JOIN, tuple(children)) if complete else None
        label = constants.get(label, label)
        labels.append(label) if label not in labels else None
        return SpanNode(start, end, labels.index(label))

    tree = build(*items[0], items[1:])
    return (tree, labels) if tree is not None else (None, None)


@needs_mirror
def test_program_of_the_authors_gold_trees_is_the_gold_program():
    formalism = get_formalism("funql")
    right = complete = 0
    for line in open(DATA_ROOT / "geoquery_funql" / "funql" / "train_spans.json"):
        record = json.loads(line)
        tree, labels = word_span_tree(record["question"], record["program"], record["gold_spans"], funql)
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
