"""SCAN action sequences and the SCAN-SP programs of Herzig & Berant 2021.

* ``ScanActions`` ("scan"): SCAN outputs, sequences of the six primitive actions (Lake & Baroni 2018, §2).
* ``ScanSP`` ("scan_sp"): the programs of Herzig & Berant 2021, Appendix B ("Generating SCAN-SP"): predicates
  ``and``, ``after``, ``walk``, ``jump``, ``run``, ``look``, ``turn``, ``twice``, ``thrice`` and the constants
  ``left``, ``right``, ``opposite``, ``around`` (all written with an ``i_`` prefix in the data, e.g.
  ``i_after ( i_walk ( i_left ) , i_twice ( i_run ( i_left , i_around ) ) )``). The paper calls the verbs "binary";
  in the data a verb takes zero, one (a direction) or two arguments (a direction, then ``opposite``/``around``).
  Programs execute to SCAN action sequences; their semantics is SCAN's (Lake & Baroni 2018, Fig. 6).
* ``command_to_program``: the synchronous grammar of Appendix B, SCAN's phrase-structure grammar
  (Lake & Baroni 2018, Fig. 6: ``C -> S and S | S after S | S``, ``S -> V twice | V thrice | V``,
  ``V -> U|turn opposite|around left|right``, ``V -> U|turn left|right``, ``V -> U``) paired with SCAN-SP terms.
  ``execute(command_to_program(c))`` is a SCAN interpreter.

The type system mirrors SCAN's nonterminals so that a bottom-up (CKY) parser only builds programs SCAN's grammar
can produce: constants have types ``direction`` and ``modifier``; a verb with its arguments is an ``action`` (V);
``twice``/``thrice`` of an action is a ``clause`` (S); ``and``/``after`` of two clauses is a ``command`` (C).
Subtyping ``action <= clause <= command`` lets an action stand wherever a clause or command is expected.
A whole program must have a type ``<= command``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from zoo.formalisms.base import Formalism, FormalismError, parse_brackets, term_tokens, unparse_brackets

# ----- SCAN actions --------------------------------------------------------------------------------------------
SCAN_ACTIONS = ("I_WALK", "I_LOOK", "I_RUN", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT")


class ScanActions(Formalism):
    """SCAN output: a non-empty sequence of primitive actions (``I_TURN_LEFT I_JUMP ...``).

    The empty sequence is rejected: every SCAN command denotes at least one action (no output in ``tasks.txt``
    is empty), so an empty prediction is malformed rather than a legitimate answer.
    """

    name = "scan"
    interprets = True

    def parse(self, program: str) -> tuple[str, ...]:
        actions = tuple(program.split())
        if not actions:
            raise FormalismError("scan: empty action sequence (every SCAN command denotes at least one action)")
        for position, action in enumerate(actions):
            if action not in SCAN_ACTIONS:
                raise FormalismError(f"scan: expected one of {', '.join(SCAN_ACTIONS)} at token {position}, "
                                     f"found {action!r}")
        return actions

    def unparse(self, structure: Sequence[str]) -> str:
        return " ".join(structure)

    def structure(self, program: str) -> list[str]:
        """The actions themselves: SCAN outputs have no values (the template is the action sequence)."""
        return program.split()

    def interpret(self, utterance: str) -> str:
        """The actions of a SCAN command, through its SCAN-SP program."""
        return self.unparse(evaluate(parse_brackets(command_to_program(utterance), "scan_sp")))


# ----- SCAN-SP type system -------------------------------------------------------------------------------------
DIRECTION, MODIFIER, ACTION, CLAUSE, COMMAND = "direction", "modifier", "action", "clause", "command"

# Each type with the types it may stand in for (action <= clause <= command).
_SUPERTYPES = {
    DIRECTION: {DIRECTION},
    MODIFIER: {MODIFIER},
    ACTION: {ACTION, CLAUSE, COMMAND},
    CLAUSE: {CLAUSE, COMMAND},
    COMMAND: {COMMAND},
}


def is_subtype(actual: str, expected: str) -> bool:
    """Whether a term of type ``actual`` may be used where ``expected`` is required."""
    return expected in _SUPERTYPES.get(actual, ())


@dataclass(frozen=True)
class Signature:
    """Argument types and return type of a predicate; the trailing arguments after ``min_args`` are optional.

    A constant has no parameters and is written bare (``i_left``); every other predicate is written applied, even
    to no argument (``i_walk ( )``).
    """

    params: tuple[str, ...]
    returns: str
    min_args: int | None = None  # None: all parameters are required

    @property
    def is_constant(self) -> bool:
        return not self.params and self.min_args is None

    @property
    def required(self) -> int:
        return len(self.params) if self.min_args is None else self.min_args


_VERB = Signature((DIRECTION, MODIFIER), ACTION, min_args=0)  # walk; walk left; walk opposite left
_TURN = Signature((DIRECTION, MODIFIER), ACTION, min_args=1)  # "turn" alone is not a SCAN command

SCAN_SP_SIGNATURES: dict[str, Signature] = {
    "i_left": Signature((), DIRECTION),
    "i_right": Signature((), DIRECTION),
    "i_opposite": Signature((), MODIFIER),
    "i_around": Signature((), MODIFIER),
    "i_walk": _VERB,
    "i_look": _VERB,
    "i_run": _VERB,
    "i_jump": _VERB,
    "i_turn": _TURN,
    "i_twice": Signature((ACTION,), CLAUSE),
    "i_thrice": Signature((ACTION,), CLAUSE),
    "i_and": Signature((CLAUSE, CLAUSE), COMMAND),
    "i_after": Signature((CLAUSE, CLAUSE), COMMAND),
}


def result_type(predicate: str, arg_types: Sequence[str], args: Sequence[Any] | None = None) -> str:
    """Type of ``predicate`` applied to arguments of ``arg_types``; raises ``FormalismError`` when ill-typed.

    A CKY parser can call this on the types of two sub-spans without rebuilding trees. ``args`` (the argument
    terms) only make the error message name the offending argument.
    """
    signature = SCAN_SP_SIGNATURES.get(predicate)
    if signature is None:
        raise FormalismError(f"scan_sp: unknown predicate {predicate!r}; known: {', '.join(SCAN_SP_SIGNATURES)}")
    if signature.is_constant:
        raise FormalismError(f"scan_sp: {predicate} is a constant of type {signature.returns} and takes no "
                             f"arguments, found {predicate} ( ... )")
    if not signature.required <= len(arg_types) <= len(signature.params):
        wanted = (str(signature.required) if signature.required == len(signature.params)
                  else f"{signature.required} to {len(signature.params)}")
        raise FormalismError(f"scan_sp: {predicate} takes {wanted} argument(s) "
                             f"({', '.join(signature.params)}), found {len(arg_types)}")
    for index, (actual, expected) in enumerate(zip(arg_types, signature.params)):
        if not is_subtype(actual, expected):
            shown = f"{unparse_brackets(args[index])!r} " if args else ""
            raise FormalismError(f"scan_sp: argument {index + 1} of {predicate} must be of type {expected}, "
                                 f"found {shown}of type {actual}")
    return signature.returns


def type_of(tree: Any) -> str:
    """Type of a parsed SCAN-SP term (``parse_brackets`` tuples); raises ``FormalismError`` naming the
    predicate and the ill-typed argument."""
    if isinstance(tree, str):
        signature = SCAN_SP_SIGNATURES.get(tree)
        if signature is None:
            raise FormalismError(f"scan_sp: unknown predicate {tree!r}; known: {', '.join(SCAN_SP_SIGNATURES)}")
        if not signature.is_constant:
            raise FormalismError(f"scan_sp: {tree} must be applied to its arguments, e.g. {tree} ( ... ), "
                                 f"found bare {tree}")
        return signature.returns
    predicate, *args = tree
    return result_type(predicate, [type_of(arg) for arg in args], args)


# ----- SCAN-SP semantics (Lake & Baroni 2018, Fig. 6) ----------------------------------------------------------
_TURN_ACTION = {"i_left": "I_TURN_LEFT", "i_right": "I_TURN_RIGHT"}
_VERB_ACTION = {"i_walk": ("I_WALK",), "i_look": ("I_LOOK",), "i_run": ("I_RUN",), "i_jump": ("I_JUMP",),
                "i_turn": ()}  # "turn left" is the turn alone
_REPEATS = {"i_twice": 2, "i_thrice": 3}


def evaluate(tree: Any) -> tuple[str, ...]:
    """Action sequence of a well-typed SCAN-SP term (check it with ``type_of`` first)."""
    head, *args = tree
    if head == "i_and":
        return evaluate(args[0]) + evaluate(args[1])
    if head == "i_after":  # "x after y" does y first
        return evaluate(args[1]) + evaluate(args[0])
    if head in _REPEATS:
        return evaluate(args[0]) * _REPEATS[head]
    action = _VERB_ACTION[head]
    if not args:
        return action
    turn = (_TURN_ACTION[args[0]],)
    if len(args) == 1:
        return turn + action
    if args[1] == "i_opposite":  # turn around to face the opposite direction, then act
        return turn * 2 + action
    return (turn + action) * 4  # i_around: act facing each of the four directions in turn


class ScanSP(Formalism):
    """SCAN-SP programs of Herzig & Berant 2021 (``i_after ( i_walk ( i_left ) , ... )``), typed and executable."""

    name = "scan_sp"
    executable = True
    needs_world = False
    interprets = True

    def parse(self, program: str) -> Any:
        """Bracket tree of a well-typed program whose type is a command (or an action or clause)."""
        try:
            tree = parse_brackets(program, self.name)
            program_type = type_of(tree)
        except RecursionError:
            raise FormalismError(f"scan_sp: program nested too deeply ({len(program)} characters)") from None
        if not is_subtype(program_type, COMMAND):
            raise FormalismError(f"scan_sp: a program must be an action, clause or command, found "
                                 f"{unparse_brackets(tree)!r} of type {program_type}")
        return tree

    def structure(self, program: str) -> list[str]:
        """Every symbol (``i_and``, ``i_walk``, ``i_left``): the term has no values, its template is the term."""
        return [token for token in term_tokens(program) if token not in "(),"]

    def template(self, program: str) -> str:
        return " ".join(term_tokens(program))

    def unparse(self, structure: Any) -> str:
        return unparse_brackets(structure)

    def canonical(self, program: str) -> str:
        return self.unparse(self.parse(program))

    def execute(self, program: str, world: Any = None, meta: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        return evaluate(self.parse(program))

    def answer_denotation(self, answer: str) -> tuple[str, ...]:
        return _ACTIONS.parse(answer)

    def interpret(self, utterance: str) -> str:
        return command_to_program(utterance)


_ACTIONS = ScanActions()


# ----- SCAN command -> SCAN-SP program (Herzig & Berant 2021, Appendix B) --------------------------------------
_VERBS = ("walk", "look", "run", "jump", "turn")
_MODIFIERS = ("opposite", "around")
_DIRECTIONS = ("left", "right")
_REPETITIONS = ("twice", "thrice")
_CONJUNCTIONS = ("and", "after")


class _CommandReader:
    """Recursive-descent reader of one SCAN command; remembers the optional words it could have read at the
    current position so that an error lists everything that was expected there."""

    def __init__(self, command: str):
        self.text = command
        self.words = command.split()
        self.pos = 0
        self.could_have_read: list[str] = []

    def peek(self) -> str | None:
        return self.words[self.pos] if self.pos < len(self.words) else None

    def take(self) -> str:
        self.pos += 1
        self.could_have_read = []
        return self.words[self.pos - 1]

    def optional(self, options: tuple[str, ...]) -> str | None:
        if self.peek() in options:
            return self.take()
        self.could_have_read += options
        return None

    def require(self, options: tuple[str, ...]) -> str:
        if self.peek() in options:
            return self.take()
        self.fail([*self.could_have_read, *options])

    def fail(self, expected: list[str]):
        found = repr(self.peek()) if self.pos < len(self.words) else "the end"
        wanted = ", ".join(word if word == "the end" else repr(word) for word in expected)
        raise FormalismError(f"scan command: expected one of {wanted} at word {self.pos}, found {found} "
                             f"in {self.text!r}")

    def action(self) -> tuple:
        """V: a verb with an optional (for turn: required) direction, itself optionally after opposite/around."""
        verb = self.require(_VERBS)
        modifier = self.optional(_MODIFIERS)
        if modifier or verb == "turn":
            direction = self.require(_DIRECTIONS)
        else:
            direction = self.optional(_DIRECTIONS)
        args = [f"i_{word}" for word in (direction, modifier) if word]
        return (f"i_{verb}", *args)

    def clause(self) -> tuple:
        """S: an action, optionally repeated twice or thrice."""
        action = self.action()
        repetition = self.optional(_REPETITIONS)
        return (f"i_{repetition}", action) if repetition else action

    def command(self) -> tuple:
        """C: a clause, or two clauses joined by and/after; then the end of the input."""
        tree = self.clause()
        conjunction = self.optional(_CONJUNCTIONS)
        if conjunction:
            tree = (f"i_{conjunction}", tree, self.clause())
        if self.pos != len(self.words):
            self.fail([*self.could_have_read, "the end"])
        return tree


def command_to_program(command: str) -> str:
    """The SCAN-SP program of a SCAN command (``walk left twice`` -> ``i_twice ( i_walk ( i_left ) )``)."""
    return unparse_brackets(_CommandReader(command).command())


__all__ = ["SCAN_ACTIONS", "SCAN_SP_SIGNATURES", "ScanActions", "ScanSP", "Signature", "command_to_program",
           "evaluate", "is_subtype", "result_type", "type_of"]
