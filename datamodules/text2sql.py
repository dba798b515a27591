"""Text-to-SQL on GeoQuery, ATIS and Scholar in the form of Finegan-Dollak et al. 2018 (text2sql-data).

File: ``text2sql/{geography,atis,scholar}.json``, a JSON list of queries ``{"query-split", "sentences":
[{"question-split", "text", "variables"}], "sql": [...]}`` (``../shared/data/text2sql/PROVENANCE.md``).
``*_iid`` uses each sentence's ``question-split``; ``*_template`` uses the query's ``query-split``, so every
paraphrase of a query lands on the same side (the template split, also used by Herzig et al. 2021).
Utterance and program keep the variable placeholders (``state_name0``); the program is ``sql[0]``, whitespace
normalised. ``meta`` keeps the sentence's ``variables`` (placeholder -> value, for execution) and the position of
its query in the file (``query_index``).
"""
from __future__ import annotations

from pathlib import Path

from datamodules.base import DataFormatError, ProgramCheck, load_json, register, require
from zoo.formalisms import FormalismError
from zoo.types import Example

DATABASES = {"geo": "geography", "atis": "atis", "scholar": "scholar"}
SPLIT_FIELDS = {"iid": "question-split", "template": "query-split"}
# Only GeoQuery's database ships with text2sql-data at a size we mirror; ATIS and Scholar score by exact match only.
# The SQL dump, not the "added-in-2020" SQLite file: that one stores elevations as text and duplicates 12 rivers,
# which changes the gold results of 115 questions (see zoo/formalisms/sql.py).
WORLDS = {"geography": "text2sql/geography-db.sql"}
# GeoQuery's and ATIS's questions are lower-case; 217 of Scholar's 499 iid training questions are capitalised.
LOWERCASE = {"geography", "atis"}
PARTS = ("train", "dev", "test")
EXPECTED = ('a JSON list of {"query-split": train|dev|test, "sql": [str, ...], "sentences": '
            '[{"question-split": train|dev|test, "text": str, "variables": {str: str}}, ...]}')


def read_text2sql(path: Path, split_field: str) -> dict[str, list[Example]]:
    """Split every sentence of every query by ``split_field`` (``question-split`` or ``query-split``)."""
    queries = load_json(path, EXPECTED)
    if not isinstance(queries, list):
        raise DataFormatError(path, None, EXPECTED, "the top level is not a list")
    splits: dict[str, list[Example]] = {part: [] for part in PARTS}
    check = ProgramCheck("sql")
    for query_index, query in enumerate(queries):
        try:
            program = " ".join(query["sql"][0].split())
            check(program)
            for sentence_index, sentence in enumerate(query["sentences"]):
                part = query[split_field] if split_field == "query-split" else sentence[split_field]
                meta = {"index": len(splits[part]), "query_index": query_index, "sentence_index": sentence_index,
                        "variables": dict(sentence["variables"])}
                splits[part].append(Example(" ".join(sentence["text"].split()), program, meta))
        except FormalismError as e:
            raise DataFormatError(path, None, check.expected, f"query entry {query_index}: {e}") from None
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            raise DataFormatError(path, None, EXPECTED, f"query entry {query_index}: {type(e).__name__} {e}") from None
    for part, examples in splits.items():
        if not examples:
            raise DataFormatError(path, None, EXPECTED, f"no sentence is in {part} by its {split_field}")
    return splits


def make_reader(name: str, database: str, split_field: str):
    rel = f"text2sql/{database}.json"

    @register(name, formalism="sql", files=(rel,), family="text2sql", world=WORLDS.get(database),
              lowercase=database in LOWERCASE,
              description=f"{database} text-to-SQL (Finegan-Dollak et al. 2018), split by {split_field}")
    def read(root: str):
        return read_text2sql(require(name, root, rel), split_field)

    return read


for _db, _file in DATABASES.items():
    for _split, _field in SPLIT_FIELDS.items():
        make_reader(f"{_db}_sql_{_split}", _file, _field)
