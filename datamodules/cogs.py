"""COGS (Kim & Linzen 2020): English sentences with lambda-calculus-style logical forms.

Files: ``cogs/{train,dev,test,gen}.tsv``, ``sentence \\t logical form \\t generalization type``
(``../shared/data/cogs/PROVENANCE.md``; ``gen.tsv`` predates the 2022 fix of 50 ``obj_pp_to_subj_pp`` examples).
``cogs`` tests on the in-distribution test set, ``cogs_gen`` on the 21,000 generalization cases; the type goes
to ``meta["type"]`` so results can be broken down per generalization case.
"""
from __future__ import annotations

from datamodules.base import register_line_dataset

# Every generalization type of COGS's files: the 21 cases of gen.tsv (Kim & Linzen 2020, §3), and in train/dev/test
# in_distribution, primitive and the exposure examples. The type is a line's last field, so a file cut inside it
# would otherwise give a well-formed line with a type that no breakdown knows.
TYPES = frozenset((
    "active_to_passive", "cp_recursion", "do_dative_to_pp_dative", "obj_omitted_transitive_to_transitive",
    "obj_pp_to_subj_pp", "obj_to_subj_common", "obj_to_subj_proper", "only_seen_as_transitive_subj_as_unacc_subj",
    "only_seen_as_unacc_subj_as_obj_omitted_transitive_subj", "only_seen_as_unacc_subj_as_unerg_subj",
    "passive_to_active", "pp_dative_to_do_dative", "pp_recursion", "prim_to_inf_arg", "prim_to_obj_common",
    "prim_to_obj_proper", "prim_to_subj_common", "prim_to_subj_proper", "subj_to_obj_common", "subj_to_obj_proper",
    "unacc_to_transitive", "in_distribution", "primitive",
    *(f"exposure_example_{case}" for case in (
        "active", "do_dative", "obj_common", "obj_omitted_transitive", "obj_proper", "passive", "pp_dative",
        "subj_common", "subj_proper", "transitive_subj", "unacc", "unacc_subj")),
))


def parse_line(line: str):
    fields = line.split("\t")
    if len(fields) != 3:
        raise ValueError(f"{len(fields)} tab-separated fields instead of 3")
    sentence, logical_form, gen_type = (f.strip() for f in fields)
    if gen_type not in TYPES:
        raise ValueError(f"unknown generalization type {gen_type!r} (COGS's are listed in datamodules/cogs.py)")
    return sentence, logical_form, {"type": gen_type}


for _name, _test in (("cogs", "test"), ("cogs_gen", "gen")):
    register_line_dataset(
        _name, formalism="cogs", family="cogs",
        description=f"COGS, evaluated on {_test}.tsv",
        files={"train": "cogs/train.tsv", "dev": "cogs/dev.tsv", "test": f"cogs/{_test}.tsv"},
        parse=parse_line, expected="'<sentence>\\t<logical form>\\t<generalization type>'",
    )
