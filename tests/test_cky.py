"""models/cky.py against brute-force enumeration of every span tree of the grammar on random score tables."""
import itertools
from functools import lru_cache

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
