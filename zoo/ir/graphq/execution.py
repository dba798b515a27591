"""Execution equivalence: a CFQ query and its compiled forms give the same answers on real query engines.

CFQ's Freebase subset is not in the data mirror, so the graphs are made up per query (``random_graphs``):

* ``planted``: every variable gets a node of its own and every conjunct is made true (a random alternative of each
  property path, fresh intermediate nodes for its steps), then random distractor facts over the query's own
  properties and types are added among those nodes and a few more;
* ``merged``: the same, built with one variable sharing the node of another term, which breaks the query's
  inequalities or creates the self-loops that distinguish them;
* ``noise``: random facts over the query's properties and types among a dozen nodes, the query's entities included.

The engines run in process: pyoxigraph (SPARQL 1.1) and ladybug (Cypher; the maintained fork of Kùzu), each query
under a time limit (ladybug's own; pyoxigraph has none, so its query runs in a worker thread that is abandoned at the
limit). An answer is the set of ids a select query returns, or whether a yes/no question's count is above zero.
"""
from __future__ import annotations

import concurrent.futures
import random
from dataclasses import dataclass, field

from zoo.formalisms.sparql import NODE_TYPE, NODE_VARIABLE, TYPE_RELATION, Filter, SparqlQuery, term_kind
from zoo.ir.graphq.cypher import label, path_alternatives

NS = "http://rdf.freebase.com/ns/"
Answer = frozenset | bool


@dataclass
class Graph:
    kind: str  # planted, merged, noise
    types: dict[str, set[str]] = field(default_factory=dict)  # node id -> Freebase types
    edges: set[tuple[str, str, str]] = field(default_factory=set)  # (subject id, property, object id)

    def node(self, name: str) -> str:
        self.types.setdefault(name, set())
        return name

    def add(self, subject: str, step: str, object_: str) -> None:
        self.edges.add((self.node(subject), step, self.node(object_)))

    def properties(self) -> set[str]:
        return {step for _, step, _ in self.edges}


def executable_sparql(query: SparqlQuery) -> str:
    """CFQ's SPARQL as standard SPARQL 1.1: full IRIs under ``NS``, ``count ( * )`` as ``COUNT(*)``."""
    def term(t: str) -> str:
        return t if term_kind(t) == NODE_VARIABLE else f"<{NS}{t}>"

    def path(relation: str) -> str:
        return "|".join("/".join(("^" if backwards else "") + term(step) for step, backwards in sequence)
                        for sequence in path_alternatives(relation))

    conjuncts = []
    for c in query.conjuncts:
        if isinstance(c, Filter):
            conjuncts.append(f"FILTER ( {term(c.left)} != {term(c.right)} )")
        elif c.relation == TYPE_RELATION:
            conjuncts.append(f"{term(c.subject)} a {term(c.object)}")
        else:
            conjuncts.append(f"{term(c.subject)} {path(c.relation)} {term(c.object)}")
    head = f"SELECT DISTINCT {query.projection}" if query.query_type == "select" else "SELECT (COUNT(*) AS ?count)"
    return f"{head} WHERE {{ {' . '.join(conjuncts)} }}"


def random_graphs(query: SparqlQuery, rng: random.Random, noise: int = 2) -> list[Graph]:
    """A planted graph, a merged one (when the query has two terms to merge) and ``noise`` random ones."""
    terms = sorted({t for c in query.conjuncts for t in c.ends if term_kind(t) != NODE_TYPE})
    variables = [t for t in terms if term_kind(t) == NODE_VARIABLE]
    entities = [t for t in terms if term_kind(t) != NODE_VARIABLE]
    graphs = [_planted(query, {v: f"v{i}" for i, v in enumerate(variables)}, entities, rng, "planted")]
    if variables and len(terms) > 1:
        victim = rng.choice(variables)
        target = rng.choice([t for t in terms if t != victim])
        places = {v: f"v{i}" for i, v in enumerate(variables)}
        places[victim] = places.get(target, target)
        graphs.append(_planted(query, places, entities, rng, "merged"))
    properties = sorted(query_properties(query))
    types = sorted({c.object for c in query.triples if c.relation == TYPE_RELATION})
    for _ in range(noise):
        graph = Graph("noise")
        nodes = entities + [f"n{i}" for i in range(12 - min(len(entities), 6))]
        for node in nodes:
            graph.node(node)
        _add_noise(graph, nodes, properties, types, rng, facts=4 * len(nodes))
        graphs.append(graph)
    return graphs


def query_properties(query: SparqlQuery) -> set[str]:
    """The Freebase properties the steps of the query's property paths name (a graph database needs a table each)."""
    return {step for c in query.triples if c.relation != TYPE_RELATION
            for sequence in path_alternatives(c.relation) for step, _ in sequence}


def _planted(query: SparqlQuery, places: dict[str, str], entities: list[str], rng: random.Random,
             kind: str) -> Graph:
    graph, fresh = Graph(kind), 0
    for entity in entities:
        graph.node(entity)

    def place(term: str) -> str:
        return graph.node(places.get(term, term))

    for c in query.triples:
        if c.relation == TYPE_RELATION:
            graph.types[place(c.subject)].add(c.object)
            continue
        steps = rng.choice(path_alternatives(c.relation))
        here = place(c.subject)
        for i, (step, backwards) in enumerate(steps):
            there = place(c.object) if i == len(steps) - 1 else f"p{fresh}"
            fresh += i < len(steps) - 1
            graph.add(there, step, here) if backwards else graph.add(here, step, there)
            here = there
    properties = sorted(graph.properties())
    types = sorted({t for ts in graph.types.values() for t in ts})
    nodes = sorted(graph.types) + [f"d{i}" for i in range(3)]
    _add_noise(graph, nodes, properties, types, rng, facts=len(graph.edges) + 2)
    return graph


def _add_noise(graph: Graph, nodes: list[str], properties: list[str], types: list[str], rng: random.Random,
               facts: int) -> None:
    for _ in range(facts):
        if types and rng.random() < 0.25:
            graph.types[graph.node(rng.choice(nodes))].add(rng.choice(types))
        elif properties:
            graph.add(rng.choice(nodes), rng.choice(properties), rng.choice(nodes))


class QueryTimeout(RuntimeError):
    pass


class Oxigraph:
    """pyoxigraph's in-memory store, one graph at a time."""

    def __init__(self, timeout_s: float):
        import pyoxigraph

        self.pyoxigraph, self.timeout_s = pyoxigraph, timeout_s
        self.store = pyoxigraph.Store()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    def load(self, graph: Graph) -> None:
        ox = self.pyoxigraph
        self.store.clear()
        quads = [ox.Quad(ox.NamedNode(NS + s), ox.NamedNode(NS + p), ox.NamedNode(NS + o)) for s, p, o in graph.edges]
        rdf_type = ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
        quads += [ox.Quad(ox.NamedNode(NS + node), rdf_type, ox.NamedNode(NS + t))
                  for node, types in graph.types.items() for t in types]
        self.store.extend(quads)

    def run(self, query: SparqlQuery) -> Answer:
        text = executable_sparql(query)

        def evaluate():
            rows = list(self.store.query(text))
            if query.query_type == "count":
                return int(rows[0]["count"].value) > 0
            return frozenset(row[0].value.removeprefix(NS) for row in rows)

        future = self.pool.submit(evaluate)
        try:
            return future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            self.pool.shutdown(wait=False)  # the stuck query keeps its thread; later queries get a new one
            self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
            raise QueryTimeout(f"pyoxigraph: no answer within {self.timeout_s} s") from None


class Ladybug:
    """ladybug's in-memory database, one graph at a time; a relationship table per property, made when needed."""

    def __init__(self, timeout_s: float):
        import ladybug

        self.database = ladybug.Database(":memory:")
        self.connection = ladybug.Connection(self.database)
        self.connection.set_max_threads_for_exec(1)
        self.connection.set_query_timeout(int(timeout_s * 1000))
        self.connection.execute("CREATE NODE TABLE Entity(id STRING, types STRING[], PRIMARY KEY(id))")
        self.tables: set[str] = set()

    def load(self, graph: Graph, properties: set[str]) -> None:
        """``graph``, with a (possibly empty) table for every one of ``properties`` the query names."""
        for name in sorted((properties | graph.properties()) - self.tables):
            self.connection.execute(f"CREATE REL TABLE {label(name)}(FROM Entity TO Entity)")
            self.tables.add(name)
        self.connection.execute("MATCH (n:Entity) DETACH DELETE n")
        for node, types in graph.types.items():
            self.connection.execute("CREATE (:Entity {id: $id, types: $types})", {"id": node, "types": sorted(types)})
        for subject, step, object_ in sorted(graph.edges):
            self.connection.execute(f"MATCH (a:Entity {{id: $s}}), (b:Entity {{id: $o}}) "
                                    f"CREATE (a)-[:{label(step)}]->(b)", {"s": subject, "o": object_})

    def run(self, cypher: str, query_type: str) -> Answer:
        try:
            result = self.connection.execute(cypher)
        except RuntimeError as e:
            if "interrupted" in str(e).lower() or "timeout" in str(e).lower():
                raise QueryTimeout(f"ladybug: {e}") from None
            raise
        rows = []
        while result.has_next():
            rows.append(result.get_next())
        return bool(rows[0][0]) if query_type == "count" else frozenset(row[0] for row in rows)
