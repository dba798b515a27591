"""GeoQuery FunQL: parser, type system and executor over ``geobase.pl``.

FunQL is the variable-free functional query language of GeoQuery (Kate et al. 2005; Wong & Mooney 2006), used
by Herzig & Berant 2021 for the GeoQuery IID / TEMPLATE / LENGTH splits (Section 4, "GEOQUERY"). Their span
parser composes sub-programs bottom-up by function application, using "a domain-specific type system ... to
determine which child is the function and which is the argument" and rejecting semantically invalid trees
(Sections 2 and 3.2); ``FUNQL_SIGNATURES``, ``type_of`` and ``compose`` are that type system, and Table 2 reports
*denotation accuracy*, for which ``execute`` gives the denotations.

Programs. ``answer ( population_1 ( stateid ( 'minnesota' ) ) )``: prefix terms, tokens separated by spaces.
Entity constants are ``stateid ( 'texas' )``, ``riverid``, ``placeid``, ``countryid`` and
``cityid ( 'austin', 'tx' )`` / ``cityid ( 'austin', _ )`` (any state); inside a constant the data writes the
comma without a space before it, which ``unparse`` reproduces. ``all`` is the argument of the kind predicates
(``state ( all )``) and ``0`` is a number literal (``elevation_2 ( 0 )``).

Types (``FUNQL_SIGNATURES``). The entity types are state, city, river, place (a state's high or low point in
``highlow/6``; ``mountain`` keeps the high points, see below), lake and country; values are numbers. A program's
type is a set of base types (``loc_2 ( stateid ( 'texas' ) )`` is a city, river, place or lake); a predicate is
a list of overloads ``argument types -> result type`` and applying it keeps the results of the overloads its
arguments fit. A few overloads exist only because gold programs use them; they denote nothing in geobase
(``LAX_OVERLOADS``): ``capital`` of a place, ``major`` of a lake, ``loc_2``/``traverse_2`` of a city,
``next_to_2`` of a river, ``area_1``/``density_1`` of a city, ``density_1`` of the country.
``largest_one``/``smallest_one`` take an attribute application and ``most``/``fewest`` a relation under kind
predicates; ``type_of`` checks those shapes too.

Semantics (``execute``), after the evaluator of Wong & Mooney's WASP (``eval.pl`` over ``geoquery.pl``), on sets:
* kind predicates (``state``, ``city``, ..., ``capital``, ``major``) filter a set; with ``all`` they give every
  entity of the kind. ``major``: cities over 150,000 people, rivers over 750 (km); never a lake. ``mountain``:
  the places that are a state's high point.
* relations map each element and take the union: ``loc_1`` (where x is: its states and the USA), ``loc_2``
  (what is in x), ``next_to_1/2`` (``border/3``), ``traverse_1/2`` (a river's states and the USA),
  ``capital_1/2``, ``high_point_1/2``, ``low_point_1/2`` (the USA's are its highest and lowest place),
  ``higher_2``/``lower_2`` (places higher/lower than some element), ``longer`` (rivers longer than some
  element), ``elevation_2`` (places at that elevation).
* attributes map each entity to a number: ``population_1``, ``area_1``, ``density_1`` (population / area),
  ``elevation_1``, ``len``, ``size`` (area of a state or lake, population of a city, length of a river, elevation
  of a place, a number itself); entities without the attribute (geobase has no population or area
  for the USA, no area for cities) are skipped.
* superlatives keep the elements with the best key: ``largest``/``smallest`` by size, ``highest``/``lowest`` by
  elevation, ``longest``/``shortest`` by length, ``largest_one``/``smallest_one`` by the attribute they are
  applied to (``largest_one ( density_1 ( state ( all ) ) )`` is a state). ``most``/``fewest`` take
  ``kinds ( relation ( Y ) )`` and keep the entities of the kinds related to the most/fewest elements of Y
  (``most ( state ( loc_1 ( city ( all ) ) ) )``: the state with the most cities); every entity of the kinds
  is a candidate, one related to none counting 0 (``fewest ( state ( next_to_2 ( state ( all ) ) ) )``:
  alaska and hawaii, which border no state).
* ``count`` (number of distinct elements), ``sum`` (over entities, so equal values all count), ``exclude``,
  ``intersection``; ``answer`` is the identity.

Where WASP's evaluator is unclear or order-dependent this module decides: ties in a superlative keep every tied
element (Prolog keeps the first); ``cityid ( 'springfield', _ )`` is every city of that name (Prolog binds the
first one a predicate matches); ``most``/``fewest`` count each candidate's related elements (WASP's
``process2`` ranks the elements of Y instead and returns a city for ``most ( state ( loc_1 ( city ( all ) ) ) )``;
so the gold program of "what state borders the least states excluding alaska and excluding hawaii", which
excludes them from Y, denotes alaska and hawaii here, where WASP answers maine); lakes are the ``lake/3``
lakes, located in their states (as in later ``geoquery.pl`` versions); a river low point shared by several
states has its lowest elevation; state capitals missing from ``city/4`` are cities (without a population).

Mountains are the high points of ``highlow/6``, not the ``mountain/4`` peaks. The corpus the data comes from
types ``mountain`` as a filter over places (``raw/geoFunql-en.corpus``, e.g. id 363 "what is the height of the
highest mountain in texas ?": ``*n:Place -> ({ mountain ( *n:Place ) })``), and WASP's evaluator, whose answers
the papers score, reads ``mountain ( all )`` as every place and ``mountain ( X )`` as the places of X: the
highest mountain in texas is guadalupe peak, 2667 (``highlow/6``), where ``mountain/4`` has no texas fact at
all (it lists 50 peaks above 4,300 m in alaska, california, colorado and washington). This module keeps the
high points only, since a low point such as the pacific ocean is no mountain (WASP's one different gold answer:
"what mountains are in alaska ?" is mount mckinley here, mount mckinley and the pacific ocean there). Reading
the ``mountain/4`` peaks as well would count a summit twice under two names (``mountain/4``'s mckinley 6194 is
``highlow/6``'s mount mckinley, so are whitney, elbert and rainier), so ``geobase.py`` does not read them.

Errors and empty sets. A constant must use a name geobase has for its type (``stateid ( 'atlantis' )`` is a
``FormalismError`` naming it) and a ``cityid`` a known state abbreviation; a known city name with a state that
geobase lists no such city in denotes the empty set (the gold ``cityid ( 'springfield', 'sd' )``). Ill-typed
programs are ``FormalismError`` s. Denotations are frozensets of entities (typed tuples such as
``('city', 'austin', 'tx')``, see ``geobase.py``) and numbers (floats); empty means no answer in geobase.
"""
from __future__ import annotations

import math
import operator
import re
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .base import (Formalism, FormalismError, parse_brackets, term_predicates_and_template,
                   tokenize_brackets)
from .geobase import GeoBase

Tree = Any  # a leaf str, or a tuple (head, *arguments) from parse_brackets
Type = frozenset  # of base type names

# ----- type system -------------------------------------------------------------------------------------------
ENTITY_TYPES = ("state", "city", "river", "place", "lake", "country")
VALUE_TYPES = ENTITY_TYPES + ("number",)
ALL = "all"  # the type of the leaf ``all``, which only kind predicates take

# Entity constants and the type of entity they name; cityid takes a name and a state abbreviation (or _).
CONSTANTS = {"stateid": "state", "cityid": "city", "riverid": "river", "placeid": "place", "countryid": "country"}
ANY_STATE = "_"  # cityid ( 'austin', _ ): a city of that name in any state

# Kind predicates: keep the elements of one kind; ``capital``, ``major`` and ``mountain`` keep capitals, major
# cities/rivers and high points.
KINDS = {"state": ("state",), "city": ("city",), "river": ("river",), "place": ("place",),
         "mountain": ("place",), "lake": ("lake",), "capital": ("city",), "major": ("city", "river")}

# Relations between entities: overloads argument type -> result type.
RELATIONS = {
    "loc_1": [(t, "state") for t in ("city", "river", "place", "lake")]
             + [(t, "country") for t in ("state", "city", "river", "place", "lake")],
    "loc_2": [("state", t) for t in ("city", "river", "place", "lake")]
             + [("country", t) for t in ("state", "city", "river", "place", "lake")],
    "next_to_1": [("state", "state")], "next_to_2": [("state", "state")],
    "traverse_1": [("river", "state"), ("river", "country")],
    "traverse_2": [("state", "river"), ("country", "river")],
    "capital_1": [("state", "city")], "capital_2": [("city", "state")],
    "high_point_1": [("state", "place"), ("country", "place")],
    "high_point_2": [("place", "state"), ("place", "country")],
    "low_point_1": [("state", "place"), ("country", "place")],
    "low_point_2": [("place", "state"), ("place", "country")],
    "higher_2": [("place", "place")], "lower_2": [("place", "place")], "longer": [("river", "river")],
    "elevation_2": [("number", "place")],
}

# Attributes: entity -> number, by the entity types that have them.
ATTRIBUTES = {"population_1": ("state", "city", "country"), "area_1": ("state", "lake", "country"),
              "density_1": ("state",), "elevation_1": ("place",), "len": ("river",),
              "size": ("state", "city", "river", "place", "lake", "number")}

# Superlatives over a set: the attribute that gives the key they rank by, and whether the max or the min wins.
SUPERLATIVES = {"largest": ("size", max), "smallest": ("size", min), "highest": ("elevation_1", max),
                "lowest": ("elevation_1", min), "longest": ("len", max), "shortest": ("len", min)}
MEASURE_SUPERLATIVES = {"largest_one": max, "smallest_one": min}  # largest_one ( population_1 ( X ) ) -> in X
COUNT_SUPERLATIVES = {"most": max, "fewest": min}  # most ( state ( loc_1 ( city ( all ) ) ) )

# Overloads the gold programs need although they denote nothing in geobase (see the module docstring).
LAX_OVERLOADS = {
    "capital": [(("place",), "city")],   # state ( loc_1 ( capital ( highest ( place ( all ) ) ) ) )
    "major": [(("lake",), "lake")],      # major ( lake ( loc_2 ( countryid ( 'usa' ) ) ) )
    "loc_2": [(("city",), "place")],     # highest ( place ( loc_2 ( cityid ( 'san francisco', _ ) ) ) )
    "traverse_2": [(("city",), "river")],  # river ( traverse_2 ( cityid ( 'austin', 'tx' ) ) )
    "next_to_2": [(("river",), "state")],  # state ( next_to_2 ( river ( riverid ( 'missouri' ) ) ) )
    "area_1": [(("city",), "number")],   # area_1 ( cityid ( 'seattle', _ ) )
    "density_1": [(("city",), "number"), (("country",), "number")],  # density_1 ( countryid ( 'usa' ) )
}


def _signatures() -> dict[str, tuple[tuple[tuple[str, ...], str], ...]]:
    signatures: dict[str, list] = {"answer": [((t,), t) for t in VALUE_TYPES]}
    for kind, types in KINDS.items():
        signatures[kind] = [((t,), t) for t in types] + [((ALL,), types[0])]
    for relation, pairs in RELATIONS.items():
        signatures[relation] = [((a,), r) for a, r in pairs]
    for attribute, types in ATTRIBUTES.items():
        signatures[attribute] = [((t,), "number") for t in types]
    for superlative, (key, _) in SUPERLATIVES.items():
        signatures[superlative] = [((t,), t) for t in ATTRIBUTES[key]]
    for superlative in MEASURE_SUPERLATIVES:  # the argument is attribute ( X ); t is the type of X
        signatures[superlative] = [((t,), t) for t in ENTITY_TYPES]
    for superlative in COUNT_SUPERLATIVES:  # the argument is kinds ( relation ( Y ) ); t is its type
        signatures[superlative] = [((t,), t) for t in ENTITY_TYPES]
    signatures["count"] = [((t,), "number") for t in ENTITY_TYPES]  # count ( 3 ) is ill-typed
    signatures["sum"] = [(("number",), "number")]
    for binary in ("exclude", "intersection"):
        signatures[binary] = [((t, t), t) for t in ENTITY_TYPES]
    for constant, entity_type in CONSTANTS.items():
        signatures[constant] = [(("name", "name") if constant == "cityid" else ("name",), entity_type)]
    for predicate, overloads in LAX_OVERLOADS.items():
        signatures[predicate] += overloads
    return {p: tuple(o) for p, o in signatures.items()}


# Every predicate: (argument types, result type) overloads. Exposed for the span parser's composition.
FUNQL_SIGNATURES = _signatures()
ARITY = {p: len(overloads[0][0]) for p, overloads in FUNQL_SIGNATURES.items()}

_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def _is_quoted(leaf: Tree) -> bool:
    return isinstance(leaf, str) and len(leaf) >= 2 and leaf[0] == leaf[-1] == "'"


def _applies(tree: Tree, predicates: Mapping | Iterable) -> bool:
    """Whether ``tree`` is an application of one of ``predicates``."""
    return isinstance(tree, tuple) and tree[0] in predicates


def _fmt(types: Iterable[str]) -> str:
    return "|".join(sorted(types))


def type_of(tree: Tree) -> Type:
    """The set of base types ``tree`` may denote; ``FormalismError`` naming the predicate and argument if ill-typed.

    ``tree`` is a parsed program (``FunQL().parse``) or any sub-program.
    """
    if isinstance(tree, str):
        return _leaf_type(tree)
    head, *args = tree
    _check_application(tree)
    if head in CONSTANTS:
        return frozenset({CONSTANTS[head]})
    if head in MEASURE_SUPERLATIVES:
        return _measure_superlative_type(head, args[0])
    if head in COUNT_SUPERLATIVES:
        _relation_under_kinds(head, args[0])
    return _apply_overloads(head, [type_of(a) for a in args], args)


def _leaf_type(leaf: str) -> Type:
    if leaf == ALL:
        return frozenset({ALL})
    if _NUMBER.fullmatch(leaf):
        return frozenset({"number"})
    if leaf in FUNQL_SIGNATURES:
        raise FormalismError(f"funql: predicate {leaf!r} needs {ARITY[leaf]} argument(s)")
    if _is_quoted(leaf) or leaf == ANY_STATE:
        raise FormalismError(f"funql: entity name {leaf} outside an entity constant ({', '.join(CONSTANTS)})")
    raise FormalismError(f"funql: unknown predicate {leaf!r}")


def _check_application(tree: tuple) -> None:
    """A known predicate with its number of arguments; a constant's arguments are quoted names."""
    head, *args = tree
    if head not in FUNQL_SIGNATURES:
        raise FormalismError(f"funql: unknown predicate {head!r}")
    if len(args) != ARITY[head]:
        raise FormalismError(f"funql: {head} takes {ARITY[head]} argument(s), found {len(args)} in "
                             f"{unparse(tree)!r}")
    if head in CONSTANTS:
        for i, arg in enumerate(args):
            if not (_is_quoted(arg) or (head == "cityid" and i == 1 and arg == ANY_STATE)):
                raise FormalismError(f"funql: {head} argument {i + 1} must be a quoted name, found "
                                     f"{unparse(arg)!r}")


def _apply_overloads(head: str, arg_types: list[Type], args: list[Tree]) -> Type:
    overloads = FUNQL_SIGNATURES[head]
    for i, (arg_type, arg) in enumerate(zip(arg_types, args)):
        accepted = {params[i] for params, _ in overloads}
        if not arg_type & accepted:
            raise FormalismError(f"funql: {head} cannot take argument {i + 1} {unparse(arg)!r} of type "
                                 f"{_fmt(arg_type)}; it takes {_fmt(accepted)}")
    result = frozenset(r for params, r in overloads if all(p in t for p, t in zip(params, arg_types)))
    if not result:
        raise FormalismError(f"funql: {head} cannot take arguments of types "
                             f"({', '.join(_fmt(t) for t in arg_types)}) together")
    return result


def _measure_superlative_type(head: str, arg: Tree) -> Type:
    """largest_one ( attribute ( X ) ): the type of X that has the attribute."""
    if not _applies(arg, ATTRIBUTES):
        raise FormalismError(f"funql: {head} takes an attribute ({', '.join(ATTRIBUTES)}) applied to a set, "
                             f"found {unparse(arg)!r}")
    type_of(arg)
    measured = type_of(arg[1]) & frozenset(t for (t,), _ in FUNQL_SIGNATURES[arg[0]])
    return _apply_overloads(head, [measured], [arg[1]])


def _relation_under_kinds(head: str, arg: Tree) -> tuple[list[str], str, Tree]:
    """most/fewest's argument ``kind ( ... kind ( relation ( Y ) ) )`` as ([kind, ...], relation, Y)."""
    node, kinds = arg, []
    while _applies(node, KINDS):
        kinds.append(node[0])
        node = node[1]
    if not _applies(node, RELATIONS):
        raise FormalismError(f"funql: {head} takes a relation ({', '.join(RELATIONS)}) under kind predicates, "
                             f"found {unparse(arg)!r}")
    return kinds, node[0], node[1]


def compose(function: str, *arguments: Tree) -> Tree:
    """``function ( arguments )`` as a tree, if it type-checks (``FormalismError`` otherwise).

    For bottom-up composition (the span parser's join): ``compose('next_to_1', ('stateid', "'utah'"))``.
    """
    tree = (function, *arguments)
    type_of(tree)
    return tree


# ----- text ------------------------------------------------------------------------------------------------------
def unparse(tree: Tree) -> str:
    """Program text in the data's spacing: ``f ( a , g ( b ) )`` and ``cityid ( 'austin', 'tx' )``."""
    if isinstance(tree, str):
        return tree
    head, *args = tree
    separator = ", " if head in CONSTANTS else " , "
    return f"{head} ( {separator.join(unparse(a) for a in args)} )"


# ----- execution -------------------------------------------------------------------------------------------------
# higher_2 ( X ): the entities whose elevation is above that of some element of X; by value table and order.
COMPARISONS = {"higher_2": ("elevation", operator.gt), "lower_2": ("elevation", operator.lt),
               "longer": ("length", operator.gt)}


class _Executor:
    """Evaluates a type-checked tree over a GeoBase; denotations are frozensets (see the module docstring)."""

    def __init__(self, world: GeoBase):
        self.world = w = world
        self.names = {kind: _group(members, key=lambda e: e[1]) for kind, members in w.by_kind.items()}
        self.members = {kind: frozenset(w.by_kind[kind]) for kind in ENTITY_TYPES}  # kind ( all )
        self.members["capital"] = frozenset(w.capital_of.values())
        self.members["mountain"] = frozenset().union(*w.high_point.values())  # see the module docstring
        self.members["major"] = frozenset({c for c in w.by_kind["city"] if w.population.get(c, 0) > 150_000}
                                          | {r for r in w.by_kind["river"] if w.length[r] > 750})
        capitals = {state: {city} for state, city in w.capital_of.items()}
        forward = {"loc": w.located_in, "next_to": w.borders, "traverse": w.traverses, "capital": capitals,
                   "high_point": w.high_point, "low_point": w.low_point}
        self.related: dict[str, dict] = {}  # loc_1: x -> where x is; loc_2: x -> what is in x; ...
        for name, mapping in forward.items():
            self.related[f"{name}_1"] = mapping
            inverse_pairs = ((target, source) for source, targets in mapping.items() for target in targets)
            self.related[f"{name}_2"] = _group(inverse_pairs, key=lambda pair: pair[0], value=lambda pair: pair[1])
        self.related["elevation_2"] = _group(w.elevation, key=w.elevation.get)
        density = {e: w.population[e] / a for e, a in w.area.items() if e in w.population and a}
        size = {**{c: p for c, p in w.population.items() if c[0] == "city"}, **w.length, **w.elevation,
                **{e: a for e, a in w.area.items() if e[0] in ("state", "lake")}}
        self.attribute = {"population_1": w.population, "area_1": w.area, "density_1": density,
                          "elevation_1": w.elevation, "len": w.length, "size": size}

    def run(self, tree: Tree) -> frozenset:
        if isinstance(tree, str):  # a number literal (``all`` is read by the kind predicates)
            return frozenset({float(tree)})
        head, *args = tree
        if head in CONSTANTS:
            return self.constant(head, args)
        if head == "answer":
            return self.run(args[0])
        if head in KINDS:
            return self.kind(head, args[0])
        if head in RELATIONS:
            return frozenset(y for x in self.run(args[0]) for y in self.relate(head, x))
        if head in ATTRIBUTES:
            return frozenset(self.measure(tree).values())
        if head in SUPERLATIVES:
            key, pick = SUPERLATIVES[head]
            return _best(self.measure((key, args[0])), pick)
        if head in MEASURE_SUPERLATIVES:
            return _best(self.measure(args[0]), MEASURE_SUPERLATIVES[head])
        if head in COUNT_SUPERLATIVES:
            return self.most(head, args[0])
        if head == "count":
            return frozenset({float(len(self.run(args[0])))})
        if head == "sum":  # over the entities measured, so that two states of equal population both count
            values = self.measure(args[0]).values() if _applies(args[0], ATTRIBUTES) else self.run(args[0])
            return frozenset({float(sum(values))})
        if head == "exclude":
            return self.run(args[0]) - self.run(args[1])
        if head == "intersection":
            return self.run(args[0]) & self.run(args[1])
        raise FormalismError(f"funql: no semantics for predicate {head!r}")  # unreachable after type_of

    def relate(self, relation: str, x) -> Iterable:
        """The entities ``relation ( x )`` gives for one element x."""
        if relation in COMPARISONS:
            table, better = COMPARISONS[relation]
            values = getattr(self.world, table)
            return [e for e, v in values.items() if better(v, values[x])] if x in values else []
        return self.related[relation].get(x, ())

    def measure(self, tree: Tree) -> dict:
        """attribute ( X ) as {element of X: its value}, skipping elements without the attribute."""
        attribute, values = tree[0], self.attribute[tree[0]]
        measured = {}
        for x in self.run(tree[1]):
            if isinstance(x, float):  # a number's size is itself; numbers have no other attribute
                if attribute == "size":
                    measured[x] = x
            elif x in values:
                measured[x] = values[x]
        return measured

    def constant(self, head: str, args: list[str]) -> frozenset:
        """The entities a constant names. Its name must be one geobase has for the type (and a cityid's state
        a known abbreviation); a known city name with a state geobase lists no such city in denotes nothing."""
        entity_type = CONSTANTS[head]
        name = args[0][1:-1]
        named = self.names[entity_type].get(name)
        if named is None:
            raise FormalismError(f"funql: unknown {entity_type} {name!r} in {unparse((head, *args))!r}")
        if head != "cityid" or args[1] == ANY_STATE:
            return named
        abbreviation = args[1][1:-1]
        if abbreviation not in self.world.state_of_abbreviation:
            raise FormalismError(f"funql: unknown state abbreviation {abbreviation!r} in {unparse((head, *args))!r}")
        return frozenset(city for city in named if city[2] == abbreviation)

    def kind(self, head: str, arg: Tree) -> frozenset:
        members = self.members[head]
        return members if arg == ALL else members & self.run(arg)

    def most(self, head: str, arg: Tree) -> frozenset:
        """The entities of the kinds related to the most (fewest) elements of Y, where arg = kinds ( relation ( Y ) ).

        Every entity of the kinds (without one, of the relation's result types) is a candidate, so one related to
        no element of Y counts 0: the state that borders the fewest states is alaska or hawaii (no neighbours)."""
        kinds, relation, inner = _relation_under_kinds(head, arg)
        candidates = frozenset().union(*(self.members[t] for t in type_of(arg)))
        for kind in kinds:
            candidates &= self.members[kind]
        related_count = dict.fromkeys(candidates, 0)
        for y in self.run(inner):
            for candidate in candidates.intersection(self.relate(relation, y)):
                related_count[candidate] += 1
        return _best(related_count, COUNT_SUPERLATIVES[head])


def _group(items: Iterable, key: Callable, value: Callable = lambda item: item) -> dict:
    """{key(item): frozenset of value(item)} over items."""
    groups: dict = {}
    for item in items:
        groups.setdefault(key(item), set()).add(value(item))
    return {k: frozenset(v) for k, v in groups.items()}


def _best(keyed: Mapping, pick) -> frozenset:
    """The elements whose key is the max (min); all of them on a tie."""
    if not keyed:
        return frozenset()
    best = pick(keyed.values())
    return frozenset(x for x, key in keyed.items() if key == best)


# ----- the formalism -------------------------------------------------------------------------------------------
class FunQL(Formalism):
    """GeoQuery FunQL (module docstring): parse to nested tuples, type-check, execute over ``geobase.pl``."""

    name = "funql"
    executable = True
    needs_world = True
    relative_tolerance = 1e-6  # same_denotation: numbers equal within this relative difference

    def tokenize(self, program: str) -> list[str]:
        return tokenize_brackets(program, self.name)

    def parse(self, program: str) -> Tree:
        """Nested tuples ``('answer', ('stateid', "'texas'"))``; checks predicates, arities and constants."""
        try:
            tree = parse_brackets(program, self.name)
            _check_structure(tree)
        except RecursionError:
            raise FormalismError(f"funql: program nested too deeply ({len(program)} characters)") from None
        return tree

    def unparse(self, structure: Tree) -> str:
        try:
            return unparse(structure)
        except RecursionError:
            raise FormalismError("funql: program nested too deeply to unparse") from None
        except (TypeError, ValueError) as e:
            raise FormalismError(f"funql: not a FunQL tree: {structure!r}") from e

    def canonical(self, program: str) -> str:
        """The program in the data's spacing, so spacing differences in predictions do not matter."""
        return self.unparse(self.parse(program))

    def structure(self, program: str) -> list[str]:
        """The predicates (``answer``, ``population_1``, ``stateid``); constants left out."""
        return term_predicates_and_template(program)[0]

    def template(self, program: str) -> str:
        """``answer ( population_1 ( stateid ( VALUE ) ) )``: every constant masked."""
        return term_predicates_and_template(program)[1]

    def type_of(self, program: str | Tree) -> Type:
        tree = self.parse(program) if isinstance(program, str) else program
        try:
            return type_of(tree)
        except RecursionError:
            raise FormalismError("funql: program nested too deeply to type-check") from None

    def load_world(self, path: str | Path) -> GeoBase:
        """The GeoQuery database from ``geobase.pl`` (or a folder that holds it)."""
        path = Path(path)
        if path.is_dir():
            path = path / "geobase.pl"
        if not path.is_file():
            raise FormalismError(f"funql: no geobase.pl at {path}")
        return GeoBase.from_file(path)

    def execute(self, program: str, world: GeoBase | None = None, meta: Mapping[str, Any] | None = None) -> frozenset:
        if not isinstance(world, GeoBase):
            raise FormalismError("funql: execute needs the world from load_world(geobase.pl)")
        tree = self.parse(program)
        try:
            if type_of(tree) == {ALL}:
                raise FormalismError(f"funql: {ALL!r} is an argument of the kind predicates, not a program")
            return _executor(world).run(tree)
        except RecursionError:
            raise FormalismError("funql: program nested too deeply to execute") from None

    def same_denotation(self, a: Any, b: Any) -> bool:
        """Set equality; numbers match within ``relative_tolerance``."""
        if not isinstance(a, (set, frozenset)) or not isinstance(b, (set, frozenset)):
            return a == b
        numbers_a, numbers_b = (sorted(x for x in d if isinstance(x, (int, float))) for d in (a, b))
        entities_a, entities_b = (
            {x for x in d if not isinstance(x, (int, float))} for d in (a, b))
        return entities_a == entities_b and len(numbers_a) == len(numbers_b) and all(
            math.isclose(x, y, rel_tol=self.relative_tolerance, abs_tol=1e-9) for x, y in zip(numbers_a, numbers_b))


def _check_structure(tree: Tree) -> None:
    """Known predicates with their arities, quoted names only inside constants, leaves ``all`` or numbers."""
    if isinstance(tree, str):
        _leaf_type(tree)
        return
    _check_application(tree)
    if tree[0] not in CONSTANTS:
        for arg in tree[1:]:
            _check_structure(arg)


_EXECUTORS: "weakref.WeakKeyDictionary[GeoBase, _Executor]" = weakref.WeakKeyDictionary()


def _executor(world: GeoBase) -> _Executor:
    """The executor of a world (its indexes), built on first use and dropped with the world."""
    if world not in _EXECUTORS:
        _EXECUTORS[world] = _Executor(world)
    return _EXECUTORS[world]
