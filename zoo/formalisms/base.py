"""The ``Formalism`` contract: what a program *is* for one program language (docs/DESIGN.md, Contracts).

Every metric goes through a formalism, so an unparsable prediction becomes a ``FormalismError`` that the
metric scores as wrong instead of a crash.

A formalism is stateless. Where programs denote something, the database they run against (the *world*: the
GeoQuery Prolog facts, an SQLite file) is loaded once by ``load_world(path)`` and passed to ``execute``;
per-example context that a program needs to run (SQL variable values) comes from ``Example.meta``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping


class FormalismError(ValueError):
    """A program that the formalism cannot parse, type-check or execute; the message says where and why."""


class Formalism:
    """Base formalism: programs are whitespace-separated token sequences.

    Subclasses override ``parse`` (to a structure) and ``unparse`` (back to text), ``canonical`` (the form
    compared for exact match) where the language has more structure than a token sequence, and ``execute``
    (setting ``executable = True``) where programs have a denotation.
    """

    name: str = "tokens"
    executable: bool = False  # True when ``execute`` gives denotations (DenotationAccuracy is then reported)
    needs_world: bool = False  # True when ``execute`` needs a world from ``load_world`` (a database file)
    interprets: bool = False  # True when ``interpret`` knows the utterance language's grammar (SCAN)

    def tokenize(self, program: str) -> list[str]:
        return program.split()

    def parse(self, program: str) -> Any:
        return self.tokenize(program)

    def unparse(self, structure: Any) -> str:
        """Text of a parsed structure; ``canonical(unparse(parse(p))) == canonical(p)`` for every valid ``p``."""
        return " ".join(structure)

    def round_trip(self, program: str) -> str:
        """Program -> structure -> program; formalisms with a second structure (CFQ's graph) go through it too."""
        return self.unparse(self.parse(program))

    def canonical(self, program: str) -> str:
        """Whitespace-normalised token sequence; raises ``FormalismError`` when the program is malformed."""
        return " ".join(self.tokenize(self.parse_check(program)))

    def parse_check(self, program: str) -> str:
        """Parse only to validate; returns the program unchanged."""
        self.parse(program)
        return program

    # ----- denotations ----------------------------------------------------------------------------------------
    def load_world(self, path: str | Path) -> Any:
        """Load the database that ``execute`` runs against from a dataset file."""
        raise FormalismError(f"formalism {self.name!r} has no world to load")

    def execute(self, program: str, world: Any = None, meta: Mapping[str, Any] | None = None) -> Any:
        """The program's denotation in ``world``; ``meta`` is the example's meta (e.g. SQL variable values).

        Never hangs and never raises anything but ``FormalismError`` for a bad program.
        """
        raise FormalismError(f"formalism {self.name!r} has no executor")

    def same_denotation(self, a: Any, b: Any) -> bool:
        return a == b

    def answer_denotation(self, answer: Any) -> Any:
        """The denotation of an answer the data ships (SCAN-SP's action string), to compare with ``execute``."""
        raise FormalismError(f"formalism {self.name!r} does not read shipped answers")

    # ----- structure (GandR's output similarity and template recall, zoo.retrieval) ------------------------------
    def structure(self, program: str) -> list[str]:
        """The program's structural tokens, its values left out (SQL: tables, columns and operators; FunQL:
        predicates). Read token by token, never parsed, so that a malformed prediction still has a structure."""
        raise FormalismError(f"formalism {self.name!r} gives no structure for output similarity")

    def template(self, program: str) -> str:
        """The program with its values masked: two programs share a template when they differ only in values."""
        return " ".join(self.structure(program))

    def interpret(self, utterance: str) -> str:
        """The program of an utterance, where the utterances come from a known grammar (SCAN commands); ``verify``
        checks the gold programs of a dataset against it."""
        raise FormalismError(f"formalism {self.name!r} cannot interpret utterances")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# A quoted constant ('rhode island', spaces and all), a bracket or comma, or a bare symbol.
_TERM_TOKEN = re.compile(r"'[^']*'|[(),]|[^\s(),']+")
VALUE = "VALUE"  # what ``template`` writes in place of a value


def term_tokens(program: str) -> list[str]:
    """The tokens of a prefix term, without checking anything (``structure`` reads malformed predictions too)."""
    return _TERM_TOKEN.findall(program)


def term_predicates_and_template(program: str) -> tuple[list[str], str]:
    """A prefix term's predicates (the symbols applied to arguments, in order) and its template (every leaf masked
    as ``VALUE``)."""
    tokens = term_tokens(program)
    following = tokens[1:] + [""]
    predicates = [t for t, after in zip(tokens, following) if after == "("]
    masked = [t if t in "()," or after == "(" else VALUE for t, after in zip(tokens, following)]
    return predicates, " ".join(masked)


def tokenize_brackets(program: str, formalism: str) -> list[str]:
    """Tokens of a prefix term: symbols, quoted constants (spaces kept), ``(``, ``)`` and ``,``."""
    tokens = _TERM_TOKEN.findall(program)
    if "".join("".join(tokens).split()) != "".join(program.split()):  # the regex skipped a character
        raise FormalismError(f"{formalism}: unbalanced quote or stray character in {program!r}")
    return tokens


def parse_brackets(program: str, formalism: str) -> tuple:
    """Parse a prefix term ``f ( a , g ( 'b c' ) , h ( ) )`` into nested tuples ``('f', 'a', ('g', "'b c'"), ('h',))``.

    Used by FunQL and SCAN-SP. Quoted constants may hold spaces (``cityid ( 'des moines', _ )``) and a function
    may take no argument (SCAN-SP's ``i_jump ( )``). Errors name the token position and what was expected.
    """
    tokens = tokenize_brackets(program, formalism)
    if not tokens:
        raise FormalismError(f"{formalism}: empty program")
    pos = 0

    def found() -> str:
        return repr(tokens[pos]) if pos < len(tokens) else "the end"

    def term():
        nonlocal pos
        if pos >= len(tokens) or tokens[pos] in "(),":
            raise FormalismError(f"{formalism}: expected a symbol at token {pos}, found {found()} in {program!r}")
        head = tokens[pos]
        pos += 1
        if pos < len(tokens) and tokens[pos] == "(":
            pos += 1
            if pos < len(tokens) and tokens[pos] == ")":
                pos += 1
                return (head,)
            args = [term()]
            while pos < len(tokens) and tokens[pos] == ",":
                pos += 1
                args.append(term())
            if pos >= len(tokens) or tokens[pos] != ")":
                raise FormalismError(f"{formalism}: expected ')' or ',' at token {pos}, found {found()} in {program!r}")
            pos += 1
            return (head, *args)
        return head

    tree = term()
    if pos != len(tokens):
        raise FormalismError(f"{formalism}: expected the end at token {pos}, found {found()} in {program!r}")
    return tree


def unparse_brackets(tree: Any) -> str:
    """Inverse of ``parse_brackets`` in the spacing of the data: ``f ( a , g ( 'b c' ) )``, ``h ( )``."""
    if isinstance(tree, str):
        return tree
    head, *args = tree
    if not args:
        return f"{head} ( )"
    return f"{head} ( {' , '.join(unparse_brackets(a) for a in args)} )"
