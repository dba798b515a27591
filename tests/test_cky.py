"""models/cky.py against brute-force enumeration of every span tree of the grammar on random score tables."""
import itertools
from functools import lru_cache

import numpy as np
import pytest
import torch

from models import cky
from models.cky import JOIN, PHI, SpanNode


def random_scores(n, constants, seed):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(n + 1, n + 1, constants, generator=generator),
            torch.randn(n + 1, n + 1, generator=generator))


def tree_score(tree, constant_scores, join_scores):
    total = 0.0
    for node in tree.nodes():
        if node.label == JOIN:
            total += float(join_scores[node.start, node.end])
        elif node.label != PHI:
            total += float(constant_scores[node.start, node.end, node.label])
    return total


def enumerate_trees(n, n_constants, ternary):
    """Every tree of the grammar in models/cky.py's docstring: (J trees of every span, S trees of the utterance)."""

    @lru_cache(maxsize=None)
    def j_trees(i, j):
        trees = [SpanNode(i, j, c) for c in range(n_constants)]
        for s in range(i + 1, j):
            trees += [SpanNode(i, j, JOIN, (SpanNode(i, s, c), SpanNode(s, j, PHI))) for c in range(n_constants)]
            trees += [SpanNode(i, j, JOIN, (left, right)) for left in j_trees(i, s) for right in j_trees(s, j)]
        if ternary:
            for s1, s2 in itertools.combinations(range(i + 1, j), 2):
                trees += [SpanNode(i, j, JOIN, children) for children in
                          itertools.product(j_trees(i, s1), j_trees(s1, s2), j_trees(s2, j))]
        return tuple(trees)

    root = list(j_trees(0, n))
    for s in range(1, n):
        root += [SpanNode(0, n, JOIN, (SpanNode(0, s, PHI), tree)) for tree in j_trees(s, n)]
    return j_trees, root


@pytest.mark.parametrize("n,ternary", [(1, False), (3, False), (5, False), (6, False), (3, True), (5, True)])
@pytest.mark.parametrize("seed", [0, 1])
def test_k_best_equals_brute_force(n, ternary, seed):
    k, n_constants = 4, 2
    constant_scores, join_scores = random_scores(n, n_constants, seed)
    chart = cky.parse(constant_scores, join_scores, k=k, ternary=ternary)
    j_trees, root = enumerate_trees(n, n_constants, ternary)
    assert len(set(root)) == len(root)  # the grammar derives each tree once
    for i, j in itertools.combinations(range(n + 1), 2):
        expected = sorted((tree_score(t, constant_scores, join_scores) for t in j_trees(i, j)), reverse=True)[:k]
        assert chart.scores[i, j, :len(expected)].tolist() == pytest.approx(expected, abs=1e-5)
    found = list(itertools.islice(chart.trees(), k))
    expected = sorted(root, key=lambda t: -tree_score(t, constant_scores, join_scores))[:k]
    assert [score for score, _, _ in found] == pytest.approx(
        [tree_score(t, constant_scores, join_scores) for t in expected], abs=1e-5)
    for score, tree, _ in found:  # each tree is what its score says, in descending order
        assert tree_score(tree, constant_scores, join_scores) == pytest.approx(score, abs=1e-5)
    assert found[0][1] == expected[0]


@pytest.mark.parametrize("ternary", [False, True])
def test_a_k_as_large_as_every_subtree_list_enumerates_every_tree(ternary):
    # n = 4: a proper sub-span has at most 46 trees, so with k = 46 the root sees all 272 (408 with ternary) trees
    n, n_constants = 4, 2
    constant_scores, join_scores = random_scores(n, n_constants, seed=3)
    _, root = enumerate_trees(n, n_constants, ternary)
    found = {tree for _, tree, _ in cky.parse(constant_scores, join_scores, k=46, ternary=ternary).trees()}
    assert found == set(root)


def test_ternary_trees_appear_only_with_the_ternary_rule():
    # scores that favour three one-word constants joined at the root: only J := J J J builds that in one node
    n = 3
    constant_scores = torch.full((n + 1, n + 1, 3), -5.0)
    for c in range(3):
        constant_scores[c, c + 1, c] = 5.0
    join_scores = torch.full((n + 1, n + 1), -5.0)
    join_scores[0, 3] = 1.0
    best_ternary = next(cky.parse(constant_scores, join_scores, k=3, ternary=True).trees())[1]
    assert [len(node.children) for node in best_ternary.nodes()] == [3, 0, 0, 0]
    best_binary = next(cky.parse(constant_scores, join_scores, k=3, ternary=False).trees())[1]
    assert all(len(node.children) in (0, 2) for node in best_binary.nodes())


def test_composition_keeps_only_sub_programs_of_the_gold():
    # Σ = {f, a, b}; gold f(a): ids 0 = f, 1 = a, 2 = f(a); b is not in the gold; f composes with a only
    composition = cky.Composition(constant=torch.tensor([0, 1, cky.NONE]),
                                  table=torch.tensor([[-1, 2, -1], [2, -1, -1], [-1, -1, -1]]), gold=2)
    n = 2
    constant_scores = torch.zeros(n + 1, n + 1, 3)
    constant_scores[0, 1] = torch.tensor([1.0, 0.0, 9.0])  # b would win word 0 without the gold
    constant_scores[1, 2] = torch.tensor([0.0, 1.0, 9.0])
    constant_scores[0, 2] = torch.tensor([50.0, 0.0, 0.0])  # f over both words: the best root, but not the gold
    join_scores = torch.zeros(n + 1, n + 1)
    trees = list(cky.parse(constant_scores, join_scores, k=3, composition=composition).trees())
    assert trees and all(program == 2 for _, _, program in trees)
    best = trees[0][1]
    assert [(node.start, node.end, node.label) for node in best.nodes()] == [(0, 2, JOIN), (0, 1, 0), (1, 2, 1)]
    unconstrained = next(cky.parse(constant_scores, join_scores, k=3).trees())[1]
    assert [(node.start, node.end, node.label) for node in unconstrained.nodes()] == [(0, 2, 0)]


def allowed(tree, constant_scores, join_scores, barred=None, prune_ternary=False, meaningful=None):
    """Whether the constraints let a tree be: no constant on a barred span, no ternary node scoring < 0, no φ over a
    meaningful span."""
    for node in tree.nodes():
        if barred is not None and node.label >= 0 and barred[node.start, node.end]:
            return False
        if meaningful is not None and node.label == PHI and meaningful[node.start, node.end]:
            return False
        if prune_ternary and len(node.children) == 3 and tree_score(node, constant_scores, join_scores) < 0:
            return False
    return True


def test_spans_holding_a_position():
    barred = cky.spans_holding([1], 3)
    assert {(i, j) for i, j in itertools.combinations(range(4), 2) if barred[i, j]} == {(0, 2), (0, 3), (1, 2), (1, 3)}
    assert cky.spans_holding([], 3) is None


@pytest.mark.parametrize("positions,prune_ternary", [([1], False), ([0, 3], False), ([], True), ([2], True)])
@pytest.mark.parametrize("seed", [0, 1])
def test_function_words_and_ternary_pruning_equal_brute_force(positions, prune_ternary, seed):
    n, k, n_constants = 5, 4, 2
    constant_scores, join_scores = random_scores(n, n_constants, seed)
    constant_scores, join_scores = constant_scores + 0.5, join_scores + 0.5  # ternary nodes score both ways
    barred = cky.spans_holding(positions, n)
    chart = cky.parse(constant_scores, join_scores, k=k, ternary=True, barred=barred, prune_ternary=prune_ternary)
    j_trees, root = enumerate_trees(n, n_constants, ternary=True)

    def kept(trees):
        return sorted((tree_score(t, constant_scores, join_scores) for t in trees
                       if allowed(t, constant_scores, join_scores, barred, prune_ternary)), reverse=True)[:k]

    for i, j in itertools.combinations(range(n + 1), 2):
        expected = kept(j_trees(i, j))
        assert chart.scores[i, j, :len(expected)].tolist() == pytest.approx(expected, abs=1e-5)
        assert not np.isfinite(chart.scores[i, j, len(expected):]).any()
    found = list(itertools.islice(chart.trees(), k))
    assert [score for score, _, _ in found] == pytest.approx(kept(root), abs=1e-5)
    for _, tree, _ in found:
        assert allowed(tree, constant_scores, join_scores, barred, prune_ternary)
    if positions:  # the constraint binds: some tree of the unconstrained chart is not allowed
        assert any(not allowed(t, constant_scores, join_scores, barred) for _, t, _ in
                   itertools.islice(cky.parse(constant_scores, join_scores, k=k, ternary=True).trees(), 50))


def test_ternary_pruning_inside_the_utterance_equals_brute_force():
    # scores low enough that ternary derivations below 0 would make the K best of spans inside the utterance, where
    # the chart takes only the child ranks that can make them (models/cky.py): pruning must not change which
    n, k, n_constants = 5, 4, 2
    constant_scores, join_scores = random_scores(n, n_constants, seed=3)
    constant_scores, join_scores = constant_scores - 1.0, join_scores - 1.0
    chart = cky.parse(constant_scores, join_scores, k=k, ternary=True, prune_ternary=True)
    unpruned = cky.parse(constant_scores, join_scores, k=k, ternary=True)
    j_trees, _ = enumerate_trees(n, n_constants, ternary=True)
    bound = 0
    for i, j in itertools.combinations(range(n + 1), 2):
        expected = sorted((tree_score(t, constant_scores, join_scores) for t in j_trees(i, j)
                           if allowed(t, constant_scores, join_scores, prune_ternary=True)), reverse=True)[:k]
        assert chart.scores[i, j, :len(expected)].tolist() == pytest.approx(expected, abs=1e-5)
        assert not np.isfinite(chart.scores[i, j, len(expected):]).any()
        bound += j - i < n and chart.scores[i, j].tolist() != unpruned.scores[i, j].tolist()
    assert bound  # pruning changes some span's K best inside the utterance


@pytest.mark.parametrize("ternary", [False, True])
@pytest.mark.parametrize("seed", [5, 6, 7])
def test_distinct_scores_keep_the_k_best_different_scores(ternary, seed):
    # integer scores tie often; each span keeps one derivation per score: the K best distinct scores of its trees
    n, k, n_constants = 5, 3, 2
    generator = torch.Generator().manual_seed(seed)
    constant_scores = torch.randint(-2, 3, (n + 1, n + 1, n_constants), generator=generator).float()
    join_scores = torch.randint(-2, 3, (n + 1, n + 1), generator=generator).float()
    chart = cky.parse(constant_scores, join_scores, k=k, ternary=ternary, distinct_scores=True)
    j_trees, root = enumerate_trees(n, n_constants, ternary)
    ties = 0
    for i, j in itertools.combinations(range(n + 1), 2):
        scores = [tree_score(t, constant_scores, join_scores) for t in j_trees(i, j)]
        expected = sorted(set(scores), reverse=True)[:k]
        ties += len(sorted(scores, reverse=True)[:k]) > len(set(sorted(scores, reverse=True)[:k]))
        assert chart.scores[i, j, :len(expected)].tolist() == expected
    assert ties  # the table does tie
    root_scores = [score for score, _, _ in chart.trees()]
    assert len(root_scores) == len(set(root_scores))
    assert root_scores[:k] == sorted({tree_score(t, constant_scores, join_scores) for t in root}, reverse=True)[:k]


def test_distinct_scores_see_past_tied_outer_pairs_of_a_ternary_node():
    # the outer children score {2, 1} each, so two outer pairs tie at 3; the middle word scores {10, 0, -10}. The
    # three best distinct ternary scores are 14, 13 and 12 = (1 + 1) + 10: the K best outer pairs must differ
    n, k = 3, 3
    constant_scores, join_scores = torch.full((n + 1, n + 1, 3), -100.0), torch.full((n + 1, n + 1), -100.0)
    constant_scores[0, 1] = constant_scores[2, 3] = torch.tensor([2.0, 1.0, -50.0])
    constant_scores[1, 2] = torch.tensor([10.0, 0.0, -10.0])
    join_scores[0, 3] = 0.0
    chart = cky.parse(constant_scores, join_scores, k=k, ternary=True, distinct_scores=True)
    assert chart.scores[0, 3].tolist() == [14.0, 13.0, 12.0]
    assert [score for score, _, _ in itertools.islice(chart.trees(), k)] == [14.0, 13.0, 12.0]


@pytest.mark.parametrize("positions", [[0], [2], [1, 4]])
@pytest.mark.parametrize("seed", [0, 1])
def test_no_phi_over_a_named_word_equals_brute_force(positions, seed):
    n, k, n_constants = 5, 4, 2
    constant_scores, join_scores = random_scores(n, n_constants, seed)
    meaningful = cky.spans_holding(positions, n)
    chart = cky.parse(constant_scores, join_scores, k=k, ternary=True, meaningful=meaningful)
    j_trees, root = enumerate_trees(n, n_constants, ternary=True)

    def kept(trees):
        return sorted((tree_score(t, constant_scores, join_scores) for t in trees
                       if allowed(t, constant_scores, join_scores, meaningful=meaningful)), reverse=True)[:k]

    for i, j in itertools.combinations(range(n + 1), 2):
        expected = kept(j_trees(i, j))
        assert chart.scores[i, j, :len(expected)].tolist() == pytest.approx(expected, abs=1e-5)
    found = list(itertools.islice(chart.trees(), k))
    assert [score for score, _, _ in found] == pytest.approx(kept(root), abs=1e-5)
    for _, tree, _ in found:
        covered = {w for node in tree.nodes() if node.label >= 0 for w in range(node.start, node.end)}
        assert set(positions) <= covered  # every named word stands under a constant


@pytest.mark.parametrize("ternary,prune_ternary", [(False, False), (True, False), (True, True)])
def test_a_short_utterances_gathered_sums_make_the_chart_of_the_rule_blocks(monkeypatch, ternary, prune_ternary):
    # up to CACHED_LENGTH words the sparse lengths' candidates are sums of gathered terms (_sums), past it they are
    # built rule by rule: the two must be the same candidates, in the same order, with the same scores
    n, k = 8, 5
    constant_scores, join_scores = random_scores(n, 6, seed=4)
    constant_scores, join_scores = constant_scores - 1.0, join_scores - 1.0  # pruning binds inside the utterance
    barred, meaningful = cky.spans_holding([5], n), cky.spans_holding([2], n)
    charts = []
    for cached in (n, 0):
        monkeypatch.setattr(cky, "CACHED_LENGTH", cached)
        charts.append(cky.parse(constant_scores, join_scores, k=k, ternary=ternary, barred=barred,
                                meaningful=meaningful, prune_ternary=prune_ternary))
    sums, blocks = charts
    assert np.isfinite(sums.scores[0, n]).all() and np.isneginf(sums.scores).any()
    assert np.array_equal(sums.scores, blocks.scores) and np.array_equal(sums.choice, blocks.choice)
    assert list(itertools.islice(sums.trees(), 50)) == list(itertools.islice(blocks.trees(), 50))
