"""GraphQ IR <-> CFQ SPARQL: the back end ``to_sparql`` (tree -> query) and the translator ``from_sparql``.

``from_sparql`` turns the query's conjuncts into a graph whose nodes are its terms: a triple links its subject and
object, a filter its two sides, and the links between one pair of terms form one clause. It walks that graph from
the answer variable (``what``) or, for a yes/no question, from the entity whose walk covers the most conjuncts,
then from further entities until every conjunct is covered (``whether ... and whether ...``). Each variable becomes
one entity set where the walk first meets it; entities are constants, so an entity met again is written again.
Clauses come in a fixed order: types, clauses whose object is an entity, then entity sets in the order of their
variables, so that ``to_sparql``, naming variables breadth-first, restores CFQ's names.

What the IR cannot say, and the translator refuses with the construct named: a cycle through variables (each entity
set is written once, without a name to refer back to it); a FILTER whose direction no relation of its clause
shares (an inequality follows the relations of its direction); a select query whose answer is not ``?x0`` or that
has conjuncts the answer's walk does not reach. CFQ has none of these. What it does have are a few dozen queries
whose variables CFQ numbers neither breadth-first nor in any order the walk can produce; their IR compiles to the
same query with other variable names (``python -m zoo.ir verify --ir graphq --data cfq_mcd1`` counts them).
"""
from __future__ import annotations

from collections import defaultdict, deque

from zoo.formalisms import FormalismError
from zoo.formalisms.sparql import (NODE_VARIABLE, TYPE_RELATION, CfqSparql, Filter, SparqlQuery, Triple,
                                   term_kind)
from zoo.ir import IntermediateRepresentation, IRError, register_ir
from zoo.ir.graphq import (Clause, Entity, EntitySet, Inequality, Item, Node, Query, Relation, RelationClause,
                           TypeClause, parse, unparse)
from zoo.ir.sparql import anonymised

_SPARQL = CfqSparql()


def ir_relation(relation: str) -> str:
    """CFQ's property path without its ``ns:`` prefixes: ``a.b/ns:c.d`` -> ``a.b/c.d``."""
    return relation.replace("ns:", "")


def sparql_relation(name: str) -> str:
    """The inverse of ``ir_relation``: CFQ writes every step with ``ns:`` except a bare first step."""
    steps, separators = [], []
    step = ""
    for char in name:
        if char in "/|":
            steps.append(step)
            separators.append(char)
            step = ""
        else:
            step += char
    steps.append(step)
    written = []
    for i, step in enumerate(steps):
        if step.startswith("^"):
            written.append("^ns:" + step[1:])
        else:
            written.append(step if i == 0 else "ns:" + step)
    return "".join(w + s for w, s in zip(written, separators + [""]))


# ----- back end: tree -> SPARQL --------------------------------------------------------------------------------------

def to_sparql(query: Query) -> str:
    """The CFQ SPARQL text of a GraphQ IR tree, in canonical form."""
    return _SPARQL.canonical(_SPARQL.unparse(lower(query)))


def lower(query: Query) -> SparqlQuery:
    """The conjunctive query a GraphQ IR tree states, as CFQ SPARQL's structure (both back ends start here).
    Entity sets become ``?x0``, ``?x1``, ... in breadth-first order (the statements, then their clauses' objects,
    then theirs), which is how CFQ numbers them."""
    conjuncts: list = []
    names = 0
    queue: deque[tuple[Node, str]] = deque()

    def term(node: Node) -> str:
        nonlocal names
        if isinstance(node, Entity):
            name = node.name
        else:
            name, names = f"?x{names}", names + 1
            conjuncts.extend(Triple(name, TYPE_RELATION, concept) for concept in node.concepts)
        queue.append((node, name))
        return name

    def emit(subject: str, clause: Clause) -> None:
        if isinstance(clause, TypeClause):
            conjuncts.append(Triple(subject, TYPE_RELATION, clause.concept))
            return
        other = term(clause.object)
        backwards = False  # an inequality goes the way of the relation before it (every CFQ filter repeats one)
        for item in clause.items:
            if isinstance(item, Inequality):
                conjuncts.append(Filter(other, subject) if backwards else Filter(subject, other))
                continue
            backwards = item.reverse
            if item.reverse:
                conjuncts.append(Triple(other, sparql_relation(item.name), subject))
            else:
                conjuncts.append(Triple(subject, sparql_relation(item.name), other))

    for statement in query.statements:
        term(statement)
    while queue:
        node, name = queue.popleft()
        for clause in node.clauses:
            emit(name, clause)
    if not conjuncts:
        raise IRError("graphq: the query states nothing (an entity set with no concept and no clause)")
    lowered = SparqlQuery(query.kind, "?x0" if query.kind == "select" else None, tuple(conjuncts))
    try:
        _SPARQL.parse(_SPARQL.unparse(lowered))  # checks every term and relation
    except FormalismError as e:
        raise IRError(f"graphq: the compiled SPARQL is not CFQ SPARQL: {e}") from e
    return lowered


# ----- translator: SPARQL -> tree ------------------------------------------------------------------------------------

# SPARQL constructs outside CFQ's fragment (SELECT DISTINCT or count, triples, FILTER !=), named when refused
UNSUPPORTED = ("ASK", "CONSTRUCT", "DESCRIBE", "OPTIONAL", "UNION", "MINUS", "GRAPH", "SERVICE", "BIND", "VALUES",
               "EXISTS", "GROUP", "HAVING", "ORDER", "LIMIT", "OFFSET", "REGEX", "LANG")


def from_sparql(program: str) -> Query:
    """The GraphQ IR tree of a CFQ SPARQL query; ``IRError`` names what the IR cannot express."""
    unsupported = [token for token in program.split() if token.upper() in UNSUPPORTED]
    if unsupported:
        raise IRError(f"graphq: SPARQL's {unsupported[0]} is outside the fragment GraphQ IR covers here (CFQ's: "
                      "SELECT DISTINCT or count ( * ), triples, FILTER ( a != b ))")
    try:
        query = _SPARQL.canonical_query(_SPARQL.parse(program))
    except FormalismError as e:
        raise IRError(str(e)) from e
    types: dict[str, list[str]] = defaultdict(list)
    links: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))  # term -> other term -> conjuncts
    for conjunct in query.conjuncts:
        if isinstance(conjunct, Triple) and conjunct.relation == TYPE_RELATION:
            types[conjunct.subject].append(conjunct.object)
            continue
        left, right = conjunct.ends
        links[left][right].append(conjunct)
        if left != right:
            links[right][left].append(conjunct)
    if query.query_type == "select":
        if query.projection != "?x0":
            raise IRError(f"graphq: the answer must be ?x0 (CFQ's); this query selects {query.projection}")
        walk = _Walk(types, links)
        trees = [Query("select", (walk.node("?x0", parent=None),))]
        if walk.left_over():
            raise IRError(f"graphq: the answer's walk does not reach {walk.left_over()[0]}")
    else:
        # The SPARQL does not say what the question is about; CFQ numbers variables in the order the question
        # mentions them, from its subject. Subjects are tried in a fixed order: entities whose walk covers the
        # most, then ?x0 ("did a film producer ..."); the first whose variable order matches is the IR.
        first_roots = sorted((t for t in set(links) | set(types) if term_kind(t) != NODE_VARIABLE),
                             key=_Walk(types, links).preference)
        first_roots += ["?x0"] if "?x0" in set(links) | set(types) else []
        trees = (Query("count", tuple(_Walk(types, links).statements(first))) for first in first_roots)
    canonical, first = _SPARQL.unparse(query), None
    for tree in trees:
        if to_sparql(tree) == canonical:
            return tree
        first = first or tree
    # The same query up to the names of its variables: CFQ's numbering follows its question grammar, which is
    # breadth-first in all but a few dozen queries (python -m zoo.ir verify --ir graphq counts them).
    return first


NO_VARIABLE = 10 ** 6


def _variable_index(term: str) -> int:
    return int(term[2:]) if term.startswith("?x") and term[2:].isdigit() else NO_VARIABLE


class _Walk:
    """Walks over one query's term graph, each term's links becoming clauses; ``covered_links`` and
    ``covered_types`` hold what has been written, so that a later walk (the next statement) writes the rest."""

    def __init__(self, types: dict[str, list[str]], links: dict[str, dict[str, list]]):
        self.types, self.links = types, links
        self.covered_links: set[frozenset[str]] = set()
        self.covered_types: set[str] = set()
        self.expanded: set[str] = set()

    def left_over(self) -> list[str]:
        pairs = {frozenset((a, b)) for a in self.links for b in self.links[a]}
        return ([f"the conjuncts between {' and '.join(sorted(p))}" for p in sorted(pairs - self.covered_links,
                                                                                      key=sorted)]
                + [f"the type of {t}" for t in sorted(set(self.types) - self.covered_types)])

    def node(self, term: str, parent: str | None) -> Node:
        """The node of ``term`` with every link except the one to ``parent`` as a clause."""
        is_variable = term_kind(term) == NODE_VARIABLE
        if is_variable:
            if term in self.expanded:
                raise IRError(f"graphq: a cycle through the variables reaches {term} twice; the IR names no "
                              "variables, so an entity set cannot be referred to again")
            self.expanded.add(term)
        self.covered_types.add(term)
        clauses: list[Clause] = []
        if not is_variable:
            clauses += [TypeClause(t) for t in sorted(self.types.get(term, ()))]
        # entities first (by their clause's text), then entity sets in the order of their variables
        entity_clauses, set_clauses = [], []
        for other in self.links.get(term, {}):
            if other == parent or frozenset((term, other)) in self.covered_links:  # or an earlier clause wrote it
                continue
            self.covered_links.add(frozenset((term, other)))
            items = _items(term, other, self.links[term][other])
            if term_kind(other) == NODE_VARIABLE:
                set_clauses.append((_variable_index(other), RelationClause(items, self.node(other, term))))
            else:
                entity_clauses.append(RelationClause(items, Entity(other)))
        entity_clauses.sort(key=lambda c: (c.object.name, str(c.items)))
        clauses += entity_clauses + [clause for _, clause in sorted(set_clauses, key=lambda pair: pair[0])]
        if is_variable:
            return EntitySet(tuple(sorted(self.types.get(term, ()))), tuple(clauses))
        return Entity(term, tuple(clauses))

    def preference(self, term: str) -> tuple:
        """Order of an entity as the next statement's subject: the widest walk, then the one that meets the
        first variable first."""
        first_neighbour = min((_variable_index(o) for o in self.links.get(term, {})
                               if frozenset((term, o)) not in self.covered_links), default=NO_VARIABLE)
        return -self._reach(term), first_neighbour, term

    def statements(self, first: str) -> list[Node]:
        """A yes/no question's statements: a walk from ``first``, then from the entity that covers the most, until
        all is covered; ordered by their first variable."""
        statements, root = [], first
        while True:
            open_terms = [t for t in self.links
                          if any(frozenset((t, o)) not in self.covered_links for o in self.links[t])]
            open_terms += [t for t in self.types if t not in self.covered_types and t not in open_terms]
            if not open_terms:
                return [statement for *_, statement in sorted(statements, key=lambda s: s[:2])]
            entities = [t for t in open_terms if term_kind(t) != NODE_VARIABLE]
            if root is None and entities:
                root = min(entities, key=self.preference)
            elif root is None:  # variables that touch no entity: "whether <ES> ... </ES>" (such a node exists)
                root = min(open_terms, key=_variable_index)
            before = set(self.expanded)
            statement = self.node(root, parent=None)
            first_variable = min(map(_variable_index, self.expanded - before), default=NO_VARIABLE)
            statements.append((first_variable, len(statements), statement))
            root = None

    def _reach(self, root: str) -> int:
        """How many links and types a walk from ``root`` would cover now (it goes on through variables only)."""
        seen, stack, count = {root}, [root], 0
        while stack:
            term = stack.pop()
            count += 0 if term in self.covered_types else len(self.types.get(term, ()))
            for other in self.links.get(term, {}):
                if frozenset((term, other)) in self.covered_links or other in seen:
                    continue
                count += 1
                if term_kind(other) == NODE_VARIABLE:
                    seen.add(other)
                    stack.append(other)
        return count


def _items(term: str, other: str, conjuncts: list) -> tuple[Item, ...]:
    """The items of the clause from ``term`` to ``other``: the relations whose subject is ``term``, then those whose
    object it is; ``is not`` for a filter goes after the relations of its direction (``to_sparql`` reads it so)."""
    relations = {Relation(ir_relation(c.relation), reverse=c.subject != term) for c in conjuncts
                 if isinstance(c, Triple)}
    filters = {c.left != term for c in conjuncts if isinstance(c, Filter)}  # True: FILTER ( other != term )
    items: list[Item] = []
    for backwards in (False, True):
        items += sorted((r for r in relations if r.reverse == backwards), key=lambda r: r.name)
        if backwards in filters:
            if backwards and not any(r.reverse for r in relations):
                raise IRError(f"graphq: FILTER ( {other} != {term} ) shares no relation's direction")
            items.append(Inequality())
    return tuple(items)


@register_ir
class GraphQIR(IntermediateRepresentation):
    """``ir=graphq``: the seq2seq model predicts GraphQ IR; its SPARQL is what gets scored."""

    name, formalism, reversible = "graphq", "cfq_sparql", True

    def forward(self, program: str, utterance: str = "") -> str:
        return unparse(from_sparql(program))

    def inverse(self, ir: str, utterance: str = "") -> str:
        return to_sparql(parse(ir))

    def structure(self, ir: str) -> str:
        # Table 5's: entities (and, in a program, variables) as var; entity sets have no names to anonymise
        return anonymised(ir)
