"""GeoQuery (Geo880) in FunQL with the IID / TEMPLATE / LENGTH splits of Herzig & Berant 2021 (span-based-sp).

Files: ``geoquery_funql/funql/<part><suffix>.json``, JSON lines ``{"question", "program"}``; the mapping from split
to file suffix is span-based-sp's ``run_span.py`` (``../shared/data/geoquery_funql/PROVENANCE.md``). Where the
matching ``<part><suffix>_spans.json`` has the same (question, program) pair, its gold span tree goes to
``meta["gold_spans"]``: train for span_cky's ``gold_trees`` setting, test for its tree F1 (§4.4). The spans files
are optional and cover the examples whose programs could be aligned to spans (513/57/256 of 540/60/280 IID).
"""
from __future__ import annotations

import re
from pathlib import Path

from datamodules.base import (heldout_longest, heldout_random, heldout_templates, json_record, read_examples,
                              register, require)

SPLITS = {"iid": "", "template": "_template", "length": "_len"}
# A program's template in the template split (span-based-sp, preprocess/geo/create_template_split.py): its entities
# replaced by their kind
ENTITY = re.compile(r"\b(state|city|country|river|place)id \( .*? \)")


def template(program: str) -> str:
    return ENTITY.sub(lambda match: f"{match.group(1)}id ( _{match.group(1)}_ )", program)


# data.heldout: each split's own rule applied to its training set (the length split's test set has the longest
# programs, the template split's whole templates, the IID split's random examples)
HELDOUT = {"iid": heldout_random, "template": heldout_templates(template), "length": heldout_longest}
PARTS = ("train", "dev", "test")
GEOBASE = "geoquery_funql/geobase.pl"  # the Prolog facts FunQL programs execute against
EXPECTED = 'a JSON object {"question": str, "program": str}'
EXPECTED_SPANS = 'a JSON object {"question": str, "program": str, "gold_spans": [{"span": [i, j], "type": str}, ...]}'


def parse_line(line: str):
    record = json_record(line, "question", "program")
    return record["question"], record["program"], {}


def parse_spans_line(line: str):
    record = json_record(line, "question", "program")
    if not isinstance(record.get("gold_spans"), list):
        raise ValueError("field 'gold_spans' is missing or not a list")
    return record["question"], record["program"], {"gold_spans": record["gold_spans"]}


def make_reader(name: str, suffix: str, heldout):
    files = {part: f"geoquery_funql/funql/{part}{suffix}.json" for part in PARTS}

    @register(name, formalism="funql", files=tuple(files.values()), family="geoquery", world=GEOBASE, lowercase=True,
              description=f"GeoQuery FunQL, {name.rsplit('_', 1)[1]} split of Herzig & Berant 2021", heldout=heldout)
    def read(root: str):
        splits = {part: read_examples(require(name, root, rel), parse_line, EXPECTED, "funql")
                  for part, rel in files.items()}
        for part in PARTS:
            spans_path = Path(root) / f"geoquery_funql/funql/{part}{suffix}_spans.json"
            if spans_path.is_file():
                spans = {(e.utterance, e.program): e.meta["gold_spans"]
                         for e in read_examples(spans_path, parse_spans_line, EXPECTED_SPANS)}
                for example in splits[part]:
                    if (example.utterance, example.program) in spans:
                        example.meta["gold_spans"] = spans[example.utterance, example.program]
        return splits

    return read


for _split, _suffix in SPLITS.items():
    make_reader(f"geo_funql_{_split}", _suffix, HELDOUT[_split])
