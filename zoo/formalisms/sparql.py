"""CFQ SPARQL in the preprocessed form of Google's CFQ code (Keysers et al. 2020).

Exact match compares the query with its conjuncts sorted and deduplicated (Herzig et al. 2021, §4.2), so two
queries that differ only in conjunct order or repetition count as equal.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from zoo.formalisms.base import Formalism, FormalismError

_QUERY = re.compile(r"^\s*(SELECT\s+DISTINCT\s+\?x0|SELECT\s+count\s*\(\s*\*\s*\))\s+WHERE\s*\{(.*)\}\s*$", re.S)


@dataclass(frozen=True)
class SparqlQuery:
    head: str  # "SELECT DISTINCT ?x0" or "SELECT count ( * )"
    conjuncts: tuple[str, ...]  # each a whitespace-normalised "s r o" triple or "FILTER ( a != b )"


class CfqSparql(Formalism):
    name = "cfq_sparql"

    def parse(self, program: str) -> SparqlQuery:
        match = _QUERY.match(program)
        if not match:
            raise FormalismError(f"cfq_sparql: expected 'SELECT DISTINCT ?x0 WHERE {{ ... }}' or "
                                 f"'SELECT count ( * ) WHERE {{ ... }}', got {program[:80]!r}")
        head = "SELECT DISTINCT ?x0" if "DISTINCT" in match.group(1) else "SELECT count ( * )"
        conjuncts = tuple(" ".join(c.split()) for c in match.group(2).split(" . "))
        if not conjuncts or any(not c for c in conjuncts):
            raise FormalismError(f"cfq_sparql: empty conjunct in {program[:80]!r}")
        for conjunct in conjuncts:
            n = len(conjunct.split())
            if not (n == 3 or (conjunct.startswith("FILTER (") and n == 6)):
                raise FormalismError(f"cfq_sparql: malformed conjunct {conjunct!r}")
        return SparqlQuery(head, conjuncts)

    def canonical(self, program: str) -> str:
        query = self.parse(program)
        return f"{query.head} WHERE {{ {' . '.join(sorted(set(query.conjuncts)))} }}"
