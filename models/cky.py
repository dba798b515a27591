"""K-best CKY over span scores, for the span-based semantic parser (Herzig & Berant 2021, §3.2 and §3.4).

A span tree labels spans of the utterance (half-open ``(i, j)``) with a category: a domain constant of Σ, ``join``
(a node whose meaning composes its children's) or φ (no meaning). Its score is the sum of the shifted span scores
``s'(x_ij, c) = s(x_ij, c) - s(x_ij, φ)`` of its nodes (§3.2), so φ spans, and spans that are no node at all, add 0.

Grammar (Figure 2, with the φ attachment of the authors' implementation), over non-terminals T (a constant), J
(``join`` in the paper: any node with a meaning) and S (the root):

  J(i,j) := T(i,j)                              a constant over the span; several words may name one constant
          | T(i,s) φ(s,j)                       φ words combine with the constant on their left (§3.2 (b))
          | J(i,s) J(s,j)                       composition: function application, decided by types
          | J(i,s1) J(s1,s2) J(s2,j)           the non-projective rule join := join join join (§3.4, ``ternary``)
  S(0,n) := J(0,n) | φ(0,s) J(s,n)              at the root φ words combine with what is on their right (§3.2 (c))

Every node built from children is a ``join`` node and scores ``s'(x_ij, join)``. The paper writes the middle two
rules as ``join := join φ``; the authors' code lets only a constant take the φ words after it, which gives each
utterance one tree per meaning structure instead of one per attachment of every φ word, and so keeps the latent
trees of hard-EM (§3.3) consistent. A one-constant utterance ("walk") is a tree of its own (S := J).

Inference keeps the K best derivations of J for every span (Algorithm 1 keeps them per span and non-terminal). One
span length at a time, all start positions together, the candidates of every rule, split point and child pair (or
triple) are one array, and a top-k merges them; the only Python loop is over span lengths. The root keeps every
candidate built from its children's K best, in descending order, so the caller can return the best tree whose
program is valid (``Chart.trees``); K-best is exact for the K best trees, since a tree's score adds its children's.

The children's K best come sorted, so the K best of a span need only the child combinations whose ranks ``(a, b)``
have ``(a+1)(b+1) <= K``, and for the ternary rule ``(a+1)(b+1)(c+1) <= K``: any other combination scores no higher
than each of the ``(a+1)(b+1) - 1 >= K`` others whose ranks are at most its own. For K = 5 that is 10 of the 25 child
pairs of a split and 16 of the 125 triples of a split pair, with no sort inside the ternary rule (``_ranks``). It
holds while a span's list is its plain K best: keeping the best derivation of each sub-program (hard-EM) or of each
score (``distinct_scores``) breaks it, and those take every pair and, for the ternary rule, the K best outer pairs
times the K middles; so does the whole utterance's span, whose candidates are the root's.

The chart is numpy arrays and the arithmetic numpy: a short utterance's chart is a few small array operations per
span length, where the fixed cost of each operation dominates, and numpy's is a few times below torch's (torch does
only the top-k's, where its kernel is the faster one). Up to ``CACHED_LENGTH`` words, the candidates of a length are
built in one gather of their terms from a single array of every score (``_sums``, indices kept between calls) and
three additions, instead of some thirty operations rule by rule (``_Candidates``). A chart entry keeps the index of
its candidate among its span's, read back into a back pointer only when a tree is built (``_Plan.read``).

Hard-EM (§3.3) prunes the chart with the gold program: constants outside it are -inf, and two nodes compose only if
their sub-programs compose within the gold program. That second test is a lookup table over the gold program's
sub-programs (``Composition``), so it too is an array gather.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np
import torch

JOIN, PHI = -1, -2  # labels of join and φ nodes in a SpanNode (constants are their index in Σ)
NONE = -1  # "no sub-program" in a Composition id
# Derivation rules, the first column of a back pointer (rule, split1, split2, left k, middle k, right k)
TERM, ABSORB, BINARY, TERNARY, LEADING_PHI = range(5)
NEG_INF = np.float32("-inf")
BackPointer = tuple[int, int, int, int, int, int]


@dataclass(frozen=True)
class SpanNode:
    """A node of a span tree: the half-open span it covers, its label and its children, left to right."""

    start: int
    end: int
    label: int  # a constant's index in Σ, JOIN or PHI
    children: tuple["SpanNode", ...] = ()

    def nodes(self) -> Iterator["SpanNode"]:
        yield self
        for child in self.children:
            yield from child.nodes()


@dataclass(frozen=True)
class Composition:
    """Which sub-programs compose, for hard-EM: ids 0..P-1 name the sub-programs of one gold program.

    ``constant[c]`` is the id of constant c as a sub-program (NONE if c is not in the gold program) and
    ``table[a, b]`` the id of composing a with b (in either function-argument order, as the type system decides),
    NONE when they do not compose into a sub-program of the gold. A root is right only if its id is ``gold``.
    """

    constant: torch.Tensor  # [Σ] long
    table: torch.Tensor  # [P, P] long
    gold: int


class Chart:
    """The K-best chart of one utterance, numpy arrays over half-open spans ``(i, j)``: ``scores[i, j, k]`` of J
    (sorted, -inf past a span's derivations), ``programs`` (their Composition ids, hard-EM only), ``constants`` (T's
    k-th best constant of a span), and the root's candidates (``trees``, ``meanings``).

    A chart entry's derivation is stored as the index of its candidate among its span's (``choice``); ``_Plan.read``
    turns it into a back pointer (rule, split1, split2, left k, middle k, right k) when a tree asks for it, so parsing
    gathers one index per entry instead of six columns, and a search reads only the entries its trees visit."""

    def __init__(self, n: int, k: int, scores: np.ndarray):
        self.n, self.k = n, k
        self.scores = scores  # [n+1, n+1, K], a view of the parse's _Values (-inf until filled)
        self.choice = np.zeros((n + 1, n + 1, k), dtype=np.int64)  # candidate index, read by plans[length]
        self.programs = np.full((n + 1, n + 1, k), NONE, dtype=np.int64)  # Composition ids (hard-EM only)
        self.constants = np.zeros((n + 1, n + 1, k), dtype=np.int64)  # T: the k-th best constant of a span
        self.plans: dict[int, _Plan] = {}  # per span length: the layout of its candidates
        self.outer: dict[int, np.ndarray] = {}  # per span length: a ternary candidate's outer pairs [N, P, K]
        self.root_plan: _Plan | None = None
        self.root_candidates = np.zeros(0, dtype=np.float32)  # every root candidate's score, in candidate order
        self.root_candidate_programs = np.zeros(0, dtype=np.int64)

    def back_pointer(self, start: int, end: int, k: int) -> BackPointer:
        """The back pointer of the k-th entry of span ``(start, end)``."""
        length = end - start
        return self.plans[length].read(int(self.choice[start, end, k]), start, self.outer.get(length))

    def root_back_pointer(self, index: int) -> BackPointer:
        """The back pointer of root candidate ``index`` (in candidate order, as ``_ranked_roots`` gives them)."""
        return self.root_plan.read(index, 0, self.outer.get(self.n))

    def tree(self, back: Sequence[int], start: int, end: int) -> SpanNode:
        """The span tree of a back pointer (``back_pointer``, or one ``meanings`` gives) over ``(start, end)``."""
        rule, s1, s2, kl, km, kr = (int(value) for value in back)
        if rule == TERM:
            return SpanNode(start, end, int(self.constants[start, end, kl]))
        if rule == ABSORB:
            return SpanNode(start, end, JOIN, (SpanNode(start, s1, int(self.constants[start, s1, kl])),
                                               SpanNode(s1, end, PHI)))
        if rule == LEADING_PHI:
            return SpanNode(start, end, JOIN, (SpanNode(start, s1, PHI), self.node(s1, end, kr)))
        if rule == BINARY:
            return SpanNode(start, end, JOIN, (self.node(start, s1, kl), self.node(s1, end, kr)))
        return SpanNode(start, end, JOIN, (self.node(start, s1, kl), self.node(s1, s2, km), self.node(s2, end, kr)))

    def node(self, start: int, end: int, k: int) -> SpanNode:
        return self.tree(self.back_pointer(start, end, k), start, end)

    def _ranked_roots(self) -> Iterator[int]:
        """The indices of the finite root candidates, best first. A search mostly stops at the first few, so those
        come from a top-k, and the full sort of a long utterance's tens of thousands of candidates waits until a
        search goes past them."""
        scores = self.root_candidates
        first = torch.from_numpy(scores).topk(min(16, len(scores))).indices.tolist()
        for index in first:
            if scores[index] == NEG_INF:  # the finite ones come first
                return
            yield index
        if len(first) < len(scores):
            seen = set(first)  # all the best len(first): the rest of the sorted order, without them
            for index in np.argsort(-scores, kind="stable").tolist():
                if index not in seen:
                    if scores[index] == NEG_INF:
                        return
                    yield index

    def trees(self) -> Iterator[tuple[float, SpanNode, int]]:
        """(score, tree, Composition id) of every root candidate, best first; -inf candidates are left out."""
        for index in self._ranked_roots():
            yield (float(self.root_candidates[index]), self.tree(self.root_back_pointer(index), 0, self.n),
                   int(self.root_candidate_programs[index]))

    def meanings(self, leaf: Callable[[int], Any], compose: Callable[[Any, Any], Any | None]
                 ) -> Iterator[tuple[float, Any, BackPointer]]:
        """(score, meaning, back pointer) of every root candidate, best first, where a meaning is built bottom-up
        by ``leaf(constant)`` and ``join_meaning`` (None: no meaning). Each chart entry's meaning is computed
        once, so a root candidate costs a composition or two however deep its tree."""
        memo: dict[tuple[int, int, int], Any] = {}

        def meaning(back: BackPointer, start: int, end: int) -> Any:
            rule, s1, s2, kl, km, kr = back
            if rule in (TERM, ABSORB):
                return leaf(int(self.constants[start, s1 if rule == ABSORB else end, kl]))
            if rule == LEADING_PHI:
                return entry(s1, end, kr)
            if rule == BINARY:
                return join_meaning(compose, entry(start, s1, kl), entry(s1, end, kr))
            return join_meaning(compose, entry(start, s1, kl), entry(s2, end, kr), entry(s1, s2, km))

        def entry(start: int, end: int, k: int) -> Any:
            if (start, end, k) not in memo:
                memo[start, end, k] = meaning(self.back_pointer(start, end, k), start, end)
            return memo[start, end, k]

        for index in self._ranked_roots():
            back = self.root_back_pointer(index)
            yield float(self.root_candidates[index]), meaning(back, 0, self.n), back


def join_meaning(compose: Callable[[Any, Any], Any | None], left: Any, right: Any, *middle: Any) -> Any | None:
    """The meaning of a join node from its children's: ``compose(left, right)``, and for a ternary node (§3.4)
    that result composed with the middle child; None where a child has no meaning or they do not compose."""
    if left is None or right is None or None in middle:
        return None
    outer = compose(left, right)
    return outer if outer is None or not middle else compose(outer, middle[0])


def shift(scores: torch.Tensor, phi: int) -> torch.Tensor:
    """``s'(x_ij, c) = s(x_ij, c) - s(x_ij, φ)`` (§3.2): the same softmax, and φ spans score 0."""
    return scores - scores[..., phi:phi + 1]


def _numpy(values: torch.Tensor | np.ndarray, dtype=np.float32) -> np.ndarray:
    """A tensor or an array as a numpy array of ``dtype`` (a CPU tensor's memory is shared, not copied)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=dtype)


class _Gold(NamedTuple):
    """A Composition as numpy arrays, and the constants it allows (those in the gold program)."""

    constant: np.ndarray
    table: np.ndarray
    gold: int
    allowed: np.ndarray

    @classmethod
    def of(cls, composition: Composition) -> "_Gold":
        constant = _numpy(composition.constant, np.int64)
        return cls(constant, _numpy(composition.table, np.int64), composition.gold, np.flatnonzero(constant >= 0))


def parse(constant_scores: torch.Tensor, join_scores: torch.Tensor, k: int = 5, ternary: bool = False,
          composition: Composition | None = None, barred: np.ndarray | torch.Tensor | None = None,
          meaningful: np.ndarray | torch.Tensor | None = None, prune_ternary: bool = False,
          distinct_scores: bool = False) -> Chart:
    """K-best CKY. ``constant_scores`` [n+1, n+1, Σ] and ``join_scores`` [n+1, n+1] are shifted scores (``shift``)
    indexed by half-open spans ``(i, j)``; entries with j <= i are never read. With ``composition`` the chart keeps
    only derivations whose sub-programs compose within the gold program (hard-EM).

    Three details of the authors' implementation (jonathanherzig/span-based-sp, ``utils/cky.py``), off by default:
    ``barred`` [n+1, n+1] marks the spans no constant may sit on (there, those holding a function word such as "is"
    or "the": ``spans_holding``); ``prune_ternary`` drops ternary derivations scoring below 0 (they did so at
    inference only); ``distinct_scores`` keeps one derivation per score in each span and at the root, the first
    of the candidates in this module's order, as their chart kept a set of the scores it had seen.

    ``meaningful`` [n+1, n+1] (this zoo's, for LENGTH's too-short programs, issue 28) marks the spans no φ may cover:
    those holding a word the lexicon names a constant with, which must then stand under a constant of the tree.

    The masks may be numpy arrays or tensors; the chart is numpy (``Chart``)."""
    n = constant_scores.shape[0] - 1
    if n < 1:
        raise ValueError("an utterance needs at least one token")
    gold = None if composition is None else _Gold.of(composition)
    values = _Values(n, k)  # every score a derivation adds up in one array, the chart's among them
    chart = Chart(n, k, values.scores.reshape(n + 1, n + 1, k))
    # T's K best constants of every span i < j: one torch.topk over Σ, where torch's kernel is faster than numpy's.
    # From here on a span's arrays are rows of [(n+1)^2, ...], indexed by span id i * (n+1) + j (_Layout).
    spans, span_tensor = _spans(n)
    constant_scores = torch.as_tensor(constant_scores).detach().float().cpu()
    if gold is not None:  # hard-EM: only the gold program's constants
        constant_scores = constant_scores[..., torch.from_numpy(gold.allowed)]
    width = min(k, constant_scores.shape[-1])
    best, best_constants = constant_scores.reshape((n + 1) ** 2, -1)[span_tensor].topk(width, dim=-1)
    values.terminal[spans, :width] = best.numpy()
    best_constants = best_constants.numpy()
    chart.constants.reshape(-1, k)[spans, :width] = best_constants if gold is None else gold.allowed[best_constants]
    if barred is not None:  # no constant on these spans: every one of their constants is -inf
        values.terminal[_numpy(barred, bool).reshape(-1)] = NEG_INF
    values.join[:] = _numpy(join_scores).reshape(-1)
    if meaningful is not None:  # what a φ span adds to a derivation: 0 (the shifted scores' zero), -inf here
        values.phi[_numpy(meaningful, bool).reshape(-1)] = NEG_INF
    builder = _Candidates(chart, values, ternary, gold, prune_ternary, distinct_scores, meaningful is not None)
    chart_scores, chart_choice, chart_programs = (a.reshape(-1, k) for a in (chart.scores, chart.choice,
                                                                                chart.programs))
    for length in range(1, n + 1):
        if builder.plan(length).sparse and n <= CACHED_LENGTH:
            scores, programs = builder.sums(length), None
        else:  # the whole utterance's candidates are the root's too, less S := φ J
            candidates = builder(length, root=length == n)
            scores, programs = _merged([c for c in candidates if c.rule != LEADING_PHI])
        if gold is not None:
            scores = _best_per_program(scores, programs)
        if distinct_scores:
            scores = _first_of_each_score(scores)
        best_scores, best = _top_k(scores, min(k, scores.shape[1]))
        span, kept = _layout(n, length).span, best.shape[1]
        chart_scores[span, :kept] = best_scores
        chart_choice[span, :kept] = best
        if programs is not None:
            chart_programs[span, :kept] = np.take_along_axis(programs, best, 1)
        chart.plans[length] = builder.plan(length)
    scores, programs = _merged(candidates)
    if gold is not None:  # at the root only the gold program itself is right
        scores = np.where(programs == gold.gold, scores, NEG_INF)
    if distinct_scores:
        scores = _first_of_each_score(scores)
    chart.root_plan = builder.plan(n, root=True)
    chart.root_candidates = scores[0]
    chart.root_candidate_programs = programs[0] if programs is not None else np.full(scores.shape[1], NONE)
    return chart


def _top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each row of ``scores`` [N, X], best first: values and indices. ``torch.topk`` on the same
    memory: numpy's argpartition costs several times more on rows of thousands (a long utterance's)."""
    values, indices = torch.from_numpy(scores).topk(k, dim=-1)
    return values.numpy(), indices.numpy()


def _best_per_program(scores: np.ndarray, programs: np.ndarray) -> np.ndarray:
    """``scores`` [N, X] with every candidate but the best of its sub-program (per row) set to -inf: two
    derivations of one sub-program compose alike, so hard-EM needs only the better, and the K kept are K different
    sub-programs. Of equal scores the first candidate is the best."""
    # by program, then best first; lexsort is stable, so equal scores stay in candidate order
    order = np.lexsort((-scores, programs), axis=-1)
    grouped = np.take_along_axis(programs, order, 1)
    first = np.ones(grouped.shape, dtype=bool)  # the first of its program in the sorted row
    first[:, 1:] = grouped[:, 1:] != grouped[:, :-1]
    keep = np.empty_like(first)
    np.put_along_axis(keep, order, first, 1)
    return np.where(keep, scores, NEG_INF)


def _first_of_each_score(scores: np.ndarray) -> np.ndarray:
    """``scores`` [N, X] with every candidate whose score equals an earlier candidate's (in its row) set to -inf."""
    order = np.argsort(-scores, axis=1, kind="stable")  # equal scores stay in candidate order
    ranked = np.take_along_axis(scores, order, 1)
    repeated = np.zeros(ranked.shape, dtype=bool)
    repeated[:, 1:] = (ranked[:, 1:] == ranked[:, :-1]) & np.isfinite(ranked[:, 1:])
    mask = np.empty_like(repeated)
    np.put_along_axis(mask, order, repeated, 1)
    return np.where(mask, NEG_INF, scores)


def spans_holding(positions: list[int], n: int) -> np.ndarray | None:
    """[n+1, n+1] True for the spans ``(i, j)`` holding a word at one of ``positions``; None when there is none."""
    if not positions:
        return None
    marks = np.zeros(n + 1, dtype=np.int64)
    marks[np.asarray(positions) + 1] = 1
    before = marks.cumsum()  # before[j]: marked words among the first j
    return (before[None, :] - before[:, None]) > 0


@lru_cache(maxsize=64)
def _spans(n: int) -> tuple[np.ndarray, torch.Tensor]:
    """The ids ``i * (n+1) + j`` of every span ``i < j`` of an utterance of n words, as an array and a tensor."""
    starts, ends = np.triu_indices(n + 1, 1)
    spans = starts * (n + 1) + ends
    return spans, torch.from_numpy(spans)


class _Layout(NamedTuple):
    """The spans of ``length`` words of an utterance of n and their parts, as span ids ``i * (n+1) + j``: a chart
    array seen as [(n+1)^2, ...] gives a part's rows in one gather (indexing by start and end arrays costs about
    twice as much). The row of a span in the layout is its start i, for N spans: [N] the spans; [N, L-1] their left
    ``(i, s)`` and right ``(s, j)`` parts at every split s; [N, P] at every ternary split pair ``s1 < s2`` the outer
    left ``(i, s1)``, outer right ``(s2, j)`` and middle ``(s1, s2)`` parts, and the split points themselves."""

    span: np.ndarray
    left: np.ndarray
    right: np.ndarray
    outer_left: np.ndarray
    outer_right: np.ndarray
    middle: np.ndarray
    first: np.ndarray
    second: np.ndarray


@lru_cache(maxsize=4096)
def _layout(n: int, length: int) -> _Layout:
    i = np.arange(n - length + 1)[:, None]
    j = i + length
    splits = i + np.arange(1, length)[None, :]
    pairs = np.triu_indices(max(length - 1, 0), 1)  # 1 <= d1 < d2 <= L-1, less one
    s1, s2 = i + pairs[0][None, :] + 1, i + pairs[1][None, :] + 1
    width = n + 1
    layout = _Layout((i * width + j)[:, 0], i * width + splits, splits * width + j, i * width + s1, s2 * width + j,
                     s1 * width + s2, s1, s2)
    for array in layout:  # shared by every call: read-only
        array.flags.writeable = False
    return layout


class _Values:
    """Every score a derivation adds up, in one array: the chart's K best of J [(n+1)^2 * K] (by span id, as
    ``_Layout``), T's K best [(n+1)^2 * K], the join scores [(n+1)^2], what φ adds [(n+1)^2] (0, or -inf where no φ
    may be) and a 0, so that ``_sums`` builds a sparse length's candidates with one gather."""

    def __init__(self, n: int, k: int):
        size = (n + 1) ** 2
        self.offsets = _offsets(n, k)
        self.array = np.zeros(self.offsets.zero + 1, dtype=np.float32)
        scores, terminal, join, phi, zero = self.offsets
        self.scores, self.terminal = self.array[:terminal].reshape(size, k), self.array[terminal:join].reshape(size, k)
        self.join, self.phi = self.array[join:phi], self.array[phi:zero]
        self.scores[:] = self.terminal[:] = NEG_INF


class _Offsets(NamedTuple):
    """Where each part of a ``_Values`` array starts."""

    scores: int
    terminal: int
    join: int
    phi: int
    zero: int


def _offsets(n: int, k: int) -> _Offsets:
    size = (n + 1) ** 2
    return _Offsets(0, size * k, 2 * size * k, 2 * size * k + size, 2 * size * k + 2 * size)


# Utterances up to this long build the candidates of their sparse lengths with ``_sums``, whose indices are kept
# between calls (17 MB for every length up to 20 at K = 5): one gather and three additions per length instead of
# some thirty array operations, 1.5 times faster at 6 to 12 words and still 1.3 times at 20. Longer utterances take
# ``_Candidates``' blocks, rule by rule: building their indices at each call costs more than it saves, and keeping
# them would take memory (some 20 million indices at 50 words).
CACHED_LENGTH = 20


@lru_cache(maxsize=None)
def _sums(n: int, length: int, k: int, ternary: bool) -> np.ndarray:
    """[4, N, X] indices into a ``_Values`` array of the four terms of every candidate of a sparse ``_Plan`` over
    the spans of ``length`` words, in its order: a candidate's score is ``((a + b) + c) + d``, the same additions
    in the same order as ``_Candidates``' blocks (a missing term is the 0 at ``zero``). J := T is T's k-th best;
    J := T φ that plus join plus φ; J := J J left plus right plus join; J := J J J outer left plus outer right plus
    middle plus join."""
    layout, offsets, columns = _layout(n, length), _offsets(n, k), []
    span, ks = layout.span[:, None, None], np.arange(k)

    def rule(*terms) -> None:  # [N, parts, ranks] each, broadcast; the candidates of one rule
        terms = np.broadcast_arrays(*terms, offsets.zero, offsets.zero, offsets.zero)[:4]
        columns.append(np.stack(terms).reshape(4, len(layout.span), -1))

    rule(offsets.terminal + span * k + ks)
    if length >= 2:
        left, right, pairs = layout.left[..., None], layout.right[..., None], _ranks(k, 2)
        rule(offsets.terminal + left * k + ks, offsets.join + span, offsets.phi + right)
        rule(offsets.scores + left * k + pairs[:, 0], offsets.scores + right * k + pairs[:, 1], offsets.join + span)
    if ternary and length >= 3:
        triples = _ranks(k, 3)  # (left, middle, right)
        rule(offsets.scores + layout.outer_left[..., None] * k + triples[:, 0],
             offsets.scores + layout.outer_right[..., None] * k + triples[:, 2],
             offsets.scores + layout.middle[..., None] * k + triples[:, 1], offsets.join + span)
    sums = np.concatenate(columns, axis=2)
    sums.flags.writeable = False  # shared by every call
    return sums


@lru_cache(maxsize=None)
def _ranks(k: int, children: int) -> np.ndarray:
    """[X, children] the rank tuples ``(a, b[, c])`` with ``(a+1)(b+1)[(c+1)] <= k``, in lexicographic order: the only
    child combinations that can make a span's K best, their children's lists being sorted (module docstring)."""
    ranks = [r for r in itertools.product(range(k), repeat=children) if math.prod(rank + 1 for rank in r) <= k]
    return np.array(ranks, dtype=np.int64).reshape(-1, children)


class _Plan:
    """Where each candidate of ``_Candidates`` over the spans of one length sits in a span's row of candidates, in
    rule order: T (K), T φ (K per split), J J (the child rank pairs per split), at the root φ J (K per split), and
    J J J (per split pair, K outer pairs x K middles, or when ``sparse`` the rank triples of ``_ranks``). The pairs
    are every K x K, or when ``sparse`` those of ``_ranks``. ``read`` turns a candidate's index into its back
    pointer."""

    def __init__(self, n: int, length: int, k: int, ternary: bool, root: bool, sparse: bool):
        self.k, self.layout, self.sparse = k, _layout(n, length), sparse
        # (left k, right k) of J J's candidates, and (left k, middle k, right k) of sparse J J J's
        self.pairs = _ranks(k, 2).tolist() if sparse else [divmod(pair, k) for pair in range(k * k)]
        self.triples = _ranks(k, 3).tolist() if sparse else None
        splits = length - 1
        self.blocks = [(TERM, k)]  # (rule, candidates per span)
        if length >= 2:
            self.blocks += [(ABSORB, splits * k), (BINARY, splits * len(self.pairs))]
            if root:
                self.blocks.append((LEADING_PHI, splits * k))
        if ternary and length >= 3:
            self.blocks.append((TERNARY, self.layout.first.shape[1] * (len(self.triples) if sparse else k * k)))

    def read(self, index: int, start: int, outer: np.ndarray | None) -> BackPointer:
        """The back pointer of candidate ``index`` of the span starting at ``start`` (its row in the layout);
        ``outer`` [N, P, K]: the ternary candidates' outer pairs (``Chart.outer``)."""
        k = self.k
        for rule, size in self.blocks:
            if index < size:
                break
            index -= size
        if rule == TERM:
            return TERM, 0, 0, index, 0, 0
        if rule == ABSORB:
            split, kl = divmod(index, k)
            return ABSORB, start + 1 + split, 0, kl, 0, 0
        if rule == BINARY:
            split, pair = divmod(index, len(self.pairs))
            kl, kr = self.pairs[pair]
            return BINARY, start + 1 + split, 0, kl, 0, kr
        if rule == LEADING_PHI:
            split, kr = divmod(index, k)
            return LEADING_PHI, start + 1 + split, 0, 0, 0, kr
        if self.sparse:
            pair, triple = divmod(index, len(self.triples))
            kl, km, kr = self.triples[triple]
        else:
            pair, rest = divmod(index, k * k)
            rank, km = divmod(rest, k)
            kl, kr = divmod(int(outer[start, pair, rank]), k)
        return TERNARY, int(self.layout.first[start, pair]), int(self.layout.second[start, pair]), kl, km, kr


_plan = lru_cache(maxsize=4096)(_Plan)


class _Block(NamedTuple):
    """One rule's candidates over the spans of a length: scores [N, X] and Composition ids [N, X] (or None)."""

    rule: int
    scores: np.ndarray
    programs: np.ndarray | None


def _merged(blocks: list[_Block]) -> tuple[np.ndarray, np.ndarray | None]:
    """The blocks' candidates as one row per span, in rule order; a derivation whose sub-programs do not compose is
    no derivation (-inf)."""
    scores = np.concatenate([block.scores for block in blocks], axis=1)
    if blocks[0].programs is None:
        return scores, None
    programs = np.concatenate([block.programs for block in blocks], axis=1)
    return np.where(programs < 0, NEG_INF, scores), programs


class _Candidates:
    """Every derivation of J over spans ``(i, i + length)`` for a batch of starts i, in the order of ``_Plan``:
    rule by rule, one ``_Block`` per rule, scores [N, X] and Composition ids [N, X] (None without a Composition); or
    for a sparse length of a short utterance, the scores [N, X] alone (``sums``)."""

    def __init__(self, chart: Chart, values: _Values, ternary: bool, gold: _Gold | None, prune_ternary: bool = False,
                 distinct_scores: bool = False, phi: bool = False):
        self.chart, self.values, self.ternary, self.gold = chart, values, ternary, gold
        self.phi_scores = values.phi if phi else None  # None: φ adds 0 everywhere
        self.prune_ternary, self.distinct_scores = prune_ternary, distinct_scores
        # only the child ranks that can make the K best (module docstring), while the K kept are the plain K best
        self.sparse = gold is None and not distinct_scores

    def plan(self, length: int, root: bool = False) -> _Plan:
        """The candidates over spans of ``length`` words: sparse but at the whole utterance, whose candidates the
        root keeps every one of (as many as its children's K best make), for the search past its K best trees."""
        n = self.chart.n
        return _plan(n, length, self.chart.k, self.ternary, root, self.sparse and length < n)

    def sums(self, length: int) -> np.ndarray:
        """The candidates' scores [N, X] of a sparse length (``_sums``): some five array operations instead of the
        blocks' thirty, the same additions in the same order."""
        chart, plan = self.chart, self.plan(length)
        terms = self.values.array[_sums(chart.n, length, chart.k, self.ternary)]
        scores = terms[0] + terms[1]
        scores += terms[2]
        scores += terms[3]
        if self.prune_ternary and plan.blocks[-1][0] == TERNARY:
            ternary = scores[:, -plan.blocks[-1][1]:]  # the ternary candidates come last
            ternary[ternary < 0] = NEG_INF
        return scores

    def compose(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Composition ids of a with b (broadcast), NONE where either is NONE or they do not compose."""
        return np.where((a < 0) | (b < 0), NONE, self.gold.table[np.maximum(a, 0), np.maximum(b, 0)])

    def __call__(self, length: int, root: bool = False) -> list[_Block]:
        chart, k, gold = self.chart, self.chart.k, self.gold
        plan = self.plan(length, root)
        span, left_part, right_part, outer_left, outer_right, middle_part = plan.layout[:6]
        rows = len(span)
        # the chart's arrays by span id (views); the terminals', join's and φ's (_Values) are already so
        scores, constants, programs = (a.reshape(-1, k) for a in (chart.scores, chart.constants, chart.programs))
        terminal, phi = self.values.terminal, self.phi_scores
        join = self.values.join[span][:, None, None]  # [N, 1, 1]
        blocks = []

        def add(rule: int, scores: np.ndarray, programs: np.ndarray | None = None) -> None:
            blocks.append(_Block(rule, scores.reshape(rows, -1), None if programs is None else
                                 programs.reshape(rows, -1)))

        # J := T
        add(TERM, terminal[span], None if gold is None else gold.constant[constants[span]])
        if length >= 2:
            # J := T φ
            absorb = terminal[left_part] + join
            add(ABSORB, absorb if phi is None else absorb + phi[right_part][..., None],
                None if gold is None else gold.constant[constants[left_part]])
            # J := J J
            left, right = scores[left_part], scores[right_part]  # [N, L-1, K]
            if plan.sparse:
                pairs = _ranks(k, 2)
                add(BINARY, left[..., pairs[:, 0]] + right[..., pairs[:, 1]] + join)
            else:
                add(BINARY, left[..., :, None] + right[..., None, :] + join[..., None],
                    None if gold is None else self.compose(programs[left_part][..., :, None],
                                                           programs[right_part][..., None, :]))
            if root:
                # S := φ J
                leading = right + join
                add(LEADING_PHI, leading if phi is None else leading + phi[left_part][..., None],
                    None if gold is None else programs[right_part])
        if self.ternary and length >= 3 and plan.sparse:
            # J := J J J over the rank triples that can make the K best (the outer pair's sum first, as below)
            triples = _ranks(k, 3)
            ternary_scores = scores[outer_left][..., triples[:, 0]] + scores[outer_right][..., triples[:, 2]] \
                + scores[middle_part][..., triples[:, 1]] + join
            if self.prune_ternary:  # a triple left out that scores >= 0 has its lower-rank triples >= 0 too
                ternary_scores = np.where(ternary_scores < 0, NEG_INF, ternary_scores)
            add(TERNARY, ternary_scores)
        elif self.ternary and length >= 3:
            # J := J J J; the outer spans compose first, then the result with the middle (§3.4). A tree's score
            # adds up, so the K best (outer pair, middle) combinations use only the K best outer pairs: K^2 work
            # per split pair instead of K^3. Under a Composition the outer pairs kept are the best of K different
            # sub-programs, since only a pair's sub-program decides what it composes with.
            split_pairs = outer_left.size
            outer = (scores[outer_left][..., :, None] + scores[outer_right][..., None, :]).reshape(split_pairs, k * k)
            if gold is not None:
                outer_programs = self.compose(programs[outer_left][..., :, None],
                                              programs[outer_right][..., None, :]).reshape(split_pairs, k * k)
                outer = _best_per_program(np.where(outer_programs < 0, NEG_INF, outer), outer_programs)
            if self.distinct_scores:  # equal outer pairs make equal derivations: the K best must differ
                outer = _first_of_each_score(outer)
            best_outer, outer_ks = _top_k(outer, k)  # [N * P, K]
            chart.outer[length] = outer_ks.reshape(rows, -1, k)
            ternary_scores = best_outer.reshape(rows, -1, k)[..., :, None] + scores[middle_part][..., None, :] \
                + join[..., None]
            if self.prune_ternary:
                ternary_scores = np.where(ternary_scores < 0, NEG_INF, ternary_scores)
            add(TERNARY, ternary_scores, None if gold is None else self.compose(
                np.take_along_axis(outer_programs, outer_ks, 1).reshape(rows, -1, k)[..., :, None],
                programs[middle_part][..., None, :]))
        return blocks
