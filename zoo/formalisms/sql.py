"""SQL of the text-to-SQL datasets of Finegan-Dollak et al. 2018 ("Improving Text-to-SQL Evaluation Methodology").

Programs are their canonicalised queries (§2 of the paper and ``text2sql/README.md``: upper-case keywords and
names, table aliases ``<TABLE>alias<N>``, values replaced by variable placeholders such as ``"state_name0"``), in
MySQL's dialect: double quotes delimit string literals, and placeholders for numbers stand unquoted (``year0``).

Exact match (the paper's query accuracy compares query strings) goes through ``canonical``: the token sequence
with one space between tokens (so ``MAX(`` and ``MAX (`` agree), keywords, names and placeholders lower-cased
(SQL does not distinguish their case), string literals kept character for character, and the closing ``;``
dropped. Conditions are *not* reordered: the data's canonicalisation already fixed one order per query.

Execution (the GeoQuery database only; ATIS and Scholar ship none here) substitutes the example's variables
(``meta["variables"]``), translates the two MySQL constructs SQLite lacks in the gold queries (double-quoted
strings; ``op ALL ( subquery )``), and runs the query under a time limit and a row limit on a read-only
connection. The denotation is the bag of result rows: a ``frozenset`` for ``SELECT DISTINCT``, otherwise a
``RowMultiset``; row order (``ORDER BY``) is not compared.

The world is built from ``geography-db.sql``, the MySQL dump the queries were written against. The SQLite file
``geography-db.added-in-2020.sqlite`` (marked "untested" upstream) differs from it: ``highlow``'s elevations are
stored as text (so ``MAX``/``>`` compare strings: '734' > '6194') and 12 ``river`` rows are duplicated, which changes
the gold denotations of 115 of the 873 GeoQuery questions that run. ``load_world`` still opens such ``.sqlite`` files
(read-only) for databases that come only in that form.
"""
from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from zoo.formalisms.base import VALUE, Formalism, FormalismError

# One SQL token: a string literal ("" or '' doubles the quote inside), a number, a name (keyword, table, column,
# placeholder, ``CITYalias0.CITY_NAME``, ``T.*``), a two-character operator, or one punctuation/operator character.
_TOKEN = re.compile(r"""
      "(?:[^"]|"")*"
    | '(?:[^']|'')*'
    | \d+(?:\.\d+)?(?:[eE][-+]?\d+)?
    | [A-Za-z_][A-Za-z0-9_$]*(?:\.(?:[A-Za-z_][A-Za-z0-9_$]*|\*))*
    | <>|!=|<=|>=|==|\|\|
    | [-+*/%=<>(),;]
""", re.X)
_COMPARISONS = {"=", "==", "<>", "!=", "<", ">", "<=", ">="}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_UNQUOTED_PLACEHOLDER = re.compile(r"[a-z_]+\d+")  # a variable standing for a number: year0, departure_time0
_ALIAS_NUMBER = re.compile(r"(?<=[A-Z_])alias\d+")  # CITYalias0 -> CITY


def _masked(program: str) -> list[str]:
    """The query's tokens with every value (literal, number, placeholder) as ``VALUE`` and every alias as its table;
    characters that start no token are skipped, so a malformed prediction still gives its structure."""
    return [VALUE if _is_literal(t) or _NUMBER.fullmatch(t) or _UNQUOTED_PLACEHOLDER.fullmatch(t)
            else _ALIAS_NUMBER.sub("", t) for t in _TOKEN.findall(program)]


def _is_literal(token: str) -> bool:
    return token[0] in "\"'"


def _literal_text(token: str) -> str:
    """The characters of a quoted literal, with the doubled quote undone."""
    quote = token[0]
    return token[1:-1].replace(quote * 2, quote)


def _sqlite_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class SqlQuery:
    """A checked query: its tokens (the closing ``;`` removed) and whether the outer SELECT is DISTINCT."""

    tokens: tuple[str, ...]

    @property
    def distinct(self) -> bool:
        return len(self.tokens) > 1 and self.tokens[1].upper() == "DISTINCT"


class RowMultiset(Mapping):
    """A hashable, immutable bag of result rows (row tuple -> how many times it was returned)."""

    __slots__ = ("_counts",)

    def __init__(self, rows: Iterable[tuple] = ()):
        self._counts = dict(Counter(rows))

    def __getitem__(self, row: tuple) -> int:
        return self._counts[row]

    def __iter__(self):
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __hash__(self) -> int:
        return hash(frozenset(self._counts.items()))

    def __repr__(self) -> str:
        return f"RowMultiset({self._counts!r})"


# ----------------------------------------------------------------------------------------------------------------
# The world: a read-only SQLite connection with per-query limits
# ----------------------------------------------------------------------------------------------------------------
# What the authorizer lets a statement do: read tables, call functions, use (recursive) common table expressions.
_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


def _authorize(action: int, *_details) -> int:
    return sqlite3.SQLITE_OK if action in _ALLOWED_ACTIONS else sqlite3.SQLITE_DENY


def _mysql_dump_statements(text: str) -> Iterable[str]:
    """The CREATE TABLE and INSERT statements of a mysqldump file, in SQLite's syntax (table options dropped)."""
    lines: list[str] = []
    for line in text.splitlines():
        if not lines and (not line.strip() or line.startswith("--")):
            continue
        lines.append(line)
        statement = "\n".join(lines)
        if not sqlite3.complete_statement(statement):
            continue
        lines = []
        if statement.startswith("CREATE TABLE"):
            yield statement[:statement.rindex(")") + 1]  # drop ``ENGINE=InnoDB DEFAULT CHARSET=latin1``
        elif statement.startswith("INSERT INTO"):
            yield statement


QUERY_LIMITS = {sqlite3.SQLITE_LIMIT_LENGTH: 1_000_000,  # bytes of one string or blob (results, intermediates)
                sqlite3.SQLITE_LIMIT_SQL_LENGTH: 100_000,  # bytes of one query
                sqlite3.SQLITE_LIMIT_COLUMN: 1_000, sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 500,
                sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 100, sqlite3.SQLITE_LIMIT_ATTACHED: 0}


class SqlWorld:
    """A database that queries run against, read-only, with a time limit and a row limit per query.

    ``timeout_s``: a query still running after this many seconds is interrupted (``FormalismError("timed out")``).
    ``max_rows``: a result with more rows is an error rather than a truncated bag, so that a runaway prediction
    never compares equal to a gold result by accident (the largest GeoQuery gold result has 601 rows).
    A ``.sql`` path is a MySQL dump loaded into memory; a ``.sqlite``/``.db`` path is opened with ``mode=ro``.
    """

    def __init__(self, path: str | Path, timeout_s: float = 2.0, max_rows: int = 100_000):
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self._lock = threading.Lock()  # one connection, possibly shared by threads
        self._connection = self._open(self.path)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        if not path.is_file():
            raise FormalismError(f"sql: database file {path} not found")
        try:
            if path.suffix == ".sql":
                connection = sqlite3.connect(":memory:", check_same_thread=False)
                for statement in _mysql_dump_statements(path.read_text(encoding="utf-8")):
                    connection.execute(statement)
                connection.commit()
            elif path.suffix in (".sqlite", ".sqlite3", ".db"):
                connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
            else:
                raise FormalismError(f"sql: expected a MySQL dump (.sql) or an SQLite file (.sqlite, .db), got {path}")
            connection.execute("PRAGMA query_only = ON")
            if not connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                raise FormalismError(f"sql: {path} defines no table")
        except sqlite3.Error as e:
            raise FormalismError(f"sql: cannot load the database {path}: {e}") from None
        connection.set_authorizer(_authorize)
        # One step of SQLite's machine cannot be interrupted by the time limit: zeroblob(1e8) or replace() over it
        # builds gigabytes at once. Cap every value and query text far above what a real query needs.
        for limit, value in QUERY_LIMITS.items():
            connection.setlimit(limit, value)
        return connection

    def query(self, sql: str) -> list[tuple]:
        """The rows of one SQLite statement; every failure (syntax, unknown column, time, size) is a FormalismError."""
        deadline = time.monotonic() + self.timeout_s
        with self._lock:
            self._connection.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
            cursor = None
            try:
                cursor = self._connection.execute(sql)
                rows = cursor.fetchmany(self.max_rows + 1)
            except (sqlite3.Error, sqlite3.Warning, OverflowError, MemoryError, RecursionError, UnicodeError) as e:
                if str(e) == "interrupted":  # by the progress handler, at the deadline
                    raise FormalismError(f"sql: timed out after {self.timeout_s:g} s: {sql[:200]}") from None
                raise FormalismError(f"sql: {type(e).__name__}: {e} in {sql[:200]!r}") from None
            finally:
                if cursor is not None:
                    cursor.close()
                self._connection.set_progress_handler(None, 0)
        if len(rows) > self.max_rows:
            raise FormalismError(f"sql: more than {self.max_rows} result rows: {sql[:200]}")
        return rows

    def tables(self) -> list[str]:
        return [name for (name,) in self.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]

    def close(self) -> None:
        self._connection.close()

    # A connection cannot be pickled (DDP, dataloader workers): a copy reopens the database from its path.
    def __getstate__(self) -> dict:
        return {"path": self.path, "timeout_s": self.timeout_s, "max_rows": self.max_rows}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __repr__(self) -> str:
        return f"SqlWorld({str(self.path)!r}, timeout_s={self.timeout_s}, max_rows={self.max_rows})"


# ----------------------------------------------------------------------------------------------------------------
# From a dataset query to an SQLite statement
# ----------------------------------------------------------------------------------------------------------------
def _substitute(tokens: Iterable[str], variables: Mapping[str, str]) -> list[str]:
    """Placeholders -> values, and MySQL's double-quoted strings -> SQLite's single-quoted ones.

    A placeholder is a whole quoted literal (``"state_name0"``) or a bare name (``year0``, ATIS/Scholar numbers).
    A bare placeholder whose value is not a number becomes a string literal, so a value never becomes SQL code.
    """
    out = []
    for token in tokens:
        if _is_literal(token):
            text = _literal_text(token)
            out.append(_sqlite_string(str(variables.get(text, text))))
        elif token in variables:
            value = str(variables[token])
            out.append(value if _NUMBER.fullmatch(value) else _sqlite_string(value))
        else:
            out.append(token)
    return out


def _matching_bracket(tokens: list[str], open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[i], 0)
        if depth == 0:
            return i
    raise FormalismError(f"sql: '(' at token {open_at} is never closed")


def _rewrite_quantified(tokens: list[str]) -> list[str]:
    """``x op ALL ( S )`` / ``x op ANY|SOME ( S )`` (MySQL) -> an EXISTS over S, which SQLite understands.

    ALL holds when no row of S fails the comparison or makes it unknown (NULL); ANY when some row satisfies it.
    Only a single-token left operand (a column or a value, as in the data) is rewritten; anything else is left
    for SQLite to reject.
    """
    for i in range(2, len(tokens) - 1):
        quantifier = tokens[i].upper()
        if quantifier in ("ALL", "ANY", "SOME") and tokens[i - 1] in _COMPARISONS and tokens[i + 1] == "(" \
                and tokens[i - 2] not in ("(", ")"):
            close = _matching_bracket(tokens, i + 1)
            left, op = tokens[i - 2], tokens[i - 1]
            subquery = _rewrite_quantified(tokens[i + 2:close])
            test = f"{left} {op} quantified_value"
            rows = f"WITH quantified ( quantified_value ) AS ( {' '.join(subquery)} ) SELECT 1 FROM quantified WHERE"
            exists = (f"NOT EXISTS ( {rows} NOT ( {test} ) OR ( {test} ) IS NULL )" if quantifier == "ALL"
                      else f"EXISTS ( {rows} {test} )")
            return tokens[:i - 2] + [exists] + _rewrite_quantified(tokens[close + 1:])
    return tokens


# ----------------------------------------------------------------------------------------------------------------
# The formalism
# ----------------------------------------------------------------------------------------------------------------
class SQL(Formalism):
    """Text-to-SQL queries with variable placeholders (Finegan-Dollak et al. 2018); executes on GeoQuery."""

    name = "sql"
    executable = True
    needs_world = True
    float_digits = 9  # significant digits compared in result values (AVG, densities)

    def tokenize(self, program: str) -> list[str]:
        tokens, pos = [], 0
        while True:
            while pos < len(program) and program[pos].isspace():
                pos += 1
            if pos == len(program):
                return tokens
            match = _TOKEN.match(program, pos)
            if match is None:
                what = "unterminated string literal" if program[pos] in "\"'" else f"unexpected character {program[pos]!r}"
                raise FormalismError(f"sql: {what} at character {pos} (token {len(tokens)}) in {program[:200]!r}")
            tokens.append(match.group())
            pos = match.end()

    def parse(self, program: str) -> SqlQuery:
        """Tokens, checked to be one SELECT statement with balanced brackets (SQLite checks the rest on execution)."""
        tokens = self.tokenize(program)
        if tokens and tokens[-1] == ";":
            tokens.pop()
        if not tokens or tokens[0].upper() != "SELECT":
            found = repr(tokens[0]) if tokens else "the end"
            raise FormalismError(f"sql: expected SELECT at token 0, found {found} in {program[:200]!r}")
        open_at: list[int] = []
        for i, token in enumerate(tokens):
            if token == ";":
                raise FormalismError(f"sql: expected one statement, found ';' at token {i} in {program[:200]!r}")
            if token == "(":
                open_at.append(i)
            elif token == ")":
                if not open_at:
                    raise FormalismError(f"sql: unmatched ')' at token {i} in {program[:200]!r}")
                open_at.pop()
        if open_at:
            raise FormalismError(f"sql: expected ')' to close the '(' at token {open_at[-1]}, found the end "
                                 f"in {program[:200]!r}")
        return SqlQuery(tuple(tokens))

    def unparse(self, structure: SqlQuery) -> str:
        return " ".join(structure.tokens) + " ;"

    def canonical(self, program: str) -> str:
        return " ".join(t if _is_literal(t) else t.lower() for t in self.parse(program).tokens)

    def structure(self, program: str) -> list[str]:
        """Tables, columns, keywords and operators, aliases resolved to their tables (``CITY.CITY_NAME``)."""
        return [token for token in _masked(program) if token != VALUE and token not in "(),;"]

    def template(self, program: str) -> str:
        return " ".join(_masked(program))

    # ----- execution ------------------------------------------------------------------------------------------
    def load_world(self, path: str | Path, timeout_s: float = 2.0, max_rows: int = 100_000) -> SqlWorld:
        return SqlWorld(path, timeout_s=timeout_s, max_rows=max_rows)

    def to_sqlite(self, query: SqlQuery, meta: Mapping[str, Any] | None = None) -> str:
        """The SQLite statement that runs ``query`` with the example's variable values."""
        variables = (meta or {}).get("variables") or {}
        return " ".join(_rewrite_quantified(_substitute(query.tokens, variables)))

    def execute(self, program: str, world: Any = None, meta: Mapping[str, Any] | None = None):
        if not isinstance(world, SqlWorld):
            raise FormalismError("sql: execution needs a database: load_world('text2sql/geography-db.sql')")
        query = self.parse(program)
        try:
            rows = world.query(self.to_sqlite(query, meta))
        except RecursionError:
            raise FormalismError(f"sql: query nested too deeply: {program[:200]!r}") from None
        return frozenset(rows) if query.distinct else RowMultiset(rows)

    def same_denotation(self, a: Any, b: Any) -> bool:
        """Equal bags of rows, with floats compared to ``float_digits`` significant digits; a DISTINCT result
        (a set) equals a multiset that holds each of its rows once."""
        if isinstance(a, (frozenset, RowMultiset)) and isinstance(b, (frozenset, RowMultiset)):
            return self._comparable(a) == self._comparable(b)
        return a == b

    def _comparable(self, rows: frozenset | RowMultiset) -> Counter:
        counts = rows.items() if isinstance(rows, RowMultiset) else ((row, 1) for row in rows)
        bag: Counter = Counter()
        for row, n in counts:
            bag[tuple(float(f"{v:.{self.float_digits}g}") if isinstance(v, float) else v for v in row)] += n
        return bag
