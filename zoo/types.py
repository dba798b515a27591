"""The data types shared by every layer: a parsing example, and what a stage of a multi-stage method makes of one."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence


@dataclass(frozen=True)
class Example:
    """An utterance paired with its program in the dataset's canonical text form.

    ``meta`` holds whatever else the dataset knows (SQL variable values, gold span trees, the original
    index in the release); models may read it, metrics must not depend on it.
    """

    utterance: str
    program: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


# What a stage of a multi-stage method (zoo.stages) trains and evaluates on: (split name, its examples) -> the
# examples the stage uses (an IR stage's sources and targets, exemplars appended to the utterances)
Rewrite = Callable[[str, list[Example]], Sequence[Example]]
