"""data.heldout: a test set held out of the training set by the rule of the dataset's own test split (issue 28), so
settings are chosen on runs that never read the test set."""
import importlib.util
import sys

import pandas as pd
import pytest

from conftest import REPO, compose_run, needs_mirror
from datamodules import ParsingDataModule, read_splits
from datamodules.base import DataConfigError, heldout_longest, heldout_random, heldout_templates
from datamodules.geoquery import template
from datamodules.scan import heldout_compositions
from zoo.types import Example

EXAMPLES = [Example(f"q{i}", program, {}) for i, program in enumerate([
    "answer ( state ( all ) )", "answer ( capital ( loc_2 ( stateid ( 'texas' ) ) ) )", "answer ( river ( all ) )",
    "answer ( capital ( loc_2 ( stateid ( 'ohio' ) ) ) )", "answer ( count ( river ( loc_2 ( stateid ( 'utah' ) ) ) ) )",
    "answer ( population_1 ( cityid ( 'austin', 'tx' ) ) )", "answer ( population_1 ( cityid ( 'boston', _ ) ) )"])]


def test_the_length_rule_holds_out_the_longest_programs_with_their_ties():
    kept, held = heldout_longest(EXAMPLES, 2, seed=0)
    assert [e.utterance for e in held] == ["q1", "q3", "q4"]  # 14 tokens, and both of 13: no length on both sides
    assert len(kept) + len(held) == len(EXAMPLES) and not {id(e) for e in kept} & {id(e) for e in held}
    assert max(len(e.program.split()) for e in kept) < min(len(e.program.split()) for e in held)
    assert [e.utterance for e in heldout_longest(EXAMPLES, 1, seed=0)[1]] == ["q4"]
    kept, held = heldout_longest(EXAMPLES[:1] * 3, 1, seed=0)  # all of one length: all of them go
    assert not kept and len(held) == 3  # (ParsingDataModule refuses that, naming data.heldout)


def test_the_template_rule_holds_out_whole_templates():
    assert template("answer ( population_1 ( cityid ( 'austin', 'tx' ) ) )") == \
        "answer ( population_1 ( cityid ( _city_ ) ) )"
    for seed in range(6):
        kept, held = heldout_templates(template)(EXAMPLES, 2, seed)
        assert len(held) >= 2 and len(kept) + len(held) == len(EXAMPLES)
        assert not {template(e.program) for e in kept} & {template(e.program) for e in held}
    seeds = {tuple(e.utterance for e in heldout_templates(template)(EXAMPLES, 2, seed)[1]) for seed in range(6)}
    assert len(seeds) > 1  # the seed chooses the templates


def test_the_random_rule_is_a_seeded_draw():
    first, again = heldout_random(EXAMPLES, 3, seed=1), heldout_random(EXAMPLES, 3, seed=1)
    assert first == again and len(first[1]) == 3
    assert {tuple(e.utterance for e in heldout_random(EXAMPLES, 3, seed)[1]) for seed in range(5)} != {
        tuple(e.utterance for e in first[1])}


def test_the_add_primitive_rule_leaves_the_analogue_alone_in_training_as_often_as_the_primitive():
    commands = ["turn left", "turn left", "turn left", "turn right", "turn right twice", "walk after turn right",
                "jump right", "walk left twice", "turn around right"]
    examples = [Example(c, f"P{i}", {}) for i, c in enumerate(commands)]
    kept, held = heldout_compositions("turn left", "turn right")(examples, 1, seed=0)
    assert [e.utterance for e in kept].count("turn right") == 3  # as often as the lone "turn left"
    assert not [e for e in kept if "turn right" in e.utterance and e.utterance != "turn right"]  # none composed
    assert len(held) == 1 and held[0].utterance in {"turn right twice", "walk after turn right"}
    assert {e.utterance for e in kept} == {"turn left", "turn right", "jump right", "walk left twice",
                                           "turn around right"}  # ("turn around right" is not "turn right")
    assert len(heldout_compositions("turn left", "turn right")(examples, 10, seed=0)[1]) == 2  # all there are
    with pytest.raises(DataConfigError, match="commands composing 'run'"):
        heldout_compositions("jump", "run")(examples, 1, seed=0)


@needs_mirror
def test_a_turn_left_heldout_run_validates_on_no_composition_of_its_analogue():
    dm = ParsingDataModule("scan_turn_left", heldout=1000)
    dm.setup()
    composes = lambda e: " turn opposite left " in f" {e.utterance} " and e.utterance != "turn opposite left"  # noqa
    assert len(dm.test) == 1000 and all(map(composes, dm.test))
    for part in (dm.train, dm.val):  # the validation slice is drawn after the rule, from what it kept
        assert not [e for e in part if composes(e)]
    lone = sum(e.utterance == "turn opposite left" for e in dm.train + dm.val)
    assert lone == sum(e.utterance == "turn left" for e in read_splits("scan_turn_left")["train"])


@needs_mirror
@pytest.mark.parametrize("data", ["geo_funql_length", "geo_funql_template", "geo_funql_iid"])
def test_a_heldout_run_trains_on_the_rest_and_never_reads_the_test_set(data):
    splits = read_splits(data)
    dm = ParsingDataModule(data, heldout=100)
    dm.setup()
    train = {(e.utterance, e.program) for e in dm.train}
    held = [(e.utterance, e.program) for e in dm.test]
    assert len(dm.test) >= 100 and len(dm.train) + len(dm.test) == len(splits["train"])
    assert not train & set(held) or data == "geo_funql_iid"  # (IID has duplicate questions in train)
    assert {id(e) for e in dm.test} <= {id(e) for e in splits["train"]}  # from train alone, not the test set
    assert [e.utterance for e in dm.val] == [e.utterance for e in splits["dev"]]
    again = ParsingDataModule(data, heldout=100)
    again.setup()
    assert [(e.utterance, e.program) for e in again.test] == held  # deterministic
    if data == "geo_funql_length":  # every program of length 16, the longest of its training set
        assert min(len(p.split()) for _, p in held) > max(len(p.split()) for _, p in train) and len(held) == 215
    size = len(splits["train"])
    with pytest.raises(DataConfigError, match=f"data.heldout={size}, but {data} has only {size} training examples"):
        ParsingDataModule(data, heldout=size).setup()


def test_heldout_is_named_in_the_variant_and_refused_where_no_rule_exists():
    cfg = compose_run("model=span_cky", "data=geo_funql_length", "data.heldout=100")
    assert cfg.subsample == "-heldout100"
    assert compose_run("model=span_cky", "data=geo_funql_length", "data.heldout=100", "data.val_seed=2").subsample \
        == "-heldout100s2"
    with pytest.raises(DataConfigError, match="data.heldout=50: scan_simple has no rule.*geo_funql_iid"):
        ParsingDataModule("scan_simple", heldout=50)


def test_the_heldout_table_holds_the_settings_runs_and_nothing_else():
    spec = importlib.util.spec_from_file_location("heldout_table", REPO / "benchmarks" / "heldout_table.py")
    heldout_table = sys.modules.setdefault("heldout_table", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(heldout_table)

    def run(variant, data, seed, denotation):
        return {"model": "span_cky", "variant": variant, "backbone": "minilm-l6", "data": data, "seed": seed,
                "test_exact_match": 0.1, "test_denotation": denotation}

    runs = pd.DataFrame([run("spanbasedsp-heldout100", "geo_funql_length", 1, 0.4),
                         run("spanbasedsp-heldout100", "geo_funql_length", 2, 0.6),
                         run("function_words-heldout100", "geo_funql_iid", 1, 0.8),
                         run("spanbasedsp", "geo_funql_length", 1, 0.99)])  # a test-set run: not a choice
    table = heldout_table.heldout_tables(runs)
    assert "## span_cky · minilm-l6 · heldout100" in table and "99" not in table
    assert "| setting | geo_funql_iid | geo_funql_length | mean |" in table
    assert "| function_words | 80.0 (1) |  |  |" in table and "| spanbasedsp |  | 50.0 ± 14.1 (2) |  |" in table
    both = heldout_table.heldout_tables(pd.concat([runs, pd.DataFrame([run("spanbasedsp-heldout100", "geo_funql_iid",
                                                                          1, 0.7)])]))
    assert "| spanbasedsp | 70.0 (1) | 50.0 ± 14.1 (2) | 60.0 |" in both
