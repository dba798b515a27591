"""CFQ: Compositional Freebase Questions (Keysers et al. 2020), questions with SPARQL queries.

Two layouts are read (``../shared/data/cfq/PROVENANCE.md``):

* preprocessed: ``cfq/preprocessed/<split>/<part>/<part>_{encode,decode}.txt``, what Google's
  ``cfq/preprocess_main.py`` writes, one example per line, line *i* of encode paired with line *i* of decode;
* the official release: ``cfq/dataset.json`` (a JSON list of 239,357 examples) with ``cfq/splits/<split>.json``
  (``trainIdxs``/``devIdxs``/``testIdxs``), to which this module applies the same preprocessing as Google's
  ``cfq/preprocess.py`` so both layouts give identical text.

A full split (``cfq_mcd1..3``, ``cfq_random``) reads whichever of the two layouts is complete, trying first the
one the data mirror and ``zoo.download`` provide (preprocessed for MCD1, the release for the others).
The local mirror has the text of MCD1 only, so MCD2, MCD3 and random exist there only as ``*_partial`` subsets
(the part of each split whose text is known; biased toward MCD1's half of the data, so never comparable with a
published number). Asking for a full split without its data is an error that says so.
"""
from __future__ import annotations

import string
from pathlib import Path

from datamodules.base import (DataFormatError, ProgramCheck, iter_json_array, iter_lines, load_json, register,
                             require_any, require_examples)
from zoo.formalisms import FormalismError
from zoo.types import Example

PARTS = ("train", "dev", "test")
# registry name -> (folder under cfq/preprocessed, split file under cfq/splits)
FULL = {"cfq_mcd1": ("mcd1", "mcd1"), "cfq_mcd2": ("mcd2", "mcd2"), "cfq_mcd3": ("mcd3", "mcd3"),
        "cfq_random": ("random", "random_split")}
PARTIAL = {"cfq_mcd2_partial": "mcd2_partial", "cfq_mcd3_partial": "mcd3_partial",
           "cfq_random_partial": "random_partial"}
RELEASE = "cfq/dataset.json"
SPLIT_EXPECTED = "a JSON object with integer lists trainIdxs, devIdxs and testIdxs"
EXPECTED_RELEASE = ('a JSON list of objects with string fields "questionPatternModEntities" and '
                    '"sparqlPatternModEntities"')


# --- Google's CFQ preprocessing (google-research/cfq/preprocess.py), applied to the release ----------------------
def tokenize_punctuation(text: str) -> str:
    """Put spaces around every ASCII punctuation character and collapse whitespace (``M0 's`` -> ``M0 ' s``)."""
    return " ".join("".join(f" {c} " if c in string.punctuation else c for c in text).split())


def preprocess_sparql(query: str) -> str:
    """One line, ``count(*)`` -> ``count ( * )``, leading ``ns:`` dropped per token, ``ns:m.X`` -> ``m_X``.

    Only a token's leading ``ns:`` goes: property paths keep their inner ``/ns:`` and ``|ns:``, as in Google's files.
    """
    tokens = []
    for token in query.replace("count(*)", "count ( * )").split():
        token = token[3:] if token.startswith("ns:") else token
        tokens.append("m_" + token[2:] if token.startswith("m.") else token)
    return " ".join(tokens).replace("\\n", " ")


# --- layouts --------------------------------------------------------------------------------------------------------
def preprocessed_files(folder: str) -> tuple[str, ...]:
    return tuple(f"cfq/preprocessed/{folder}/{part}/{part}_{side}.txt"
                 for part in PARTS for side in ("encode", "decode"))


def release_files(split_file: str) -> tuple[str, ...]:
    return RELEASE, f"cfq/splits/{split_file}.json"


def read_preprocessed(root: str, folder: str) -> dict[str, list[Example]]:
    """Pair line *i* of ``<part>_encode.txt`` (question) with line *i* of ``<part>_decode.txt`` (query)."""
    splits, check = {}, ProgramCheck("cfq_sparql")
    for part in PARTS:
        base = Path(root) / f"cfq/preprocessed/{folder}/{part}/{part}"
        questions = paired_lines(f"{base}_encode.txt", "one question per line")
        queries = paired_lines(f"{base}_decode.txt", "one query per line")
        for lineno, query in enumerate(queries, 1):
            try:
                check(query)
            except FormalismError as e:
                raise DataFormatError(f"{base}_decode.txt", lineno, check.expected, str(e)) from None
        if len(questions) != len(queries):
            shorter = min(len(questions), len(queries))
            raise DataFormatError(f"{base}_decode.txt", shorter + 1 if shorter < len(queries) else None,
                                  f"one query per question of {base}_encode.txt",
                                  f"{len(queries)} queries for {len(questions)} questions")
        splits[part] = [Example(question, query, {"index": i})
                        for i, (question, query) in enumerate(zip(questions, queries))]
    return splits


def paired_lines(path: str, expected: str) -> list[str]:
    """The stripped lines of one side of a pair of files: at least one, and no blank line before the last, which
    would pair every later question with the wrong query."""
    lines = []
    for lineno, line in iter_lines(path):
        if lineno != len(lines) + 1:
            raise DataFormatError(path, len(lines) + 1, expected, "a blank line")
        lines.append(line.strip())
    return require_examples(lines, path, expected)


def read_release(root: str, split_file: str, chunk_chars: int = 1 << 22) -> dict[str, list[Example]]:
    """Build a split from the official release, streaming ``dataset.json`` once and keeping only its examples.

    ``meta["dataset_index"]`` is the example's index in ``dataset.json``; ``meta["index"]`` its position in the split.
    """
    split_path = Path(root) / f"cfq/splits/{split_file}.json"
    split = load_json(split_path, SPLIT_EXPECTED)
    if not isinstance(split, dict) or not all(isinstance(split.get(f"{p}Idxs"), list)
                                              and all(isinstance(i, int) for i in split[f"{p}Idxs"]) for p in PARTS):
        raise DataFormatError(split_path, None, SPLIT_EXPECTED)
    for part in PARTS:
        if not split[f"{part}Idxs"]:
            raise DataFormatError(split_path, None, SPLIT_EXPECTED, f"{part}Idxs is empty")
    wanted: dict[int, list[tuple[str, int]]] = {}
    for part in PARTS:
        for position, idx in enumerate(split[f"{part}Idxs"]):
            wanted.setdefault(idx, []).append((part, position))
    splits: dict[str, list] = {part: [None] * len(split[f"{part}Idxs"]) for part in PARTS}
    check = ProgramCheck("cfq_sparql")
    dataset_path = Path(root) / RELEASE
    seen = 0
    for idx, (lineno, sample) in enumerate(iter_json_array(dataset_path, EXPECTED_RELEASE, chunk_chars)):
        seen = idx + 1
        if idx not in wanted:
            continue
        try:
            question = tokenize_punctuation(sample["questionPatternModEntities"])
            query = preprocess_sparql(sample["sparqlPatternModEntities"])
            check(query)
        except FormalismError as e:
            raise DataFormatError(dataset_path, lineno, check.expected, f"example {idx}: {e}") from None
        except (KeyError, TypeError, AttributeError) as e:
            detail = f"example {idx}: {type(e).__name__} {e}"
            raise DataFormatError(dataset_path, lineno, EXPECTED_RELEASE, detail) from None
        for part, position in wanted[idx]:
            splits[part][position] = Example(question, query, {"index": position, "dataset_index": idx})
    for part in PARTS:
        if None in splits[part]:  # an index out of range (negative, or past the end of dataset.json)
            idx = split[f"{part}Idxs"][splits[part].index(None)]
            raise DataFormatError(split_path, None, f"indices of the {seen} examples of {dataset_path}",
                                  f"index {idx} of {part}Idxs is not in {dataset_path}")
    return splits


# --- registration ---------------------------------------------------------------------------------------------------
def make_full_reader(name: str, folder: str, split_file: str):
    partial = next((n for n, f in PARTIAL.items() if f == f"{folder}_partial"), None)
    hint = (f"The full {folder} split reads Google's preprocessed files (cfq/preprocessed/{folder}/) or the official "
            f"CFQ release (cfq1.1.tar.gz: cfq/dataset.json with cfq/splits/{split_file}.json).")
    if partial:
        hint += (f" The local data mirror holds only a partial subset of this split, registered as {partial!r}: it is "
                 "biased toward MCD1's half of the data, so label results on it partial and never compare them with "
                 "published numbers.")
    layouts = [preprocessed_files(folder), release_files(split_file)]
    if name != "cfq_mcd1":  # only MCD1 comes preprocessed (LEAR's copy of Google's output); the rest need the release
        layouts.reverse()

    @register(name, formalism="cfq_sparql", files=layouts[0], alternatives=layouts[1:], family="cfq",
              description=f"CFQ {folder} split, full", missing_hint=hint, download="cfq")
    def read(root: str):
        layout = layouts[require_any(name, root, layouts, hint, "cfq")]
        if layout == release_files(split_file):
            return read_release(root, split_file)
        return read_preprocessed(root, folder)

    return read


def make_partial_reader(name: str, folder: str):
    files = preprocessed_files(folder)
    full = next(n for n, (f, _) in FULL.items() if f"{f}_partial" == folder)
    hint = (f"{name} is not published anywhere: it comes only with the local data mirror (cfq/preprocessed/{folder}, "
            f"derived from MCD1's text; see its cfq/PROVENANCE.md). With the official release use the full split "
            f"{full!r} instead: python -m zoo.download cfq --root <root>")

    @register(name, formalism="cfq_sparql", files=files, family="cfq", missing_hint=hint, download="",
              description=f"CFQ {folder.removesuffix('_partial')} split, the subset whose text is known (partial; "
                          "not comparable with published numbers)")
    def read(root: str):
        require_any(name, root, [files], hint, download="")
        return read_preprocessed(root, folder)

    return read


for _name, (_folder, _split_file) in FULL.items():
    make_full_reader(_name, _folder, _split_file)
for _name, _folder in PARTIAL.items():
    make_partial_reader(_name, _folder)
