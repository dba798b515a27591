"""IR pipelines (zoo/ir/pipeline.py) end to end on debug=smoke, and the bert2bert_minilm backbone offline."""
import json
import time

import pytest
import torch
from omegaconf import open_dict

from conftest import compose_run, needs_mirror
from zoo.ir import UnsupportedIRError
from zoo.ir.pipeline import PIPELINES, Stage, Transforms, chain, stage_directories, stage_example
from zoo.stages import stage_directory
from zoo.results import read_rows
from zoo.launch import run
from zoo.train import RunConfigError
from zoo.types import Example


def smoke(tmp_path, *overrides):
    return compose_run("debug=smoke", f"results_file={tmp_path / 'runs.csv'}", f"ir_stages_dir={tmp_path / 'stages'}",
                       *overrides)


def test_stage_examples_follow_the_paper_table():
    transforms = Transforms("scan", {"rir", "lir", "lir+rir"})
    example = Example("jump opposite right twice", " ".join(["I_TURN_RIGHT", "I_TURN_RIGHT", "I_JUMP"] * 2))
    first, second = PIPELINES["lir_ind+rir"]
    assert stage_example(transforms, first, example).program == (
        "( ( I_TURN_RIGHT I_TURN_RIGHT I_JUMP ) ( I_TURN_RIGHT I_TURN_RIGHT I_JUMP ) )")
    rewritten = stage_example(transforms, second, example)
    assert rewritten.utterance == ("jump opposite right twice [SEP] "
                                   "( ( I_TURN_RIGHT ACTION I_JUMP ) ( I_TURN_RIGHT ACTION I_JUMP ) )")
    assert rewritten.program == stage_example(transforms, first, example).program
    assert stage_example(transforms, Stage("lir", "program"), example).utterance == (
        "jump opposite right twice [SEP] I_TURN_RIGHT ACTION I_JUMP I_TURN_RIGHT ACTION I_JUMP")


def test_each_ir_definition_trains_its_own_stages_and_the_zoo_s_keep_their_earlier_names():
    paper, zoo = compose_run("ir=rir", "data=scan_length"), compose_run("ir=rir", "data=scan_length",
                                                                        "ir_definition=zoo")
    assert paper.ir_definition == "paper"
    assert stage_directories(paper, PIPELINES["rir"]) != stage_directories(zoo, PIPELINES["rir"])
    assert stage_directories(zoo, PIPELINES["rir"]) == [stage_directory(zoo, zoo.ir_stages_dir, "x_to_rir")]
    assert compose_run("experiment=seq2seq_grid_cpu").ir_definition == "zoo"  # the grid's rows were measured so


def test_an_option_added_later_keeps_the_stage_directories_of_earlier_runs_at_its_default(tmp_path):
    before = compose_run("ir=rir", "data=scan_length")
    with open_dict(before):
        del before.data["heldout"]  # a run composed before data.heldout existed
    assert stage_directory(compose_run("ir=rir", "data=scan_length"), tmp_path, "x") == stage_directory(
        before, tmp_path, "x")
    assert stage_directory(compose_run("ir=rir", "data=scan_length", "data.heldout=100"), tmp_path, "x") != \
        stage_directory(before, tmp_path, "x")


@needs_mirror
def test_unknown_pipeline_and_formalism_without_irs_fail_before_training(tmp_path):
    with pytest.raises(UnsupportedIRError, match="choose one of none, rir, lir_d"):
        run(smoke(tmp_path, "data=scan_simple", "ir=lir"), tmp_path / "run")
    with pytest.raises(UnsupportedIRError, match="no IR 'rir' for formalism 'funql'; available: none"):
        run(smoke(tmp_path, "data=geo_funql_iid", "ir=rir"), tmp_path / "run")
    with pytest.raises(RunConfigError, match="needs model=seq2seq"):
        run(smoke(tmp_path, "model=span_cky", "data=scan_sp_simple", "ir=rir"), tmp_path / "run")
    assert not (tmp_path / "run").exists() and not (tmp_path / "stages").exists()


@needs_mirror
def test_two_stage_pipeline_end_to_end_shares_stages(tmp_path):
    cfg = smoke(tmp_path, "data=scan_length", "ir=lir_ind+rir")
    assert cfg.model.variant == "lir_ind+rir" and cfg.subsample == "-train32-eval8"  # debug=smoke: 32 to train, 8 to evaluate
    row = run(cfg, tmp_path / "pipeline")
    assert row["variant"] == "lir_ind+rir-train32-eval8" and row["n_test"] == 8 and row["ir_definition"] == "paper"
    assert 0.0 <= row["test_exact_match"] <= 1.0 and 0.0 <= row["test_stage1_exact_match"] <= 1.0
    assert [r["variant"] for r in read_rows(tmp_path / "runs.csv")] == ["lir_ind+rir-train32-eval8"]
    stage_dirs = row["stage_dirs"].split()
    assert [d.split("/")[-1].split("-")[0] for d in stage_dirs] == ["x_to_rir", "x+lir+rir_to_rir"]
    predictions = [json.loads(line) for line in (tmp_path / "pipeline" / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 8
    for p in predictions:
        assert {"utterance", "gold", "prediction", "correct", "stage1_rir", "stage2_rir"} <= set(p)
        assert p["correct"] or "error" in p or p["prediction"] != p["gold"]
    assert json.loads((tmp_path / "pipeline" / "ir.json").read_text())["formalism"] == "scan"

    # ir=rir needs only x -> z_r, which the pipeline above trained: no training, the same first-stage outputs
    before = (tmp_path / "stages").stat().st_mtime_ns, sorted(p.name for p in (tmp_path / "stages").rglob("*.ckpt"))
    rir = run(smoke(tmp_path, "data=scan_length", "ir=rir"), tmp_path / "rir")
    assert rir["stage_dirs"] == stage_dirs[0]
    assert sorted(p.name for p in (tmp_path / "stages").rglob("*.ckpt")) == before[1]
    rir_predictions = [json.loads(line) for line in (tmp_path / "rir" / "predictions.jsonl").read_text().splitlines()]
    assert [p["stage1_rir"] for p in rir_predictions] == [p["stage1_rir"] for p in predictions]


def test_a_final_ir_that_does_not_invert_is_wrong_with_its_reason(tmp_path, monkeypatch):
    transforms = Transforms("scan", {"rir"})
    monkeypatch.setattr("zoo.ir.pipeline.predict", lambda model, sources, batch_size: ["( I_JUMP", "I_JUMP"])
    monkeypatch.setattr("zoo.ir.pipeline.load_stage_model", lambda stage_dir: torch.nn.Identity())
    test = [Example("jump", "I_JUMP"), Example("jump", "I_JUMP")]
    rows, stage1_correct, _ = chain(PIPELINES["rir"], [tmp_path], transforms, test, batch_size=2)
    assert stage1_correct == 1
    assert rows[0]["prediction"] == "" and rows[0]["correct"] is False
    assert "does not invert" in rows[0]["error"] and "'(' left open" in rows[0]["error"]
    assert rows[1]["prediction"] == "I_JUMP" and "error" not in rows[1]


@needs_mirror
def test_graphq_pipeline_scores_the_compiled_sparql(tmp_path):
    row = run(smoke(tmp_path, "data=cfq_mcd1", "ir=graphq"), tmp_path / "graphq")
    assert row["variant"] == "graphq-train32-eval8" and row["stage_dirs"].split("/")[-1].startswith("x_to_graphq-")
    predictions = [json.loads(line) for line in (tmp_path / "graphq" / "predictions.jsonl").read_text().splitlines()]
    for p in predictions:  # the stage writes IR; what is scored is SPARQL (or nothing, with the parse error)
        assert p["gold"].startswith("SELECT") and p["stage1_graphq"].split()[:1] != ["SELECT"]
        assert p["prediction"].startswith("SELECT") or "graphq:" in p["error"]
    with pytest.raises(UnsupportedIRError, match="no IR 'graphq' for formalism 'sql'; available: lir, rir"):
        run(smoke(tmp_path, "data=geo_sql_template", "ir=graphq"), tmp_path / "sql")


def test_runs_that_need_one_stage_at_once_train_it_once(tmp_path, monkeypatch):
    """Two processes (here threads, each opening the stage directory for its lock) asking for one stage: one trains
    it, the other waits for it and reads its row."""
    import threading

    import zoo.train
    from zoo.results import append_row
    from zoo.stages import run_stage

    trainings = []

    def train(cfg, stage_dir, **_):
        trainings.append(stage_dir)
        time.sleep(0.5)  # long enough for the other to arrive while this one trains
        append_row(cfg.results_file, {"variant": cfg.model.variant, "test_exact_match": 0.5})

    monkeypatch.setattr(zoo.train, "train_and_test", train)
    cfg = compose_run("debug=smoke", f"ir_stages_dir={tmp_path}")
    rows = []
    threads = [threading.Thread(target=lambda: rows.append(run_stage(cfg, "input", tmp_path / "input", None)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(trainings) == 1 and len(rows) == 2 and rows[0] == rows[1]
