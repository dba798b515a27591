"""SCAN IRs of Herzig et al. 2021 (Figure 2c).

* RIR (§3.2): "brackets around repeated program components (e.g., each of the two occurrences that 'turn opposite
  left twice' maps to) and around complex actions", placed by SCAN's synchronous grammar
  (``zoo.formalisms.scan.command_to_program``: the IR is a function of the command as well). A unit of several
  actions is bracketed (``jump opposite right`` -> ``( I_TURN_RIGHT I_TURN_RIGHT I_JUMP )``); ``twice`` and
  ``thrice`` bracket each occurrence and the group of them, as Figure 2c does:
  ``turn opposite left twice`` -> ``( ( I_TURN_LEFT I_TURN_LEFT ) ( I_TURN_LEFT I_TURN_LEFT ) )``. As the paper
  defines it (``definition="paper"``), every occurrence is bracketed, one action too (``jump twice`` ->
  ``( ( I_JUMP ) ( I_JUMP ) )``), and the four occurrences of ``around`` are bracketed each and not grouped
  (``walk around left`` -> ``( I_TURN_LEFT I_WALK ) ( I_TURN_LEFT I_WALK ) ...``). The zoo's earlier reading
  (``definition="zoo"``) leaves a repeated single action unbracketed (``( I_JUMP I_JUMP )``) and groups the four
  parts of ``around`` in one more pair of brackets. The inverse drops the brackets and checks the actions.
* LIR (§3.3): a run of one action repeated n > 1 times, C^n, becomes C A^{n-1}, where A is the anonymous action
  ``ACTION``: ``I_TURN_RIGHT I_TURN_RIGHT I_JUMP`` -> ``I_TURN_RIGHT ACTION I_JUMP``. Applied to the RIR (the
  lir+rir pipelines), brackets stay; the paper's definition finds the runs among the actions, across brackets
  (``( ( I_TURN_LEFT I_TURN_LEFT ) ( I_TURN_LEFT I_TURN_LEFT ) )`` ->
  ``( ( I_TURN_LEFT ACTION ) ( ACTION ACTION ) )``, Figure 2c's ``LTURN ACTION ACTION ACTION``), the zoo's reading
  token by token, so that a bracket ends a run.
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


def _occurrence(tokens: list[str]) -> list[str]:
    """``tokens`` as one bracketed occurrence (as they are when they already form one bracketed unit)."""
    depth = 0
    for position, token in enumerate(tokens):
        depth += {"(": 1, ")": -1}.get(token, 0)
        if depth == 0:
            return tokens if position == len(tokens) - 1 and token == ")" else ["(", *tokens, ")"]
    return ["(", *tokens, ")"]


def bracketed(tree: Any, paper: bool = True) -> list[str]:
    """The actions of a SCAN-SP term with the RIR's brackets (the term's structure is the command's), under the
    paper's definition or (``paper=False``) the zoo's earlier one."""
    head, *args = tree
    if head == "i_and":
        return bracketed(args[0], paper) + bracketed(args[1], paper)
    if head == "i_after":  # "x after y" does y first
        return bracketed(args[1], paper) + bracketed(args[0], paper)
    if head in _REPEATS:
        occurrence = bracketed(args[0], paper)
        return _group([_occurrence(occurrence) if paper else occurrence] * _REPEATS[head])
    if len(args) == 2 and args[1] == "i_around":  # four turns, each with the action
        turn = evaluate((head, args[0]))
        return ["(", *turn, ")"] * 4 if paper else _group([_unit(turn)] * 4)
    return _unit(evaluate(tree))


@register_ir
class ScanRIR(IntermediateRepresentation):
    name, formalism, reversible = "rir", "scan", True

    def forward(self, program: str, utterance: str = "") -> str:
        try:
            tree = parse_brackets(command_to_program(utterance), "scan_sp")
        except FormalismError as e:
            raise IRError(f"scan rir: the command does not parse: {e}") from e
        ir = bracketed(tree, paper=self.definition == "paper")
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
        # brackets stay, so it applies to the RIR too (the lir+rir pipelines); the paper's runs continue across
        # them, the zoo's end at them
        out, previous = [], None
        for token in program.split():
            if token in "()":
                out.append(token)
                previous = previous if self.definition == "paper" else None
                continue
            out.append(ANONYMOUS_ACTION if token == previous else token)
            previous = token
        return " ".join(out)
