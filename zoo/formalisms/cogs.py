"""COGS logical forms (Kim & Linzen 2020, "COGS: A Compositional Generalization Challenge Based on Semantic
Interpretation", §3: logical forms in the style of Reddy et al. 2017, with token indices as variables).

A sentence's logical form is an optional prefix of definite descriptions, each ``* noun ( x _ i ) ;``, then a
conjunction ``conjunct AND conjunct ...`` where a conjunct is a predicate applied to arguments: ``cake ( x _ 4 )``,
``help . theme ( x _ 3 , x _ 1 )``, ``cake . nmod . beside ( x _ 1 , x _ 4 )``. An argument is a variable
``x _ i`` (``i`` is the index of the word that introduces the entity or event), a proper name (``Emma``), or, in the
primitive examples, a variable bound by a ``LAMBDA a .`` prefix: ``LAMBDA a . LAMBDA e . inflate . theme ( e , a )``.
A primitive proper noun is its bare name (``Emma``).

Exact match is the metric of the paper (string equality of logical forms), so ``canonical`` is the token text
with single spaces, conjuncts kept in their order: reordering would credit outputs that the published numbers
count as wrong.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from zoo.formalisms.base import VALUE, Formalism, FormalismError

_TOKEN = re.compile(r"[A-Za-z]+|\d+|[()*,.;_]")
_TOKEN_OR_STRAY = re.compile(_TOKEN.pattern + r"|(?P<stray>\S)")
_NAME = re.compile(r"[A-Z][a-z]+")  # a proper name (also rules out the keywords AND and LAMBDA)
_WORD = re.compile(r"[a-z]+")
_PREDICATE = re.compile(r"([a-z]+(?:\s*\.\s*[a-z]+)*)\s*\(")  # a predicate and its roles before their '('
_INDEX = re.compile(r"\d+")


@dataclass(frozen=True)
class Conjunct:
    """``predicate ( arg , ... )``: predicate words (``("help", "theme")``); an int argument is the variable
    ``x _ i``, a str argument a proper name or a LAMBDA-bound variable."""

    predicate: tuple[str, ...]
    args: tuple[int | str, ...]


@dataclass(frozen=True)
class LogicalForm:
    lambdas: tuple[str, ...] = ()  # LAMBDA-bound variables, outermost first
    definites: tuple[Conjunct, ...] = ()  # the ``* noun ( x _ i ) ;`` prefix
    conjuncts: tuple[Conjunct, ...] = ()  # the AND-joined body
    name: str | None = None  # a primitive proper noun: the whole form is this name


class _Reader:
    """Recursive descent over the tokens of one logical form; errors name the token position and what was expected."""

    def __init__(self, tokens: list[str], program: str):
        self.tokens, self.program, self.pos = tokens + [None], program, 0  # None marks the end

    def peek(self) -> str | None:
        return self.tokens[self.pos]

    def fail(self, expected: str):
        found = repr(self.peek()) if self.peek() is not None else "the end"
        raise FormalismError(f"cogs: expected {expected} at token {self.pos}, found {found} in {self.program[:200]!r}")

    def take(self, expected_token: str) -> None:
        if self.peek() != expected_token:
            self.fail(repr(expected_token))
        self.pos += 1

    def take_match(self, pattern: re.Pattern, expected: str) -> str:
        token = self.peek()
        if token is None or not pattern.fullmatch(token):
            self.fail(expected)
        self.pos += 1
        return token

    def logical_form(self) -> LogicalForm:
        lambdas: list[str] = []
        while self.peek() == "LAMBDA":
            self.pos += 1
            variable = self.take_match(_WORD, "a variable after LAMBDA")
            if variable == "x" or variable in lambdas:
                self.pos -= 1
                self.fail(f"a fresh variable name (not 'x' or one of {lambdas})")
            self.take(".")
            lambdas.append(variable)
        if not lambdas and len(self.tokens) == 2 and _NAME.fullmatch(self.tokens[0]):
            return LogicalForm(name=self.tokens[0])
        definites = []
        while self.peek() == "*":
            self.pos += 1
            definites.append(self.conjunct(lambdas))
            self.take(";")
        conjuncts = [self.conjunct(lambdas)]
        while self.peek() == "AND":
            self.pos += 1
            conjuncts.append(self.conjunct(lambdas))
        if self.peek() is not None:
            self.fail("'AND' or the end")
        return LogicalForm(tuple(lambdas), tuple(definites), tuple(conjuncts))

    def conjunct(self, lambdas: list[str]) -> Conjunct:
        predicate = [self.take_match(_WORD, "a predicate")]
        while self.peek() == ".":
            self.pos += 1
            predicate.append(self.take_match(_WORD, "a predicate word after '.'"))
        self.take("(")
        args = [self.argument(lambdas)]
        while self.peek() == ",":
            self.pos += 1
            args.append(self.argument(lambdas))
        self.take(")")
        return Conjunct(tuple(predicate), tuple(args))

    def argument(self, lambdas: list[str]) -> int | str:
        token = self.peek()
        if token == "x":
            self.pos += 1
            self.take("_")
            return int(self.take_match(re.compile(r"\d+"), "a word index after 'x _'"))
        if token is not None and (_NAME.fullmatch(token) or token in lambdas):
            self.pos += 1
            return token
        self.fail(f"an argument ('x _ i', a proper name{', or one of ' + repr(lambdas) if lambdas else ''})")


def _unparse_conjunct(conjunct: Conjunct) -> str:
    args = " , ".join(f"x _ {a}" if isinstance(a, int) else a for a in conjunct.args)
    return f"{' . '.join(conjunct.predicate)} ( {args} )"


class COGS(Formalism):
    """COGS logical forms; exact match on the normalised text, conjunct order kept (Kim & Linzen 2020)."""

    name = "cogs"

    def tokenize(self, program: str) -> list[str]:
        tokens = _TOKEN.findall(program)
        if "".join(tokens) != "".join(program.split()):  # the regex skipped a character: find and name it
            for i, match in enumerate(_TOKEN_OR_STRAY.finditer(program)):
                if match.group("stray"):
                    raise FormalismError(f"cogs: unexpected character {match.group()!r} at character "
                                         f"{match.start()} (token {i}) in {program[:200]!r}")
        return tokens

    def parse(self, program: str) -> LogicalForm:
        tokens = self.tokenize(program)
        if not tokens:
            raise FormalismError("cogs: empty logical form")
        return _Reader(tokens, program).logical_form()

    def unparse(self, structure: LogicalForm) -> str:
        if structure.name is not None:
            return structure.name
        parts = [f"LAMBDA {v} ." for v in structure.lambdas]
        parts += [f"* {_unparse_conjunct(d)} ;" for d in structure.definites]
        parts.append(" AND ".join(_unparse_conjunct(c) for c in structure.conjuncts))
        return " ".join(parts)

    def canonical(self, program: str) -> str:
        return self.unparse(self.parse(program))

    def structure(self, program: str) -> list[str]:
        """The predicates with their roles (``girl``, ``roll.agent``, ``cat.nmod.beside``), in order."""
        return [" ".join(p.split()).replace(" . ", ".") for p in _PREDICATE.findall(program)]

    def template(self, program: str) -> str:
        """The logical form with its proper names masked."""
        return " ".join(VALUE if _NAME.fullmatch(t) else t for t in _TOKEN.findall(program))
