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
triple) are one tensor, and ``torch.topk`` merges them; the only Python loop is over span lengths. The root keeps
every candidate built from its children's K best, in descending order, so the caller can return the best tree whose
program is valid (``Chart.trees``); K-best is exact for the K best trees, since a tree's score adds its children's.

Hard-EM (§3.3) prunes the chart with the gold program: constants outside it are -inf, and two nodes compose only if
their sub-programs compose within the gold program. That second test is a lookup table over the gold program's
sub-programs (``Composition``), so it too is a tensor gather.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator, NamedTuple

import torch

JOIN, PHI = -1, -2  # labels of join and φ nodes in a SpanNode (constants are their index in Σ)
NONE = -1  # "no sub-program" in a Composition id
# Derivation rules, the first column of a back pointer (rule, split1, split2, left k, middle k, right k)
TERM, ABSORB, BINARY, TERNARY, LEADING_PHI = range(5)


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
    """The K-best chart of one utterance: ``scores[i, j, k]`` and back pointers of J, and the sorted root."""

    def __init__(self, n: int, k: int):
        self.n, self.k = n, k
        self.scores = torch.full((n + 1, n + 1, k), float("-inf"))
        self.back = torch.zeros((n + 1, n + 1, k, 6), dtype=torch.long)
        self.programs = torch.full((n + 1, n + 1, k), NONE, dtype=torch.long)  # Composition ids (hard-EM only)
        self.constants = torch.zeros((n + 1, n + 1, k), dtype=torch.long)  # T: the k-th best constant of a span
        self.root_scores = torch.zeros(0)
        self.root_back = torch.zeros((0, 6), dtype=torch.long)
        self.root_programs = torch.zeros(0, dtype=torch.long)

    def tree(self, back: torch.Tensor, start: int, end: int) -> SpanNode:
        """The span tree of a back pointer (a row of ``back`` or ``root_back``) over ``(start, end)``."""
        rule, s1, s2, kl, km, kr = back.tolist()
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
        return self.tree(self.back[start, end, k], start, end)

    def trees(self) -> Iterator[tuple[float, SpanNode, int]]:
        """(score, tree, Composition id) of every root candidate, best first; -inf candidates are left out."""
        for index in range(int(torch.isfinite(self.root_scores).sum())):  # the finite ones come first
            yield (float(self.root_scores[index]), self.tree(self.root_back[index], 0, self.n),
                   int(self.root_programs[index]))

    def meanings(self, leaf: Callable[[int], Any], compose: Callable[[Any, Any], Any | None]
                 ) -> Iterator[tuple[float, Any, torch.Tensor]]:
        """(score, meaning, back pointer) of every root candidate, best first, where a meaning is built bottom-up
        by ``leaf(constant)`` and ``join_meaning`` (None: no meaning). Each chart entry's meaning is computed
        once, so a root candidate costs a composition or two however deep its tree."""
        memo: dict[tuple[int, int, int], Any] = {}

        def meaning(back: torch.Tensor, start: int, end: int) -> Any:
            rule, s1, s2, kl, km, kr = back.tolist()
            if rule in (TERM, ABSORB):
                return leaf(int(self.constants[start, s1 if rule == ABSORB else end, kl]))
            if rule == LEADING_PHI:
                return entry(s1, end, kr)
            if rule == BINARY:
                return join_meaning(compose, entry(start, s1, kl), entry(s1, end, kr))
            return join_meaning(compose, entry(start, s1, kl), entry(s2, end, kr), entry(s1, s2, km))

        def entry(start: int, end: int, k: int) -> Any:
            if (start, end, k) not in memo:
                memo[start, end, k] = meaning(self.back[start, end, k], start, end)
            return memo[start, end, k]

        for index in range(int(torch.isfinite(self.root_scores).sum())):
            yield float(self.root_scores[index]), meaning(self.root_back[index], 0, self.n), self.root_back[index]


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


def parse(constant_scores: torch.Tensor, join_scores: torch.Tensor, k: int = 5, ternary: bool = False,
          composition: Composition | None = None, barred: torch.Tensor | None = None,
          meaningful: torch.Tensor | None = None, prune_ternary: bool = False, distinct_scores: bool = False) -> Chart:
    """K-best CKY. ``constant_scores`` [n+1, n+1, Σ] and ``join_scores`` [n+1, n+1] are shifted scores (``shift``)
    indexed by half-open spans ``(i, j)``; entries with j <= i are never read. With ``composition`` the chart keeps
    only derivations whose sub-programs compose within the gold program (hard-EM).

    Three details of the authors' implementation (jonathanherzig/span-based-sp, ``utils/cky.py``), off by default:
    ``barred`` [n+1, n+1] marks the spans no constant may sit on (there, those holding a function word such as "is"
    or "the": ``spans_holding``); ``prune_ternary`` drops ternary derivations scoring below 0 (they did so at
    inference only); ``distinct_scores`` keeps one derivation per score in each span and at the root, the first
    of the candidates in this module's order, as their chart kept a set of the scores it had seen.

    ``meaningful`` [n+1, n+1] (this zoo's, for LENGTH's too-short programs, issue 28) marks the spans no φ may cover:
    those holding a word the lexicon names a constant with, which must then stand under a constant of the tree."""
    n = constant_scores.shape[0] - 1
    if n < 1:
        raise ValueError("an utterance needs at least one token")
    constant_scores, join_scores = constant_scores.detach().float().cpu(), join_scores.detach().float().cpu()
    if composition is not None:
        allowed = composition.constant >= 0
        constant_scores = constant_scores.masked_fill(~allowed, float("-inf"))
    if barred is not None:
        constant_scores = constant_scores.masked_fill(barred.cpu()[..., None], float("-inf"))
    chart = Chart(n, k)
    width = min(k, constant_scores.shape[-1])
    best, chart.constants[..., :width] = constant_scores.topk(width, dim=-1)
    terminal_scores = torch.full((n + 1, n + 1, k), float("-inf"))
    terminal_scores[..., :width] = best
    # what a φ span adds to a derivation: 0 (φ is the shifted scores' zero), -inf where it may not be
    phi_scores = None if meaningful is None else torch.zeros(n + 1, n + 1).masked_fill(meaningful.cpu(), float("-inf"))
    builder = _Candidates(chart, terminal_scores, join_scores, ternary, composition, prune_ternary, distinct_scores,
                          phi_scores)
    for length in range(1, n + 1):
        scores, back, programs = builder(length)
        if composition is not None:
            scores = _best_per_program(scores, programs)
        if distinct_scores:
            scores = _first_of_each_score(scores)
        top = scores.topk(min(k, scores.shape[1]), dim=1)
        starts, ends = _layout(n, length)[:2]
        chart.scores[starts, ends, :top.values.shape[1]] = top.values
        chart.back[starts, ends, :top.values.shape[1]] = back.gather(1, top.indices[..., None].expand(-1, -1, 6))
        if programs is not None:
            chart.programs[starts, ends, :top.values.shape[1]] = programs.gather(1, top.indices)
    scores, back, programs = builder(n, root=True)
    if composition is not None:  # at the root only the gold program itself is right
        scores = scores.masked_fill(programs != composition.gold, float("-inf"))
    if distinct_scores:
        scores = _first_of_each_score(scores)
    order = scores[0].argsort(descending=True)
    chart.root_scores, chart.root_back = scores[0, order], back[0, order]
    chart.root_programs = programs[0, order] if programs is not None else torch.full(order.shape, NONE)
    return chart


def _best_per_program(scores: torch.Tensor, programs: torch.Tensor) -> torch.Tensor:
    """``scores`` [N, X] with every candidate but the best of its sub-program (per row) set to -inf: two
    derivations of one sub-program compose alike, so hard-EM needs only the better, and the K kept are K different
    sub-programs."""
    order = scores.argsort(dim=1, descending=True, stable=True)
    ranked = programs.gather(1, order).clamp(min=0)
    positions = torch.arange(scores.shape[1]).expand_as(ranked)
    first = torch.full((scores.shape[0], int(programs.max().clamp(min=0)) + 1), scores.shape[1])
    first = first.scatter_reduce(1, ranked, positions, reduce="amin")  # rank of each program's best candidate
    keep_ranked = first.gather(1, ranked) == positions
    keep = torch.zeros_like(keep_ranked).scatter(1, order, keep_ranked)
    return scores.masked_fill(~keep, float("-inf"))


def _first_of_each_score(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` [N, X] with every candidate whose score equals an earlier candidate's (in its row) set to -inf."""
    order = scores.argsort(dim=1, descending=True, stable=True)  # equal scores stay in candidate order
    ranked = scores.gather(1, order)
    repeated = torch.zeros_like(ranked, dtype=torch.bool)
    repeated[:, 1:] = (ranked[:, 1:] == ranked[:, :-1]) & torch.isfinite(ranked[:, 1:])
    return scores.masked_fill(torch.zeros_like(repeated).scatter(1, order, repeated), float("-inf"))


def spans_holding(positions: list[int], n: int) -> torch.Tensor | None:
    """[n+1, n+1] True for the spans ``(i, j)`` holding a word at one of ``positions``; None when there is none."""
    if not positions:
        return None
    marks = torch.zeros(n + 1, dtype=torch.long)
    marks[torch.tensor(positions) + 1] = 1
    before = marks.cumsum(0)  # before[j]: marked words among the first j
    return (before[None, :] - before[:, None]) > 0


# Utterances up to this long keep their back-pointer tables between calls at inference, where the per-call cost of
# building them dominates a short utterance's decoding; longer ones (and hard-EM's large K) rebuild them each call.
CACHED_LENGTH = 12


class _Layout(NamedTuple):
    """The index tensors of the spans of ``length`` words of an utterance of n: their starts and ends [N], split
    points [N, L-1], and the two split points of each ternary split pair [N, P]."""

    starts: torch.Tensor
    ends: torch.Tensor
    splits: torch.Tensor
    first: torch.Tensor
    second: torch.Tensor


@lru_cache(maxsize=4096)
def _layout(n: int, length: int) -> _Layout:
    starts = torch.arange(n - length + 1)
    pairs = torch.triu_indices(max(length - 1, 0), max(length - 1, 0), offset=1) + 1  # 1 <= d1 < d2 <= L-1
    return _Layout(starts, starts + length, starts[:, None] + torch.arange(1, length)[None, :],
                   starts[:, None] + pairs[0][None, :], starts[:, None] + pairs[1][None, :])


def _build_back_table(n: int, length: int, k: int, ternary: bool, root: bool,
                      outer_ks: torch.Tensor | None = None) -> torch.Tensor:
    """Back pointers [N, X, 6] of every candidate of ``_Candidates`` over the spans of ``length`` words of an
    utterance of ``n`` (N = its starts; the root's when ``root``), in the candidates' order. Everything but a ternary
    candidate's outer k's depends on the utterance's length alone: those come from ``outer_ks`` [N, P, K], the
    indices of the K best outer pairs (0 without it)."""
    layout, ks, tables = _layout(n, length), torch.arange(k), []
    rows = len(layout.starts)

    def table(shape, rule, s1=0, s2=0, kl=0, km=0, kr=0):
        columns = [torch.as_tensor(c).expand(shape) for c in (rule, s1, s2, kl, km, kr)]
        tables.append(torch.stack(columns, dim=-1).reshape(rows, -1, 6))

    table((rows, k), TERM, kl=ks)
    if length >= 2:
        splits = layout.splits
        table((rows, length - 1, k), ABSORB, s1=splits[..., None], kl=ks)
        table((rows, length - 1, k, k), BINARY, s1=splits[..., None, None], kl=ks[:, None], kr=ks)
        if root:
            table((rows, length - 1, k), LEADING_PHI, s1=splits[..., None], kr=ks)
    if ternary and length >= 3:
        kl, kr = (0, 0) if outer_ks is None else ((outer_ks // k)[..., None], (outer_ks % k)[..., None])
        table((rows, layout.first.shape[1], k, k), TERNARY, s1=layout.first[..., None, None],
              s2=layout.second[..., None, None], kl=kl, km=ks, kr=kr)
    return torch.cat(tables, dim=1)


_cached_back_table = lru_cache(maxsize=None)(_build_back_table)


class _Candidates:
    """Every derivation of J over spans ``(i, i + length)`` for a batch of starts i, flattened per start: scores
    [N, X], back pointers [N, X, 6], Composition ids [N, X] (None without a Composition)."""

    def __init__(self, chart: Chart, terminal_scores, join_scores, ternary: bool, composition: Composition | None,
                 prune_ternary: bool = False, distinct_scores: bool = False, phi_scores: torch.Tensor | None = None):
        self.chart, self.terminal_scores, self.join_scores = chart, terminal_scores, join_scores
        self.ternary, self.composition = ternary, composition
        self.prune_ternary, self.distinct_scores, self.phi_scores = prune_ternary, distinct_scores, phi_scores

    def compose(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Composition ids of a with b (broadcast), NONE where either is NONE or they do not compose."""
        out = self.composition.table[a.clamp(min=0), b.clamp(min=0)]
        return out.masked_fill((a < 0) | (b < 0), NONE)

    def __call__(self, length: int, root: bool = False):
        chart, k, constrained = self.chart, self.chart.k, self.composition is not None
        starts, ends, splits, s1, s2 = _layout(chart.n, length)
        i, j = starts[:, None], ends[:, None]
        join = self.join_scores[starts, ends]
        scores, programs = [], []  # each rule's candidates [N, ...], in the order of _build_back_table
        # J := T
        scores.append(self.terminal_scores[starts, ends])
        if constrained:
            programs.append(self.composition.constant[chart.constants[starts, ends]])
        if length >= 2:
            # J := T φ
            absorb = self.terminal_scores[i, splits] + join[:, None, None]
            scores.append(absorb if self.phi_scores is None else absorb + self.phi_scores[splits, j][..., None])
            # J := J J
            left, right = chart.scores[i, splits], chart.scores[splits, j]  # [N, L-1, K]
            scores.append(left[..., :, None] + right[..., None, :] + join[:, None, None, None])
            if constrained:
                programs.append(self.composition.constant[chart.constants[i, splits]])
                programs.append(self.compose(chart.programs[i, splits][..., :, None],
                                             chart.programs[splits, j][..., None, :]))
            if root:
                # S := φ J
                leading = chart.scores[splits, j] + join[:, None, None]
                scores.append(leading if self.phi_scores is None else leading + self.phi_scores[i, splits][..., None])
                if constrained:
                    programs.append(chart.programs[splits, j])
        outer_ks = None
        if self.ternary and length >= 3:
            # J := J J J; the outer spans compose first, then the result with the middle (§3.4). A tree's score
            # adds up, so the K best (outer pair, middle) combinations use only the K best outer pairs: K^2 work
            # per split pair instead of K^3. Under a Composition the outer pairs kept are the best of K different
            # sub-programs, since only a pair's sub-program decides what it composes with.
            outer = (chart.scores[i, s1][..., :, None] + chart.scores[s2, j][..., None, :]).flatten(-2)  # [N,P,K*K]
            pairs = outer.shape[0] * outer.shape[1]
            if constrained:
                outer_programs = self.compose(chart.programs[i, s1][..., :, None],
                                              chart.programs[s2, j][..., None, :]).flatten(-2)
                outer = outer.masked_fill(outer_programs < 0, float("-inf"))
                outer = _best_per_program(outer.reshape(pairs, -1), outer_programs.reshape(pairs, -1)).view_as(outer)
            if self.distinct_scores:  # equal outer pairs make equal derivations: the K best must differ
                outer = _first_of_each_score(outer.reshape(pairs, -1)).view_as(outer)
            best_outer = outer.topk(k, dim=-1)  # [N, P, K]
            outer_ks = best_outer.indices
            ternary_scores = best_outer.values[..., :, None] + chart.scores[s1, s2][..., None, :] \
                + join[:, None, None, None]
            if self.prune_ternary:
                ternary_scores = ternary_scores.masked_fill(ternary_scores < 0, float("-inf"))
            scores.append(ternary_scores)
            if constrained:
                programs.append(self.compose(outer_programs.gather(-1, best_outer.indices)[..., :, None],
                                             chart.programs[s1, s2][..., None, :]))
        rows = len(starts)
        flat = torch.cat([s.reshape(rows, -1) for s in scores], dim=1)
        key = (chart.n, length, k, self.ternary, root)
        if constrained or chart.n > CACHED_LENGTH:
            back = _build_back_table(*key, outer_ks)
        else:
            back = _cached_back_table(*key)
            if outer_ks is not None:  # the ternary candidates come last: their outer pairs' k's
                back, outer = back.clone(), outer_ks[..., :, None].expand(-1, -1, -1, k).reshape(rows, -1)
                back[:, -outer.shape[1]:, 3], back[:, -outer.shape[1]:, 5] = outer // k, outer % k
        if not constrained:
            return flat, back, None
        flat_programs = torch.cat([p.reshape(rows, -1) for p in programs], dim=1)
        # a derivation whose sub-programs do not compose is no derivation
        return flat.masked_fill(flat_programs < 0, float("-inf")), back, flat_programs
