"""The GeoQuery database (``geobase.pl``, Zelle & Mooney 1996), read from its Prolog facts in pure Python.

``read_prolog_facts`` parses ground Prolog facts (quoted and bare atoms, integers, floats such as ``3894.0e+3``,
negative numbers, lists ``['a','b']``, nested terms; ``%`` and ``/* */`` comments) without a Prolog system.
``GeoBase`` turns the facts of ``geobase.pl`` (``state/10``, ``city/4``, ``river/3``, ``border/3``,
``highlow/6``, ``mountain/4``, ``road/2``, ``lake/3``) into entities and the relations FunQL programs query:
which entity is located in which, borders, rivers traversing states, capitals, high and low points, and the
numeric attributes (population, area, length, elevation).

Entities are typed tuples: ``('state', 'texas')``, ``('city', 'austin', 'tx')`` (name and state abbreviation),
``('river', 'red')``, ``('place', 'mount whitney')`` (a high or low point of ``highlow/6``), ``('lake', 'tahoe')``
and ``('country', 'usa')``. ``mountain/4`` and ``road/2`` are read but make no entities: FunQL's ``mountain``
denotes ``highlow/6`` places (see ``funql.py``) and no FunQL predicate asks about roads.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Union

from .base import FormalismError

PrologTerm = Union[str, float, int, list, tuple]  # atom, number, list, compound ``(functor, arg, ...)``

# Prolog tokens: a quoted atom ('' is an escaped quote), a number, a bare atom or variable, punctuation.
_PROLOG_TOKEN = re.compile(r"""
    (?P<space>\s+|%[^\n]*|/\*.*?\*/)
  | (?P<quoted>'(?:[^'\\]|''|\\.)*')
  | (?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<atom>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[()\[\],.|])
""", re.VERBOSE | re.DOTALL)


def _prolog_tokens(text: str) -> list[tuple[str, str, int]]:
    tokens, pos = [], 0
    while pos < len(text):
        match = _PROLOG_TOKEN.match(text, pos)
        if match is None:
            line = text.count("\n", 0, pos) + 1
            raise FormalismError(f"prolog: unexpected character {text[pos]!r} on line {line}")
        if match.lastgroup != "space":
            tokens.append((match.lastgroup, match.group(), pos))
        pos = match.end()
    return tokens


def _unquote(token: str) -> str:
    body = token[1:-1].replace("''", "'")
    return re.sub(r"\\(.)", r"\1", body)


def read_prolog_facts(text: str) -> list[tuple]:
    """Ground facts ``f(a, b).`` as tuples ``('f', a, b)``; numbers become int or float, lists Python lists.

    Raises ``FormalismError`` naming the line of anything that is not a ground fact (rules, operators).
    """
    tokens = _prolog_tokens(text)
    pos = 0

    def where() -> str:
        if pos >= len(tokens):
            return "the end of the file"
        return f"{tokens[pos][1]!r} on line {text.count(chr(10), 0, tokens[pos][2]) + 1}"

    def expect(value: str) -> None:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos][1] != value:
            raise FormalismError(f"prolog: expected {value!r}, found {where()}")
        pos += 1

    def term() -> PrologTerm:
        nonlocal pos
        if pos >= len(tokens):
            raise FormalismError("prolog: expected a term, found the end of the file")
        kind, value, _ = tokens[pos]
        if kind == "number":
            pos += 1
            return float(value) if any(c in value for c in ".eE") else int(value)
        if value == "[":
            pos += 1
            items: list = []
            if tokens[pos][1] != "]":
                items.append(term())
                while tokens[pos][1] == ",":
                    pos += 1
                    items.append(term())
            expect("]")
            return items
        if kind not in ("quoted", "atom"):
            raise FormalismError(f"prolog: expected a term, found {where()}")
        if kind == "atom" and (value[0].isupper() or value[0] == "_"):
            raise FormalismError(f"prolog: variable {value!r} in a fact: only ground facts are read")
        pos += 1
        name = _unquote(value) if kind == "quoted" else value
        if pos < len(tokens) and tokens[pos][1] == "(":
            pos += 1
            args = [term()]
            while pos < len(tokens) and tokens[pos][1] == ",":
                pos += 1
                args.append(term())
            expect(")")
            return (name, *args)
        return name

    facts = []
    while pos < len(tokens):
        fact = term()
        expect(".")
        facts.append(fact if isinstance(fact, tuple) else (fact,))
    return facts


Entity = tuple  # ('state', 'texas'), ('city', 'austin', 'tx'), ...
USA: Entity = ("country", "usa")


class GeoBase:
    """Entities, attributes and relations of ``geobase.pl``; the *world* FunQL programs run against.

    ``located_in[e]`` are the entities ``e`` lies in (its states and the USA), ``borders[s]`` the states
    ``border/3`` lists for ``s``, ``traverses[r]`` the states river ``r`` flows through and the USA,
    ``capital_of[s]`` the capital city of state ``s``, ``high_point[s]``/``low_point[s]`` a state's (or the USA's)
    extreme places;
    ``population``, ``area``, ``length`` and ``elevation`` map entities to numbers (floats).
    """

    def __init__(self, facts: list[tuple]):
        self.facts = facts
        self.by_kind: dict[str, set[Entity]] = defaultdict(set)
        self.located_in: dict[Entity, set[Entity]] = defaultdict(set)
        self.borders: dict[Entity, set[Entity]] = defaultdict(set)
        self.traverses: dict[Entity, set[Entity]] = defaultdict(set)
        self.capital_of: dict[Entity, Entity] = {}
        self.high_point: dict[Entity, set[Entity]] = defaultdict(set)
        self.low_point: dict[Entity, set[Entity]] = defaultdict(set)
        self.population: dict[Entity, float] = {}
        self.area: dict[Entity, float] = {}
        self.length: dict[Entity, float] = {}
        self.elevation: dict[Entity, float] = {}
        self.by_kind["country"].add(USA)
        self.state_of_abbreviation: dict[str, Entity] = {
            fact[2]: ("state", fact[1]) for fact in facts if fact[0] == "state" and len(fact) == 11}
        readers = {("state", 10): self._state, ("city", 4): self._city, ("river", 3): self._river,
                   ("border", 3): self._border, ("highlow", 6): self._highlow, ("mountain", 4): None,
                   ("lake", 3): self._lake, ("road", 2): None}  # mountain/4, road/2: see the module docstring
        for fact in facts:
            key = (fact[0], len(fact) - 1)
            if key not in readers:
                raise FormalismError(f"geobase: unknown fact {fact[0]}/{len(fact) - 1}")
            if readers[key] is not None:
                readers[key](*fact[1:])
        for kind, members in self.by_kind.items():
            if kind != "country":
                for entity in members:
                    self.located_in[entity].add(USA)
        self.high_point[USA] = self._extreme(self.high_point, max)
        self.low_point[USA] = self._extreme(self.low_point, min)

    @classmethod
    def from_file(cls, path: str | Path) -> "GeoBase":
        return cls(read_prolog_facts(Path(path).read_text(encoding="utf-8")))

    # ----- one reader per fact ---------------------------------------------------------------------------------
    def _state(self, name, abbreviation, capital, population, area, _admission, *_major_cities):
        state = ("state", name)
        self.by_kind["state"].add(state)
        self.population[state] = float(population)
        self.area[state] = float(area)
        # A capital is a city of its state even where city/4 does not list it (then its population is unknown).
        capital_city = ("city", capital, abbreviation)
        self.by_kind["city"].add(capital_city)
        self.located_in[capital_city].add(state)
        self.capital_of[state] = capital_city

    def _city(self, state_name, abbreviation, name, population):
        city = ("city", name, abbreviation)
        self.by_kind["city"].add(city)
        self.located_in[city].add(("state", state_name))
        self.population[city] = float(population)

    def _river(self, name, length, states):
        river = ("river", name)
        self.by_kind["river"].add(river)
        self.length[river] = float(length)
        for state in states:
            self.located_in[river].add(("state", state))
            self.traverses[river].add(("state", state))
        self.traverses[river].add(USA)  # a river that crosses a state crosses the country

    def _border(self, name, _abbreviation, neighbours):
        self.borders[("state", name)].update(("state", n) for n in neighbours)

    def _highlow(self, state_name, _abbreviation, high, high_elevation, low, low_elevation):
        state = ("state", state_name)
        for name, elevation, extremes in ((high, high_elevation, self.high_point),
                                          (low, low_elevation, self.low_point)):
            place = ("place", name)
            self.by_kind["place"].add(place)
            self.located_in[place].add(state)
            extremes[state].add(place)
            # A place that is the low point of several states ('gulf of mexico') keeps its lowest elevation.
            self.elevation[place] = min(float(elevation), self.elevation.get(place, float("inf")))

    def _lake(self, name, area, states):
        lake = ("lake", name)
        self.by_kind["lake"].add(lake)
        self.area[lake] = float(area)
        self.located_in[lake].update(("state", state) for state in states)

    def _extreme(self, points: dict[Entity, set[Entity]], pick) -> set[Entity]:
        """The country's high (low) point: the highest (lowest) of the states' high (low) points."""
        places = {place for state_points in points.values() for place in state_points}
        best = pick((self.elevation[place] for place in places), default=None)  # None: no highlow facts
        return {place for place in places if self.elevation[place] == best}

    def __repr__(self) -> str:
        counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(self.by_kind.items()))
        return f"GeoBase({counts})"
