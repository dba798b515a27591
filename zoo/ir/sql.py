"""SQL IRs of Herzig et al. 2021 for the text-to-SQL datasets (GeoQuery, ATIS, Scholar; Figure 2b).

* RIR (§3.2): the canonical table aliases ``<TABLE>alias<N>`` lose their ``alias`` token and become
  ``<TABLE><N>`` (``AIRLINEalias0`` -> ``AIRLINE0``). The inverse reads each ``<TABLE> AS <TABLE><N>`` declaration
  of the FROM clauses and restores the alias everywhere it is used.
* LIR (§3.3): only what utterances tend to name stays. Every FROM clause becomes ``FROM alias``, every
  ``<alias>.<COLUMN>`` becomes ``table.<COLUMN>``, and join-only conditions (a column equal to a column) are
  dropped with their ``AND``: ``SELECT DISTINCT table.AIRLINE_CODE FROM alias WHERE table.AIRPORT_CODE = "SFO"``.
"""
from __future__ import annotations

import re

from zoo.formalisms import FormalismError
from zoo.formalisms.sql import SQL, _is_literal
from zoo.ir import IntermediateRepresentation, IRError, register_ir

_SQL = SQL()
_ALIAS = re.compile(r"(?P<table>[A-Za-z_][A-Za-z0-9_]*)alias(?P<n>\d+)")
# what ends a FROM clause's table list
_AFTER_FROM = {"WHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "UNION", "INTERSECT", "EXCEPT", ")", ";"}


def _tokens(program: str) -> list[str]:
    try:
        tokens = _SQL.tokenize(program)
    except FormalismError as e:  # names the character
        raise IRError(str(e)) from e
    return tokens[:-1] if tokens and tokens[-1] == ";" else tokens


def _declarations(tokens: list[str]) -> list[tuple[str, str]]:
    """(table, alias) of every ``<table> AS <alias>`` in the query and its subqueries."""
    return [(tokens[i - 1], tokens[i + 1]) for i in range(1, len(tokens) - 1) if tokens[i].upper() == "AS"]


def _rename(tokens: list[str], names: dict[str, str]) -> list[str]:
    """Each name token ``a`` or ``a.column`` with ``a`` in ``names`` renamed; literals untouched."""
    renamed = []
    for token in tokens:
        head, dot, rest = token.partition(".")
        renamed.append(token if _is_literal(token) or head not in names else names[head] + dot + rest)
    return renamed


def _values_masked(text: str) -> str:
    """The structure of a query or IR: every literal (the datasets' value placeholders) as ``value``."""
    return " ".join("value" if _is_literal(t) else t for t in _tokens(text))


def _is_column(token: str) -> bool:
    return "." in token and not _is_literal(token) and not token.endswith(".*")


@register_ir
class SqlRIR(IntermediateRepresentation):
    name, formalism, reversible = "rir", "sql", True

    def forward(self, program: str, utterance: str = "") -> str:
        tokens = _tokens(program)
        names = {}
        for table, alias in _declarations(tokens):
            match = _ALIAS.fullmatch(alias)
            if match and match["table"] == table:
                names[alias] = table + match["n"]
        taken = {token.partition(".")[0] for token in tokens if not _is_literal(token)} - set(names)
        clashes = sorted(taken & set(names.values()))
        if clashes:
            raise IRError(f"sql rir: {', '.join(clashes)} already names something else in {program[:120]!r}")
        return " ".join(_rename(tokens, names))

    def inverse(self, ir: str, utterance: str = "") -> str:
        tokens = _tokens(ir)
        names = {}
        for table, alias in _declarations(tokens):
            if alias.startswith(table) and alias[len(table):].isdigit():
                names[alias] = f"{table}alias{alias[len(table):]}"
        return " ".join(_rename(tokens, names)) + " ;"

    def structure(self, ir: str) -> str:
        return _values_masked(ir)


@register_ir
class SqlLIR(IntermediateRepresentation):
    name, formalism, reversible = "lir", "sql", False

    def forward(self, program: str, utterance: str = "") -> str:
        tokens, out, i = _tokens(program), [], 0
        while i < len(tokens):
            token = tokens[i]
            if token.upper() == "FROM" and (i + 1 == len(tokens) or tokens[i + 1] != "("):
                out += [token, "alias"]
                i += 1
                while i < len(tokens) and tokens[i].upper() not in _AFTER_FROM:
                    i += 1
                continue
            out.append("table." + token.partition(".")[2] if _is_column(token) else token)
            i += 1
        return " ".join(_drop_join_conditions(out))

    def structure(self, ir: str) -> str:
        return _values_masked(ir)


def _drop_join_conditions(tokens: list[str]) -> list[str]:
    """Remove every ``column = column`` condition with one ``AND`` beside it; a WHERE left empty goes too."""
    tokens = list(tokens)
    i = 1
    while i < len(tokens) - 1:
        if tokens[i] == "=" and _is_column(tokens[i - 1]) and _is_column(tokens[i + 1]):
            start, end = i - 1, i + 2
            if start > 0 and tokens[start - 1].upper() == "AND":
                start -= 1
            elif end < len(tokens) and tokens[end].upper() == "AND":
                end += 1
            del tokens[start:end]
            i = max(start, 1)
            continue
        i += 1
    return [t for j, t in enumerate(tokens)
            if not (t.upper() == "WHERE" and (j + 1 == len(tokens) or tokens[j + 1].upper() in _AFTER_FROM))]
