"""SCAN IRs of Herzig et al. 2021 (Figure 2c).

* LIR (§3.3): a run of one action repeated n > 1 times, C^n, becomes C A^{n-1}, where A is the anonymous action
  ``ACTION``: ``I_TURN_RIGHT I_TURN_RIGHT I_JUMP`` -> ``I_TURN_RIGHT ACTION I_JUMP``.
"""
from __future__ import annotations

from zoo.ir import IntermediateRepresentation, register_ir

ANONYMOUS_ACTION = "ACTION"


@register_ir
class ScanLIR(IntermediateRepresentation):
    name, formalism, reversible = "lir", "scan", False

    def forward(self, program: str, utterance: str = "") -> str:
        actions = program.split()
        return " ".join(ANONYMOUS_ACTION if i and action == actions[i - 1] else action
                        for i, action in enumerate(actions))
