"""Metrics shared by every model: per-example scoring through the formalism, then torchmetrics counters.

Scoring (``Scorer``) is where programs are canonicalised and executed, once per prediction; the metrics
(``ExactMatch``, ``DenotationAccuracy``, CFQ's ``EdgeMatchRate``) only count the flags of ``ExampleScore`` objects.
Their state is two sum-reduced counters, so one process and several (DDP) report the same number. An unparsable or
failing prediction is scored wrong, never raised, and the reason is kept in ``ExampleScore.error`` for the predictions
file.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torchmetrics import Metric

from zoo.formalisms import Formalism, FormalismError
from zoo.types import Example


@dataclass(frozen=True)
class ExampleScore:
    exact_match: bool
    denotation: bool | None = None  # None when the formalism or dataset has nothing to execute against
    error: str | None = None  # why the prediction could not be canonicalised or executed
    emr: bool | None = None  # CFQ: the GGD authors' relation-tensor match (``sparql.emr_view``); None elsewhere

    def fields(self) -> dict[str, Any]:
        """This score's fields of a predictions.jsonl row: ``correct``, and ``denotation_correct`` and ``error``
        where they apply."""
        row: dict[str, Any] = {"correct": self.exact_match}
        if self.denotation is not None:
            row["denotation_correct"] = self.denotation
        if self.emr is not None:
            row["emr_correct"] = self.emr
        if self.error is not None:
            row["error"] = self.error
        return row


class Scorer:
    """Scores predictions against gold examples: exact match of canonical forms and, where programs execute,
    denotation equality. Gold canonical forms and gold executions are cached, since every epoch re-scores them.

    ``world`` is what ``formalism.load_world`` returned for the dataset (None when it ships no database).
    """

    def __init__(self, formalism: Formalism, world: Any = None):
        self.formalism = formalism
        self.world = world
        self.executes = formalism.executable and (world is not None or not formalism.needs_world)
        self._gold_canonical: dict[str, str] = {}
        self._gold_emr: dict[tuple[str, str], frozenset] = {}
        self._gold_denotation: dict[tuple[str, str], tuple[Any, str | None]] = {}

    def gold_canonical(self, program: str) -> str:
        if program not in self._gold_canonical:
            self._gold_canonical[program] = self.formalism.canonical(program)
        return self._gold_canonical[program]

    def gold_denotation(self, example: Example) -> tuple[Any, str | None]:
        """(denotation, None) or (None, error) for the gold program; meta is part of the key (SQL variables)."""
        key = (example.program, json.dumps(example.meta, sort_keys=True, default=str))
        if key not in self._gold_denotation:
            try:
                self._gold_denotation[key] = (self.formalism.execute(example.program, self.world, example.meta), None)
            except FormalismError as e:
                self._gold_denotation[key] = (None, f"gold program failed: {e}")
        return self._gold_denotation[key]

    def score(self, prediction: str, example: Example) -> ExampleScore:
        scored = self._score(prediction, example)
        if not self.has_emr:
            return scored
        key = (example.program, example.utterance)
        if key not in self._gold_emr:
            self._gold_emr[key] = self.formalism.emr_view(*key)
        try:
            emr = self.formalism.emr_view(prediction, example.utterance) == self._gold_emr[key]
        except FormalismError:
            emr = False
        return dataclasses.replace(scored, emr=emr)

    @property
    def has_emr(self) -> bool:
        return hasattr(self.formalism, "emr_view")

    def _score(self, prediction: str, example: Example) -> ExampleScore:
        try:
            canonical = self.formalism.canonical(prediction)
        except FormalismError as e:
            return ExampleScore(False, False if self.executes else None, str(e))
        exact = canonical == self.gold_canonical(example.program)
        if not self.executes:
            return ExampleScore(exact)
        gold, gold_error = self.gold_denotation(example)
        if gold_error is not None:
            return ExampleScore(exact, False, gold_error)
        try:
            denotation = self.formalism.execute(prediction, self.world, example.meta)
        except FormalismError as e:
            return ExampleScore(exact, False, str(e))
        return ExampleScore(exact, self.formalism.same_denotation(denotation, gold))

    def score_batch(self, predictions: Sequence[str], examples: Sequence[Example]) -> list[ExampleScore]:
        if len(predictions) != len(examples):
            raise ValueError(f"{len(predictions)} predictions for {len(examples)} gold examples")
        return [self.score(p, e) for p, e in zip(predictions, examples)]


def exact_match_flags(predictions: Sequence[str], golds: Sequence[str], formalism: Formalism) -> list[bool]:
    """Per-example exact match of canonical forms (CFQ: sorted, deduplicated conjuncts; others: tokens)."""
    examples = [Example("", gold, {}) for gold in golds]
    return [s.exact_match for s in Scorer(formalism).score_batch(predictions, examples)]


class _ScoreRate(Metric):
    """Share of ``ExampleScore`` objects whose ``field`` is true; scores where it is None are not counted."""

    full_state_update = False
    higher_is_better = True
    field: str = ""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("correct", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, scores: Sequence[ExampleScore]) -> None:
        flags = [getattr(s, self.field) for s in scores if getattr(s, self.field) is not None]
        self.correct += sum(flags)
        self.total += len(flags)

    def compute(self) -> torch.Tensor:
        return self.correct.float() / self.total.clamp(min=1)


class ExactMatch(_ScoreRate):
    """Share of predictions whose canonical form equals the gold program's."""

    field = "exact_match"


class DenotationAccuracy(_ScoreRate):
    """Share of predictions that execute to the gold program's denotation (sets, multisets, action sequences)."""

    field = "denotation"


class EdgeMatchRate(_ScoreRate):
    """CFQ: share of predictions whose ``emr`` view (``zoo.formalisms.sparql.emr_view``) equals the gold's, the
    number Gai et al.'s reference implementation reported. A protocol of its own, never the headline."""

    field = "emr"
