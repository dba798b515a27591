"""The ``Formalism`` contract: what a program *is* for one program language (DESIGN.md, Contracts).

Every metric goes through a formalism, so an unparsable prediction becomes a ``FormalismError`` that the
metric scores as wrong instead of a crash.
"""
from __future__ import annotations

import re
from typing import Any


class FormalismError(ValueError):
    """A program that the formalism cannot parse, canonicalise or execute."""


class Formalism:
    """Base formalism: programs are whitespace-separated token sequences.

    Subclasses override ``parse`` (to a structure) and ``canonical`` (the form compared for exact match)
    where the language has more structure than a token sequence, and ``execute`` where a world exists.
    """

    name: str = "tokens"

    def tokenize(self, program: str) -> list[str]:
        return program.split()

    def canonical(self, program: str) -> str:
        """Whitespace-normalised token sequence; raises ``FormalismError`` when the program is malformed."""
        return " ".join(self.tokenize(self.parse_check(program)))

    def parse(self, program: str) -> Any:
        return self.tokenize(program)

    def parse_check(self, program: str) -> str:
        """Parse only to validate; returns the program unchanged."""
        self.parse(program)
        return program

    def execute(self, program: str, world: Any = None) -> Any:
        raise FormalismError(f"formalism {self.name!r} has no executor")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# A quoted constant ('rhode island', spaces and all), a bracket or comma, or a bare symbol.
_TERM_TOKEN = re.compile(r"'[^']*'|[(),]|[^\s(),']+")


def parse_brackets(program: str, formalism: str) -> tuple:
    """Parse a prefix term ``f ( a , g ( 'b c' ) , h ( ) )`` into nested tuples ``('f', 'a', ('g', "'b c'"), ('h',))``.

    Used by FunQL and SCAN-SP. Quoted constants may hold spaces (``cityid ( 'des moines', _ )``) and a function
    may take no argument (SCAN-SP's ``i_jump ( )``).
    """
    tokens = _TERM_TOKEN.findall(program)
    if not tokens:
        raise FormalismError(f"{formalism}: empty program")
    if "".join("".join(tokens).split()) != "".join(program.split()):  # the regex skipped a character
        raise FormalismError(f"{formalism}: unbalanced quote or stray character in {program!r}")
    pos = 0

    def term():
        nonlocal pos
        if pos >= len(tokens) or tokens[pos] in "(),":
            raise FormalismError(f"{formalism}: expected a symbol at token {pos} of {program!r}")
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
                raise FormalismError(f"{formalism}: expected ')' at token {pos} of {program!r}")
            pos += 1
            return (head, *args)
        return head

    tree = term()
    if pos != len(tokens):
        raise FormalismError(f"{formalism}: trailing tokens after position {pos} in {program!r}")
    return tree
