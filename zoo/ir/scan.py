"""SCAN IRs of Herzig et al. 2021 (Figure 2c).

* RIR (§3.2): brackets around repeated program components and around complex actions, placed by SCAN's synchronous
  grammar (``zoo.formalisms.scan.command_to_program``: the IR is a function of the command as well). A unit of
  several actions is bracketed (``jump opposite right`` -> ``( I_TURN_RIGHT I_TURN_RIGHT I_JUMP )``), and so is a
  group of repetitions (``twice``, ``thrice`` and the four turns of ``around``):
  ``turn opposite left twice`` -> ``( ( I_TURN_LEFT I_TURN_LEFT ) ( I_TURN_LEFT I_TURN_LEFT ) )``. The inverse
  drops the brackets and checks the actions.
* LIR (§3.3): a run of one action repeated n > 1 times, C^n, becomes C A^{n-1}, where A is the anonymous action
  ``ACTION``: ``I_TURN_RIGHT I_TURN_RIGHT I_JUMP`` -> ``I_TURN_RIGHT ACTION I_JUMP``.
"""
from __future__ import annotations

from typing import Any

from zoo.formalisms import FormalismError, get_formalism
from zoo.formalisms.base import parse_brackets
from zoo.formalisms.scan import _REPEATS, command_to_program, evaluate
from zoo.ir import IntermediateRepresentation, IRError, register_ir

ANONYMOUS_ACTION = "ACTION"


def _unit(actions: tuple[str, ...]) -> list[str]:
    return ["(", *actions, ")"] if len(actions) > 1 else list(actions)


def _group(parts: list[list[str]]) -> list[str]:
    return ["(", *(token for part in parts for token in part), ")"]


def bracketed(tree: Any) -> list[str]:
    """The actions of a SCAN-SP term with the RIR's brackets (the term's structure is the command's)."""
    head, *args = tree
    if head == "i_and":
        return bracketed(args[0]) + bracketed(args[1])
    if head == "i_after":  # "x after y" does y first
        return bracketed(args[1]) + bracketed(args[0])
    if head in _REPEATS:
        return _group([bracketed(args[0])] * _REPEATS[head])
    if len(args) == 2 and args[1] == "i_around":  # four turns, each with the action
        return _group([_unit(evaluate((head, args[0])))] * 4)
    return _unit(evaluate(tree))


@register_ir
class ScanRIR(IntermediateRepresentation):
    name, formalism, reversible = "rir", "scan", True

    def forward(self, program: str, utterance: str = "") -> str:
        try:
            tree = parse_brackets(command_to_program(utterance), "scan_sp")
        except FormalismError as e:
            raise IRError(f"scan rir: the command does not parse: {e}") from e
        ir = bracketed(tree)
        if [t for t in ir if t not in "()"] != program.split():
            raise IRError(f"scan rir: the command {utterance!r} does not denote the program {program[:80]!r}")
        return " ".join(ir)

    def inverse(self, ir: str, utterance: str = "") -> str:
        depth = 0
        for position, token in enumerate(ir.split()):
            depth += {"(": 1, ")": -1}.get(token, 0)
            if depth < 0:
                raise IRError(f"scan rir: unmatched ')' at token {position} of {ir[:80]!r}")
        if depth:
            raise IRError(f"scan rir: {depth} '(' left open in {ir[:80]!r}")
        program = " ".join(t for t in ir.split() if t not in "()")
        try:
            get_formalism("scan").parse(program)
        except FormalismError as e:  # names the token that is no action
            raise IRError(f"scan rir: {e}") from e
        return program


@register_ir
class ScanLIR(IntermediateRepresentation):
    name, formalism, reversible = "lir", "scan", False

    def forward(self, program: str, utterance: str = "") -> str:
        # token by token, so it applies to the RIR too (the lir+rir pipelines), where brackets stay
        tokens = program.split()
        return " ".join(ANONYMOUS_ACTION if i and token == tokens[i - 1] and token not in "()" else token
                        for i, token in enumerate(tokens))
