"""The one data type shared by every layer: a parsing example."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Example:
    """An utterance paired with its program in the dataset's canonical text form.

    ``meta`` holds whatever else the dataset knows (SQL variable values, gold span trees, the original
    index in the release); models may read it, metrics must not depend on it.
    """

    utterance: str
    program: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
