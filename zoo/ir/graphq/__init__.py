"""GraphQ IR for CFQ (Nie et al. 2022, "GraphQ IR: Unifying the Semantic Parsing of Graph Query Languages with One
Intermediate Representation"): a typed, natural-language-like query language that a compiler turns into SPARQL
and into Cypher without loss.

The design principles of §2.2, applied to CFQ's conjunctive SPARQL queries:

* **Subject-verb-object clauses in English order, no variables, no SPARQL keywords** (§2.2.1). A variable becomes an
  *entity set* described by its concepts and relative clauses ("that ..."); the question words are ``what``
  (SELECT DISTINCT) and ``whether`` (CFQ's ``count ( * )``, a yes/no question); clauses join with ``and``; the
  node being described is the subject of ``<R> r </R> y``, the object of ``is <R> r </R> of y``, and different from
  y in ``is not y``.
* **One way to say one thing** (§2.2.2): a query has exactly one IR. The translator orders concepts and clauses by
  a fixed rule, and several relations between the same two nodes share one clause (``<R> a </R> and <R> b </R> y``),
  as English coordinates verbs ("founded and was employed by").
* **Typed terminals and explicit scoping** (§2.2.3): ``<E> entity </E>``, ``<C> concept </C>``, ``<R> relation </R>``,
  and ``<ES> ... </ES>`` around every entity set, so nested clauses compile deterministically. A relation is CFQ's
  property path without the ``ns:`` prefixes (``film.actor.film/film.performance.film``).

Examples (SPARQL, then its IR)::

    SELECT DISTINCT ?x0 WHERE { ?x0 a film.editor . ?x0 film.editor.film M1 . FILTER ( ?x0 != M1 ) }
    what <ES> <C> film.editor </C> that <R> film.editor.film </R> and is not <E> M1 </E> </ES>

    SELECT count ( * ) WHERE { ?x0 a film.producer . M2 film.film.directed_by ?x0 . M2 film.film.directed_by M3 }
    whether <E> M2 </E> <R> film.film.directed_by </R> <E> M3 </E> and <R> film.film.directed_by </R> <ES> <C>
    film.producer </C> </ES>

    SELECT count ( * ) WHERE { ?x0 a film.actor . ?x0 film.actor.film/ns:film.performance.film ?x1 . ?x1 a film.film }
    whether <ES> <C> film.actor </C> that <R> film.actor.film/film.performance.film </R> <ES> <C> film.film </C>
    </ES> </ES>

A yes/no question is a list of statements (``whether ... and whether ...``), each about an entity or an entity
set; a query whose entity sets do not all hang off one entity needs several. The grammar is ``grammar.lark`` (lark's
EBNF; the paper's is ANTLR's), parsed LALR(1).

The compiler (``zoo.ir.graphq.sparql``, ``zoo.ir.graphq.cypher``) works on the tree this module defines:
``parse(text) -> Query`` (the front end), ``unparse(Query) -> text``. SPARQL variables are named breadth-first
(``?x0``, ``?x1``, ...), which is CFQ's own numbering in all but a few dozen queries. An inequality takes the
direction of the relation before it in its clause (every CFQ filter repeats a triple's direction).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Union

from lark import Lark, Token, Transformer, UnexpectedInput

from zoo.ir import IRError


@dataclass(frozen=True)
class Relation:
    """An edge of the clause: the described node is its subject (``reverse`` False) or its object."""

    name: str  # CFQ's property path without ns: (film.actor.film/film.performance.film)
    reverse: bool = False


@dataclass(frozen=True)
class Inequality:
    """``is not``: the described node and the clause's object are different nodes (SPARQL's FILTER !=)."""


Item = Union[Relation, Inequality]


@dataclass(frozen=True)
class Entity:
    name: str  # M0, m_05zppz
    clauses: tuple["Clause", ...] = ()  # only a statement's subject has clauses


@dataclass(frozen=True)
class EntitySet:
    concepts: tuple[str, ...] = ()
    clauses: tuple["Clause", ...] = ()


Node = Union[Entity, EntitySet]


@dataclass(frozen=True)
class TypeClause:
    """``is <C> concept </C>``: the type of an entity (an entity set lists its concepts before its clauses)."""

    concept: str


@dataclass(frozen=True)
class RelationClause:
    items: tuple[Item, ...]
    object: Node


Clause = Union[TypeClause, RelationClause]


@dataclass(frozen=True)
class Query:
    kind: str  # "select" (what ...) or "count" (whether ...)
    statements: tuple[Node, ...]  # select: one entity set, the answer


# ----- front end: text -> tree ---------------------------------------------------------------------------------------

class _ToTree(Transformer):
    def select(self, children):
        return Query("select", (children[0],))

    def count(self, children):
        return Query("count", tuple(c for c in children if not isinstance(c, Token)))

    def entity_statement(self, children):
        return Entity(children[0].name, tuple(children[1:]))

    def entity_set_statement(self, children):
        return children[0]

    def entity_set(self, children):
        concepts = tuple(c for c in children if isinstance(c, str))
        return EntitySet(concepts, tuple(c for c in children if not isinstance(c, str)))

    def type_clause(self, children):
        return TypeClause(children[0])

    def relation_clause(self, children):
        return RelationClause(tuple(children[:-1]), children[-1])

    def forward(self, children):
        return Relation(children[0])

    def reverse(self, children):
        return Relation(children[0], reverse=True)

    def inequality(self, children):
        return Inequality()

    def entity(self, children):
        return Entity(str(children[0]))

    def concept(self, children):
        return str(children[0])

    def relation(self, children):
        return str(children[0])


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark((Path(__file__).parent / "grammar.lark").read_text(), parser="lalr", maybe_placeholders=False)


def _describe(terminal: str) -> str:
    if terminal == "$END":
        return "the end"
    pattern = _parser().get_terminal(terminal).pattern
    if pattern.type == "str":
        return repr(pattern.value)
    return "a name" if terminal == "NAME" else "'and whether'"


def parse(text: str) -> Query:
    """The tree of a GraphQ IR string; ``IRError`` names the column and what the grammar expected there."""
    try:
        return _ToTree().transform(_parser().parse(text))
    except UnexpectedInput as e:
        token, char = getattr(e, "token", None), getattr(e, "char", None)
        if char is not None:  # a character that starts no token
            column, found = e.column, repr(char)
        elif token is None or token.type == "$END":
            column, found = len(text) + 1, "the end"
        else:
            column, found = e.column, repr(str(token))
        expected = getattr(e, "expected", None) or getattr(e, "allowed", None) or ()
        wanted = ", ".join(sorted(_describe(t) for t in expected)) or "a token of the grammar"
        raise IRError(f"graphq: at column {column} found {found}; expected one of {wanted}, in "
                      f"{text if len(text) <= 200 else text[:200] + '...'!r}") from None


# ----- tree -> text --------------------------------------------------------------------------------------------------

def unparse(query: Query) -> str:
    if query.kind == "select":
        return "what " + _node(query.statements[0])
    return "whether " + " and whether ".join(_statement(s) for s in query.statements)


def _statement(node: Node) -> str:
    if isinstance(node, Entity):
        return f"<E> {node.name} </E> " + " and ".join(_clause(c) for c in node.clauses)
    return _node(node)


def _node(node: Node) -> str:
    if isinstance(node, Entity):
        return f"<E> {node.name} </E>"
    words = ["<ES>", *(f"<C> {c} </C>" for c in node.concepts)]
    if node.clauses:
        words += ["that", " and ".join(_clause(c) for c in node.clauses)]
    return " ".join(words + ["</ES>"])


def _clause(clause: Clause) -> str:
    if isinstance(clause, TypeClause):
        return f"is <C> {clause.concept} </C>"
    return " and ".join(map(_item, clause.items)) + " " + _node(clause.object)


def _item(item: Item) -> str:
    if isinstance(item, Inequality):
        return "is not"
    return f"is <R> {item.name} </R> of" if item.reverse else f"<R> {item.name} </R>"
