"""Metrics shared by every model: a torchmetrics shell over a functional core.

State is two sum-reduced counters, so one process and several (DDP) report the same number. Predictions go
through the dataset's formalism: an unparsable prediction is scored wrong, never raised.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torchmetrics import Metric

from zoo.formalisms import Formalism, FormalismError


def exact_match_flags(predictions: Sequence[str], golds: Sequence[str], formalism: Formalism) -> list[bool]:
    """Per-example exact match of canonical forms (CFQ: sorted, deduplicated conjuncts; others: tokens)."""
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} gold programs")
    flags = []
    for prediction, gold in zip(predictions, golds):
        try:
            flags.append(formalism.canonical(prediction) == formalism.canonical(gold))
        except FormalismError:
            flags.append(False)
    return flags


class ExactMatch(Metric):
    """Share of predictions whose canonical form equals the gold program's."""

    full_state_update = False
    higher_is_better = True

    def __init__(self, formalism: Formalism, **kwargs):
        super().__init__(**kwargs)
        self.formalism = formalism
        self.add_state("correct", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, predictions: Sequence[str], golds: Sequence[str]) -> None:
        self.correct += sum(exact_match_flags(predictions, golds, self.formalism))
        self.total += len(golds)

    def compute(self) -> torch.Tensor:
        return self.correct.float() / self.total.clamp(min=1)
