"""COGS (Kim & Linzen 2020): English sentences with lambda-calculus-style logical forms.

Files: ``cogs/{train,dev,test,gen}.tsv``, ``sentence \\t logical form \\t generalization type``
(``../shared/data/cogs/PROVENANCE.md``; ``gen.tsv`` predates the 2022 fix of 50 ``obj_pp_to_subj_pp`` examples).
``cogs`` tests on the in-distribution test set, ``cogs_gen`` on the 21,000 generalization cases; the type goes
to ``meta["type"]`` so results can be broken down per generalization case.
"""
from __future__ import annotations

from datamodules.base import register_line_dataset


def parse_line(line: str):
    fields = line.split("\t")
    if len(fields) != 3:
        raise ValueError(f"{len(fields)} tab-separated fields instead of 3")
    sentence, logical_form, gen_type = (f.strip() for f in fields)
    return sentence, logical_form, {"type": gen_type}


for _name, _test in (("cogs", "test"), ("cogs_gen", "gen")):
    register_line_dataset(
        _name, formalism="cogs", family="cogs",
        description=f"COGS, evaluated on {_test}.tsv",
        files={"train": "cogs/train.tsv", "dev": "cogs/dev.tsv", "test": f"cogs/{_test}.tsv"},
        parse=parse_line, expected="'<sentence>\\t<logical form>\\t<generalization type>'",
    )
