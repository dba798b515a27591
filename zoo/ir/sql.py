"""SQL IRs of Herzig et al. 2021 for the text-to-SQL datasets (GeoQuery, ATIS, Scholar; Figure 2b).

* RIR (§3.2): the canonical table aliases ``<TABLE>alias<N>`` lose their ``alias`` token and become
  ``<TABLE><N>`` (``AIRLINEalias0`` -> ``AIRLINE0``). The inverse reads each ``<TABLE> AS <TABLE><N>`` declaration
  of the FROM clauses and restores the alias everywhere it is used. As the paper defines it (``definition="paper"``)
  every alias loses that token, derived tables' and derived fields' too (a subquery in FROM, a computed column:
  ``( SELECT ... ) AS DERIVED_TABLEalias0`` -> ``DERIVED_TABLE0``, ``COUNT( 1 ) AS DERIVED_FIELDalias1`` ->
  ``DERIVED_FIELD1``, also where a field names a derived table's column); the inverse reads their ``AS``
  declarations likewise. The zoo's earlier reading (``definition="zoo"``) leaves those two kinds of alias as they
  are. Under both, a short name that already names something else in the query is refused, as the inverse could
  not tell the two apart.
* LIR (§3.3: "we omit the FROM clause, mask table names, and omit conditions that are only relevant for joining
  tables"), the same under both definitions: only what utterances tend to name stays. Every FROM clause becomes
  ``FROM alias``, a derived table loses its ``AS DERIVED_TABLE...`` name as the FROM clause's tables do, every
  ``<alias>.<COLUMN>`` becomes ``table.<COLUMN>``, and join-only conditions (a column equal to a column) are
  dropped with the brackets (and ``NOT``) that held only them and one ``AND``/``OR`` beside them, a WHERE or
  HAVING left empty too: ``SELECT DISTINCT table.AIRLINE_CODE FROM alias WHERE table.AIRPORT_CODE = "SFO"``.
"""
from __future__ import annotations

import re

from zoo.formalisms import FormalismError
from zoo.formalisms.sql import SQL, _is_literal
from zoo.ir import IntermediateRepresentation, IRError, register_ir

_SQL = SQL()
_ALIAS = re.compile(r"(?P<table>[A-Za-z_][A-Za-z0-9_]*)alias(?P<n>\d+)")
# aliases of a subquery in FROM and of a computed column: ``DERIVED_TABLEalias0``, ``DERIVED_FIELDalias1``
_DERIVED = ("DERIVED_TABLE", "DERIVED_FIELD")
_DERIVED_SHORT = re.compile(rf"(?P<table>{'|'.join(_DERIVED)})(?P<n>\d+)")  # their names in the paper's RIR
_DERIVED_TABLE = re.compile(r"DERIVED_TABLE(?:alias)?\d+")  # in a program or its RIR
# the tokens before a bracket that holds a condition, not a function call's arguments or a subquery
_CONDITION_BEFORE = {"WHERE", "HAVING", "ON", "AND", "OR", "NOT", "("}
_CONNECTIVES = ("AND", "OR")  # binding tightest first
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


def _rename(tokens: list[str], names: dict[str, str], columns: bool = False) -> list[str]:
    """Each name token ``a`` or ``a.b`` with ``a`` in ``names`` renamed, and with ``columns`` ``b`` too (a derived
    field names a derived table's column); literals untouched."""
    renamed = []
    for token in tokens:
        head, dot, rest = token.partition(".")
        if _is_literal(token):
            renamed.append(token)
        else:
            renamed.append(names.get(head, head) + dot + (names.get(rest, rest) if columns else rest))
    return renamed


def _names(tokens: list[str], columns: bool = False) -> set[str]:
    """The names ``_rename`` would look at: the ``a`` of every ``a`` or ``a.b``, with ``columns`` the ``b`` too."""
    heads = {token.partition(".")[0] for token in tokens if not _is_literal(token)}
    return heads | ({token.partition(".")[2] for token in tokens if not _is_literal(token)} if columns else set())


def _values_masked(text: str) -> str:
    """The structure of a query or IR: every literal (the datasets' value placeholders) as ``value``."""
    return " ".join("value" if _is_literal(t) else t for t in _tokens(text))


def _is_column(token: str) -> bool:
    return "." in token and not _is_literal(token) and not token.endswith(".*")


@register_ir
class SqlRIR(IntermediateRepresentation):
    name, formalism, reversible = "rir", "sql", True

    def forward(self, program: str, utterance: str = "") -> str:
        tokens, paper = _tokens(program), self.definition == "paper"
        names = {}
        for table, alias in _declarations(tokens):
            match = _ALIAS.fullmatch(alias)
            if match and (match["table"] == table or (paper and match["table"] in _DERIVED)):
                names[alias] = match["table"] + match["n"]
        clashes = sorted((_names(tokens, columns=paper) - set(names)) & set(names.values()))
        if clashes:
            raise IRError(f"sql rir: {', '.join(clashes)} already names something else in {program[:120]!r}")
        return " ".join(_rename(tokens, names, columns=paper))

    def inverse(self, ir: str, utterance: str = "") -> str:
        tokens, paper = _tokens(ir), self.definition == "paper"
        names = {}
        for table, alias in _declarations(tokens):
            derived = _DERIVED_SHORT.fullmatch(alias) if paper else None
            if derived:
                names[alias] = f"{derived['table']}alias{derived['n']}"
            elif alias.startswith(table) and alias[len(table):].isdigit():
                names[alias] = f"{table}alias{alias[len(table):]}"
        return " ".join(_rename(tokens, names, columns=paper)) + " ;"

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
            if token.upper() == "AS" and i + 1 < len(tokens) and _DERIVED_TABLE.fullmatch(tokens[i + 1]):
                i += 2  # a derived table's name, masked as the FROM clause's are
                continue
            out.append("table." + token.partition(".")[2] if _is_column(token) else token)
            i += 1
        return " ".join(_drop_join_conditions(out))

    def structure(self, ir: str) -> str:
        return _values_masked(ir)


def _drop_join_conditions(tokens: list[str]) -> list[str]:
    """Remove every ``column = column`` condition, the brackets that held only it and one ``AND``/``OR`` beside it;
    a WHERE or HAVING left empty goes too."""
    tokens = list(tokens)
    i = 1
    while i < len(tokens) - 1:
        if tokens[i] == "=" and _is_column(tokens[i - 1]) and _is_column(tokens[i + 1]):
            start, end = i - 1, i + 2
            while True:  # widen to the NOT and the brackets that hold only this condition
                if start > 0 and tokens[start - 1].upper() == "NOT":
                    start -= 1
                elif (start > 0 and end < len(tokens) and tokens[start - 1] == "(" and tokens[end] == ")"
                      and (start == 1 or tokens[start - 2].upper() in _CONDITION_BEFORE)):
                    start, end = start - 1, end + 1
                else:
                    break
            for connective in _CONNECTIVES:  # AND first: ``x OR join AND y`` keeps its OR
                if start > 0 and tokens[start - 1].upper() == connective:
                    start -= 1
                    break
                if end < len(tokens) and tokens[end].upper() == connective:
                    end += 1
                    break
            del tokens[start:end]
            i = max(start, 1)
            continue
        i += 1
    return [t for j, t in enumerate(tokens) if not (t.upper() in ("WHERE", "HAVING")
                                                    and (j + 1 == len(tokens) or tokens[j + 1].upper() in _AFTER_FROM))]
