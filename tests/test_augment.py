"""Subtree substitution (zoo.augment): which nodes are exchangeable, what substitution makes, the two-stage run."""
import json

import pytest

import zoo

from conftest import compose_run, needs_mirror
from models.cky import JOIN, PHI, SpanNode
from models.span_programs import FunQLSpans
from zoo.augment import AugmentError, exchangeable_nodes, substitute
from zoo.launch import run
from zoo.results import read_rows
from zoo.stages import load_stage_model
from zoo.train import RunConfigError

LANGUAGE = FunQLSpans()
CATEGORIES = ["largest", "loc_2", "population_1", "river", "state", "stateid ( 'alaska' )"]
C = {category: i for i, category in enumerate(CATEGORIES)}


def leaf(start: int, category: str) -> SpanNode:
    return SpanNode(start, start + 1, C[category])


# "population of alaska": population_1 ( stateid ( 'alaska' ) ), "of" left φ
POPULATION = ("population of alaska".split(), "answer ( population_1 ( stateid ( 'alaska' ) ) )",
              SpanNode(0, 3, JOIN, (leaf(0, "population_1"), SpanNode(1, 2, PHI), leaf(2, "stateid ( 'alaska' )"))))
# "rivers in the largest state": river ( loc_2 ( largest ( state ( all ) ) ) ), "the" left φ
RIVERS = ("rivers in the largest state".split(), "answer ( river ( loc_2 ( largest ( state ( all ) ) ) ) )",
          SpanNode(0, 5, JOIN, (leaf(0, "river"), SpanNode(1, 5, JOIN, (leaf(1, "loc_2"), SpanNode(2, 5, JOIN, (
              SpanNode(2, 3, PHI), SpanNode(3, 5, JOIN, (leaf(3, "largest"), leaf(4, "state"))))))))))


def test_exchangeable_nodes_are_whole_typed_expressions_below_the_root():
    slots = exchangeable_nodes(1, RIVERS[2], RIVERS[1], LANGUAGE, CATEGORIES)
    largest = ("largest", ("state", "all"))
    # "the largest state" is "largest state" without its φ edge; loc_2 ( ... ) is another; bare predicates and kinds
    # (waiting for an argument) and the whole program are not exchangeable
    assert sorted((s.start, s.end, s.program) for s in slots) == [(1, 5, ("loc_2", largest)), (3, 5, largest)]
    assert {s.type for s in slots if s.program == largest} == {frozenset({"state"})}
    assert [(s.start, s.end) for s in exchangeable_nodes(0, *POPULATION[2:], POPULATION[1], LANGUAGE, CATEGORIES)
            ] == [(2, 3)]


def test_substitution_exchanges_phrases_and_sub_programs_of_one_type():
    tokens, programs = [POPULATION[0], RIVERS[0]], [POPULATION[1], RIVERS[1]]
    slots = (exchangeable_nodes(0, POPULATION[2], POPULATION[1], LANGUAGE, CATEGORIES)
             + exchangeable_nodes(1, RIVERS[2], RIVERS[1], LANGUAGE, CATEGORIES))
    made = substitute(tokens, programs, slots, ratio=10, seed=1, language=LANGUAGE)
    assert {(e.utterance, e.program) for e in made} == {  # every substitution there is, once; none of training's
        ("population of largest state", "answer ( population_1 ( largest ( state ( all ) ) ) )"),
        ("rivers in the alaska", "answer ( river ( loc_2 ( stateid ( 'alaska' ) ) ) )")}
    assert len(made) == 2 and all(len(e.meta["substituted"]) == 2 for e in made)
    grown = substitute(tokens, programs, slots, ratio=10, seed=1, language=LANGUAGE, grow=True)
    assert [e.utterance for e in grown] == ["population of largest state"]
    one = substitute(tokens, programs, slots, ratio=0.5, seed=3, language=LANGUAGE)
    assert len(one) == 1 and one == substitute(tokens, programs, slots, ratio=0.5, seed=3, language=LANGUAGE)


def smoke(tmp_path, *overrides):
    return compose_run("debug=smoke", "model=span_cky", "data=geo_funql_length",
                       f"results_file={tmp_path / 'results' / 'runs.csv'}",
                       f"augment.stages_dir={tmp_path / 'stages'}", *overrides)


def test_bad_settings_fail_before_training(tmp_path):
    with pytest.raises(AugmentError, match=r"augment.ratio=0"):
        run(smoke(tmp_path, "augment=subs", "augment.ratio=0"), tmp_path / "run")
    with pytest.raises(RunConfigError, match="use model=span_cky"):
        run(smoke(tmp_path, "augment=subs", "model=seq2seq"), tmp_path / "run")
    with pytest.raises(AugmentError, match="scan_sp_simple is scan"):
        run(smoke(tmp_path, "augment=subs", "data=scan_sp_simple"), tmp_path / "run")
    with pytest.raises(AugmentError, match=r"augment.ratio=\[1, 2\] trains a second parser per ratio"):
        run(smoke(tmp_path, "augment=subs", "augment.ratio=[1,2]"), tmp_path / "run")
    with pytest.raises(AugmentError, match=r"augment.ensemble_checkpoints='best\+final': expected best or last"):
        run(smoke(tmp_path, "augment=subs", "augment.ensemble=true", "augment.ensemble_checkpoints=best+final"),
            tmp_path / "run")
    assert not (tmp_path / "stages").exists()


@needs_mirror
def test_two_stage_run_trains_on_substituted_examples(tmp_path, monkeypatch):
    row = run(smoke(tmp_path, "augment=subs", "augment.ratio=2"), tmp_path / "subs")
    assert row["variant"].startswith("spanbasedsp+subs2-train32") and row["n_train"] == 32 and row["n_test"] == 8
    trees_dir, subs_dir = row["stage_dirs"].split()
    assert trees_dir.split("/")[-1].startswith("trees-") and subs_dir.split("/")[-1].startswith("subs-")
    details = json.loads((tmp_path / "subs" / "augment.json").read_text())
    augmented = tmp_path / "subs" / "augmented.jsonl"
    assert details["augmented"] == len(augmented.read_text().splitlines()) <= 64
    stage_rows = [read_rows(f"{d}/runs.csv")[-1] for d in (trees_dir, subs_dir)]
    assert [int(r["n_train"]) for r in stage_rows] == [32, 32 + details["augmented"]]
    assert stage_rows[0]["variant"] == "stage:trees"  # a stage's row names the stage only
    assert row["test_stage1_denotation"] == float(stage_rows[0]["test_denotation"])  # the setting unaugmented
    assert len((tmp_path / "subs" / "predictions.jsonl").read_text().splitlines()) == 8
    parser = zoo.load(tmp_path / "subs")  # the second parser
    assert parser.kind == "span_cky" and len(parser.parse(["how many rivers are in texas ?"])) == 1

    # another ratio trains the second parser only
    other = run(smoke(tmp_path, "augment=subs"), tmp_path / "subs1")
    assert other["stage_dirs"].split()[0] == trees_dir and other["stage_dirs"].split()[1] != subs_dir

    # the two parsers together: nothing trains again, the second parser alone is kept for comparison
    ensemble = run(smoke(tmp_path, "augment=subs", "augment.ratio=2", "augment.ensemble=true"), tmp_path / "ens")
    assert ensemble["variant"].startswith("spanbasedsp+subs2+ensemble") and ensemble["stage_dirs"] == row["stage_dirs"]
    assert ensemble["test_stage2_denotation"] == row["test_denotation"]
    assert ensemble["test_stage1_denotation"] == row["test_stage1_denotation"]
    assert 0 <= ensemble["test_denotation"] <= 1
    assert len((tmp_path / "ens" / "predictions.jsonl").read_text().splitlines()) == 8

    # each parser with its best and its last weights: four score tables, and still nothing trains again
    loaded = []
    monkeypatch.setattr("zoo.augment.load_stage_model",
                        lambda stage_dir, checkpoint="best": loaded.append((str(stage_dir), checkpoint))
                        or load_stage_model(stage_dir, checkpoint))
    four = run(smoke(tmp_path, "augment=subs", "augment.ratio=2", "augment.ensemble=true",
                     "augment.ensemble_checkpoints=best+last"), tmp_path / "ens4")
    assert four["variant"].startswith("spanbasedsp+subs2+ensemble_best_last") and four["stage_dirs"] == row["stage_dirs"]
    assert set(loaded) == {(d, c) for d in (trees_dir, subs_dir) for c in ("best", "last")}
    assert four["test_stage2_denotation"] == row["test_denotation"] and 0 <= four["test_denotation"] <= 1

    # a second parser per ratio, all three parsers together: the two ratios' parsers above, so nothing trains again
    three = run(smoke(tmp_path, "augment=subs", "augment.ratio=[2,1]", "augment.ensemble=true"), tmp_path / "ens3")
    assert three["variant"].startswith("spanbasedsp+subs2_1+ensemble")
    assert three["stage_dirs"].split() == [trees_dir, subs_dir, other["stage_dirs"].split()[1]]
    assert (three["test_stage2_denotation"], three["test_stage3_denotation"]) == (row["test_denotation"],
                                                                                 other["test_denotation"])
    assert json.loads((tmp_path / "ens3" / "augment.json").read_text())["augmented_per_ratio"] == [
        details["augmented"], json.loads((tmp_path / "subs1" / "augment.json").read_text())["augmented"]]
