"""The Cypher back end of the GraphQ IR compiler: the conjunctive query an IR states (``sparql.lower``) as a Cypher
query over a property graph with CFQ's data.

The graph (what ``zoo.ir.graphq.execution`` loads into ladybug): one node table ``Entity(id, types)``, where ``id``
is the CFQ term (``M0``, ``m_05zppz``) and ``types`` the list of its Freebase types, and one relationship table
per Freebase property, named by ``label`` (``film.actor.film`` -> ``film__actor__film``: table names cannot hold
dots).

Each triple becomes a pattern: a property path ``a/b`` a two-hop pattern through a node of its own (``h0``),
``^a`` an edge the other way, ``a|b`` an alternation ``[:a|b]``. An alternation of paths longer than one step has
no pattern form; it becomes ``EXISTS { MATCH ... } OR EXISTS { MATCH ... }``. Each triple has its own MATCH clause
(Cypher's rule that one MATCH uses an edge once would drop answers SPARQL keeps), with ``WITH *`` between them.
Types are ``'t' IN x.types``, filters ``x.id <> y.id``. A select query returns ``DISTINCT x0.id``, a yes/no
question ``count(*) > 0``::

    SELECT DISTINCT ?x0 WHERE { ?x0 a film.editor . ?x0 film.editor.film M1 . FILTER ( ?x0 != M1 ) }

    MATCH (x0:Entity), (e0:Entity {id: 'M1'})
    WITH *
    MATCH (x0)-[:film__editor__film]->(e0)
    WHERE 'film.editor' IN x0.types AND x0.id <> e0.id
    RETURN DISTINCT x0.id
"""
from __future__ import annotations

import itertools
from typing import Iterator

from zoo.formalisms.sparql import NODE_VARIABLE, TYPE_RELATION, CfqSparql, Filter, SparqlQuery, term_kind
from zoo.ir.graphq import Query
from zoo.ir.graphq.sparql import ir_relation, lower


def label(step: str) -> str:
    """The relationship table of a Freebase property."""
    return step.replace(".", "__")


def path_alternatives(relation: str) -> list[list[tuple[str, bool]]]:
    """A CFQ property path as alternatives of sequences of (property, backwards) steps."""
    return [[(step.lstrip("^"), step.startswith("^")) for step in sequence.split("/")]
            for sequence in ir_relation(relation).split("|")]


def to_cypher(query: Query) -> str:
    return cypher_of(lower(query))


def sparql_to_cypher(program: str) -> str:
    return cypher_of(CfqSparql().parse(program))


def cypher_of(query: SparqlQuery) -> str:
    names: dict[str, str] = {}  # CFQ term -> Cypher variable: ?x0 -> x0, entities e0, e1, ... as they come

    def node(term: str) -> str:
        if term not in names:
            variable = term_kind(term) == NODE_VARIABLE
            names[term] = term[1:] if variable else f"e{sum(term_kind(t) != NODE_VARIABLE for t in names)}"
        return names[term]

    matches, conditions = [], []
    hops = (f"h{i}" for i in itertools.count())
    for conjunct in query.conjuncts:
        if isinstance(conjunct, Filter):
            conditions.append(f"{node(conjunct.left)}.id <> {node(conjunct.right)}.id")
        elif conjunct.relation == TYPE_RELATION:
            conditions.append(f"'{conjunct.object}' IN {node(conjunct.subject)}.types")
        else:
            subject, object_ = node(conjunct.subject), node(conjunct.object)
            alternatives = path_alternatives(conjunct.relation)
            if len(alternatives) == 1:
                matches.append(f"MATCH {_chain(subject, alternatives[0], object_, hops)}")
            elif all(len(a) == 1 and a[0][1] == alternatives[0][0][1] for a in alternatives):
                edge = "|".join(label(a[0][0]) for a in alternatives)
                steps = [(edge, alternatives[0][0][1])]
                matches.append(f"MATCH {_chain(subject, steps, object_, hops, labelled=True)}")
            else:
                conditions.append("(" + " OR ".join(f"EXISTS {{ MATCH {_chain(subject, a, object_, hops)} }}"
                                                     for a in alternatives) + ")")
    declared = ", ".join(f"({name}:Entity)" if term_kind(term) == NODE_VARIABLE
                         else f"({name}:Entity {{id: '{term}'}})" for term, name in names.items())
    lines = [f"MATCH {declared}"]
    for match in matches:
        # WITH * makes ladybug (0.22) join the patterns one after another: planning four or more two-hop MATCH
        # clauses over shared nodes together, it lost answers (found by python -m zoo.ir.graphq execute)
        lines += ["WITH *", match]
    if conditions:
        lines.append("WHERE " + " AND ".join(conditions))
    lines.append("RETURN DISTINCT x0.id" if query.query_type == "select" else "RETURN count(*) > 0")
    return "\n".join(lines)


def _chain(start: str, steps: list[tuple[str, bool]], end: str, hops: Iterator[str], labelled: bool = False) -> str:
    pattern = f"({start})"
    for i, (step, backwards) in enumerate(steps):
        edge = f"[:{step if labelled else label(step)}]"
        # each intermediate node gets its own name: ladybug 0.22 takes unnamed ones in several MATCH clauses for one
        target = f"({end})" if i == len(steps) - 1 else f"({next(hops)}:Entity)"
        pattern += f"<-{edge}-{target}" if backwards else f"-{edge}->{target}"
    return pattern
