"""benchmarks/run.py end to end on debug=smoke: the results row, predictions, resume, and bad input."""
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime

import lightning.pytorch as L
import pytest
import torch

from conftest import REPO, compose_run, needs_mirror
from zoo.parser import UnsupportedFormalismError
from zoo.registry import RegistryError
import zoo.results
from zoo.results import append_row, read_rows
from zoo.launch import finished_rows, run
from zoo.train import RunCheckpoint, RunConfigError

pytestmark = needs_mirror


class CrashAfterSteps(L.Callback):
    """Stands in for a killed job: raises once training reaches ``steps`` optimiser steps."""

    def __init__(self, steps: int):
        self.steps = steps

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step >= self.steps:
            raise RuntimeError("simulated crash")


def smoke(tmp_path, *overrides):
    return compose_run("debug=smoke", f"results_file={tmp_path / 'runs.csv'}", *overrides)


def test_cli_smoke_run_writes_a_row_and_predictions(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "benchmarks/run.py", "model=seq2seq", "data=scan_simple", "debug=smoke",
                             f"hydra.run.dir={tmp_path / 'run'}", f"results_file={tmp_path / 'runs.csv'}"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    [row] = read_rows(tmp_path / "runs.csv")
    assert row["model"] == "seq2seq" and row["data"] == "scan_simple" and row["seed"] == "1"
    assert row["smoke"] == "True"  # which keeps it off the headline table wherever it is written
    assert 0.0 <= float(row["test_exact_match"]) <= 1.0
    for column in ("git_commit", "params", "train_seconds", "epochs", "train_examples_per_s", "test_examples_per_s",
                   "hardware", "peak_memory_mb", "best_val"):
        assert row[column] != "", column
    assert 0 < float(row["test_examples_per_s"]) < 1e6  # the test loop was timed
    predictions = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == int(row["n_test"]) == 8
    for p in predictions:  # SCAN actions do not execute; "error" says why a malformed prediction was wrong
        assert set(p) - {"error"} == {"utterance", "gold", "prediction", "correct"}


def test_same_seed_gives_the_same_run(tmp_path):
    rows = [run(smoke(tmp_path), tmp_path / f"run{i}") for i in range(2)]
    assert rows[0]["test_exact_match"] == rows[1]["test_exact_match"]
    weights = [torch.load(tmp_path / f"run{i}" / "checkpoints" / "best.ckpt", weights_only=False)["state_dict"]
               for i in range(2)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_interrupted_run_leaves_no_row_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["trainer.max_steps=6", "data.limit_train=64", "checkpoint_every_n_steps=2"]
    crashing = smoke(tmp_path, *overrides, "+callbacks.crash._target_=test_train.CrashAfterSteps",
                     "+callbacks.crash.steps=4")
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(crashing, run_dir)
    assert read_rows(tmp_path / "runs.csv") == []
    # Lightning runs checkpoint callbacks last, so the crash at step 4 comes before that step's save.
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2

    with pytest.raises(RunConfigError, match="ckpt_path=last"):
        run(smoke(tmp_path, *overrides), run_dir)  # a fresh start would clobber the checkpoints

    crashed = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["callbacks"]["Throughput"]
    row = run(smoke(tmp_path, *overrides, "ckpt_path=last"), run_dir)
    assert row["resumed"] is True and row["global_steps"] == 6
    # the counts carry over the resume: the row covers all 6 steps, not the 4 after it
    resumed = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["callbacks"]["Throughput"]
    assert resumed["examples"] == 3 * crashed["examples"] > 0
    assert row["train_seconds"] >= round(crashed["fit_seconds"], 1)
    assert len(read_rows(tmp_path / "runs.csv")) == 1

    row = run(smoke(tmp_path, *overrides, "overwrite=true"), run_dir)  # starts again from step 0
    assert row["resumed"] is False and row["global_steps"] == 6


def test_resume_true_starts_resumes_or_skips_a_finished_run(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["trainer.max_steps=6", "data.limit_train=64", "checkpoint_every_n_steps=2", "resume=true",
                 "protocol=p1"]
    with pytest.raises(RuntimeError, match="simulated crash"):  # nothing to resume: it starts
        run(smoke(tmp_path, *overrides, "+callbacks.crash._target_=test_train.CrashAfterSteps",
                  "+callbacks.crash.steps=4"), run_dir)
    row = run(smoke(tmp_path, *overrides), run_dir)  # interrupted: it resumes
    assert row["resumed"] is True and row["global_steps"] == 6
    again = run(smoke(tmp_path, *overrides), run_dir)  # finished under this protocol: nothing runs
    assert again["time"] == row["time"] and len(read_rows(tmp_path / "runs.csv")) == 1
    with pytest.raises(RunConfigError, match="finished run of protocol p1"):  # not resumed from p1's end
        run(smoke(tmp_path, *overrides[:-1], "protocol=p2"), run_dir)
    run(smoke(tmp_path, *overrides[:-1], "protocol=p2", "overwrite=true"), run_dir)  # another protocol runs
    assert [r["protocol"] for r in read_rows(tmp_path / "runs.csv")] == ["p1", "p2"]

    # p2's checkpoints moved aside; a p3 launch there is interrupted, so its checkpoints come after p2's row
    shutil.move(run_dir / "checkpoints", tmp_path / "p2-checkpoints")
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(smoke(tmp_path, *overrides[:-1], "protocol=p3", "+callbacks.crash._target_=test_train.CrashAfterSteps",
                  "+callbacks.crash.steps=4"), run_dir)
    finished = datetime.fromisoformat(read_rows(tmp_path / "runs.csv")[-1]["time"]).timestamp()
    os.utime(run_dir / "checkpoints" / "last.ckpt", (finished + 60, finished + 60))  # as if saved a minute later
    row = run(smoke(tmp_path, *overrides[:-1], "protocol=p3"), run_dir)  # resumed, not refused
    assert row["resumed"] is True and row["protocol"] == "p3"


def test_test_only_retests_the_best_checkpoint_without_training(tmp_path):
    trained = run(smoke(tmp_path, "checkpoint_every_n_steps=3"), tmp_path / "run")
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == trained["global_steps"] == 4  # the end state, not step 3's
    best = tmp_path / "run" / "checkpoints" / "best.ckpt"
    saved = best.stat().st_mtime_ns
    retested = run(smoke(tmp_path, "test_only=true"), tmp_path / "run")
    assert retested["test_exact_match"] == trained["test_exact_match"]
    assert retested["retested_checkpoint"] == str(best) and best.stat().st_mtime_ns == saved  # nothing trained
    assert retested["train_seconds"] == retested["epochs"] == ""
    assert retested["best_val"] == trained["best_val"]  # restored with the checkpoint
    assert len(read_rows(tmp_path / "runs.csv")) == 2
    with pytest.raises(RunConfigError, match="test_only=true: no checkpoint"):
        run(smoke(tmp_path, "test_only=true"), tmp_path / "empty")


def test_resume_without_a_checkpoint_is_an_error(tmp_path):
    with pytest.raises(RunConfigError, match="no checkpoint"):
        run(smoke(tmp_path, "ckpt_path=last"), tmp_path / "empty")


def test_a_damaged_results_file_is_refused_before_training(tmp_path):
    """The finished run's row could not be appended to it: refused now, not lost after training."""
    results = tmp_path / "runs.csv"
    results.write_text("model,variant,backbone,data,seed,run_dir\nseq2seq,baseline,bart,scan_simple,1,runs/a,extra\n")
    with pytest.raises(RunConfigError, match=rf"^{re.escape(str(results))}:2: 7 cells .*before training"):
        run(smoke(tmp_path), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    results.write_text("dataset,split,programs\ncfq_mcd1,train,10\n")  # another kind of table
    with pytest.raises(RunConfigError, match=r"runs.csv:1: no column 'model'"):
        run(smoke(tmp_path), tmp_path / "run")
    with pytest.raises(RunConfigError, match=r"runs.csv/runs.csv: cannot write there"):  # no folder can be made
        run(smoke(tmp_path, f"results_file={results / 'runs.csv'}"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_run_in_the_repository_records_its_directory_relative_to_it(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo.results, "REPO_ROOT", tmp_path)  # as if tmp_path were the checkout
    row = run(smoke(tmp_path), tmp_path / "runs" / "x")
    assert row["run_dir"] == "runs/x" == read_rows(tmp_path / "runs.csv")[0]["run_dir"]
    assert run(smoke(tmp_path, "resume=true"), tmp_path / "runs" / "x")["time"] == row["time"]  # found: done
    retested = run(smoke(tmp_path, "test_only=true"), tmp_path / "runs" / "x")
    assert retested["retested_checkpoint"] == "runs/x/checkpoints/best.ckpt"


def test_finished_rows_take_run_dirs_relative_to_the_repository_or_absolute(tmp_path, monkeypatch):
    """Rows before issue 25 hold absolute run directories, later ones directories relative to the repository."""
    monkeypatch.setattr(zoo.results, "REPO_ROOT", tmp_path)
    run_dir = tmp_path / "runs" / "seq2seq-baseline" / "scan_simple" / "seed1"
    key = {"model": "seq2seq", "variant": "baseline", "backbone": "bart", "data": "scan_simple", "seed": 1}
    for recorded, protocol in ((str(run_dir), "old"), ("runs/seq2seq-baseline/scan_simple/seed1", "new"),
                               ("runs/seq2seq-baseline/scan_simple/seed2", "other")):
        append_row(tmp_path / "runs.csv", {**key, "run_dir": recorded, "protocol": protocol})
    assert [row["protocol"] for row in finished_rows(smoke(tmp_path), run_dir)] == ["old", "new"]


def test_unknown_names_fail_before_any_work(tmp_path):
    cfg = smoke(tmp_path)
    cfg.model.name = "nonexistent"
    with pytest.raises(RegistryError, match="registered models: .*seq2seq"):
        run(cfg, tmp_path / "run")
    cfg = smoke(tmp_path)
    cfg.data.name = "scan_nope"
    with pytest.raises(RegistryError, match="registered datasets: .*scan_simple"):
        run(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_model_on_an_unsupported_formalism_fails_before_training(tmp_path, monkeypatch):
    from models.seq2seq import Seq2Seq

    monkeypatch.setattr(Seq2Seq, "supported_formalisms", ("funql",))
    with pytest.raises(UnsupportedFormalismError, match="does not support formalism 'scan'"):
        run(smoke(tmp_path), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_cli_reports_bad_names_without_a_traceback(tmp_path):
    result = subprocess.run([sys.executable, "benchmarks/run.py", "data=scan_simple", "debug=smoke",
                             "ckpt_path=last", f"hydra.run.dir={tmp_path / 'run'}"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert "error: ckpt_path=last: no checkpoint" in result.stderr
    assert "Traceback" not in result.stderr


def test_executable_dataset_reports_denotation_and_keeps_failure_reasons(tmp_path):
    """SCAN-SP programs execute, so a run reports test_denotation and every prediction row says whether its
    denotation was right and, for a prediction that does not parse or type-check, why."""
    row = run(smoke(tmp_path, "data=scan_sp_simple"), tmp_path / "run")
    assert 0.0 <= row["test_denotation"] <= 1.0
    predictions = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert all(isinstance(p["denotation_correct"], bool) for p in predictions)
    failed = [p for p in predictions if "error" in p]
    assert failed, "a 4-step model emits malformed programs; their reasons should be kept"  # seeded: deterministic
    for p in failed:
        assert p["denotation_correct"] is False and not p["correct"] and p["error"].startswith("scan_sp")


def test_convergence_rule_on_synthetic_curves():
    from zoo.train import convergence_columns, late_gain

    # 10,000 steps: the last 30% start after step 7,000
    rising = [(step, step / 10_000) for step in range(1000, 10_001, 1000)]
    assert late_gain(rising, 10_000) == pytest.approx(1.0 - 0.7)
    assert convergence_columns(rising, 10_000) == {"val_late_gain": 0.3, "converged": False}
    plateau = [(1000, 0.5), (4000, 0.95), (7000, 0.99), (8000, 0.995), (10_000, 0.997)]
    assert late_gain(plateau, 10_000) == pytest.approx(0.007)
    assert convergence_columns(plateau, 10_000)["converged"] is True
    dipping = [(5000, 0.9), (8000, 0.8), (10_000, 0.85)]  # worse late: no gain, converged
    assert late_gain(dipping, 10_000) == 0.0
    exactly_one_point = [(7000, 0.5), (10_000, 0.51)]
    assert convergence_columns(exactly_one_point, 10_000)["converged"] is False
    late_only = [(9000, 0.4), (10_000, 0.6)]  # no evaluation before the last 30%: cannot tell, so not converged
    assert late_gain(late_only, 10_000) is None
    assert convergence_columns(late_only, 10_000) == {"val_late_gain": "", "converged": False}


def test_run_row_carries_the_validation_curve_verdict(tmp_path):
    cfg = smoke(tmp_path, "model=seq2seq", "data=scan_simple",
                "trainer.max_steps=8", "+trainer.val_check_interval=2", "trainer.check_val_every_n_epoch=null",
                "trainer.max_epochs=-1")
    row = run(cfg, tmp_path / "run")
    # validations at steps 2, 4, 6, 8: the late gain is the best of all over the best of steps 2 and 4
    assert row["val_late_gain"] >= 0 and row["converged"] == (row["val_late_gain"] < 0.01)


def test_stop_when_converged_stops_at_the_first_converged_validation():
    from types import SimpleNamespace

    from zoo.train import ValidationCurve

    def validate(curve, trainer, points):
        for step, value in points:
            trainer.global_step, trainer.callback_metrics = step, {"val/exact_match": torch.tensor(value)}
            curve.on_validation_end(trainer, None)
            yield step, trainer.should_stop

    curve = ValidationCurve("val/exact_match", stop_when_converged=True)
    trainer = SimpleNamespace(sanity_checking=False, should_stop=False, global_step=0, callback_metrics={},
                              min_steps=None)
    rising_then_flat = [(1000, 0.5), (2000, 0.9), (3000, 0.95), (4000, 0.955), (5000, 0.958)]
    # at 4,000 steps the best of steps <= 2,800 is 0.9: still rising by 5.5 points; at 5,000 (cut 3,500), 0.8
    assert [stop for _, stop in validate(curve, trainer, rising_then_flat)] == [False] * 4 + [True]

    # flat before min_steps (no gain from step 500 to 1,000) is no reason to stop once min_steps are reached
    curve = ValidationCurve("val/exact_match", stop_when_converged=True)
    trainer.should_stop, trainer.min_steps = False, 2000
    early_flat = [(500, 0.1), (1000, 0.1), (1500, 0.3), (2000, 0.6)]
    assert [stop for _, stop in validate(curve, trainer, early_flat)] == [False] * 4
    assert not ValidationCurve("val/exact_match").stop_when_converged  # off unless asked


def test_anneal_when_converged_decays_from_where_the_rule_holds_then_stops():
    from types import SimpleNamespace

    from zoo.train import ValidationCurve

    curve = ValidationCurve("val/exact_match", stop_when_converged=True, anneal_share=0.5)
    optimizer = SimpleNamespace(param_groups=[{"lr": 1e-3}])
    trainer = SimpleNamespace(sanity_checking=False, should_stop=False, global_step=0, callback_metrics={},
                              min_steps=None, optimizers=[optimizer])
    stops = []
    for step, value in [(1000, 0.5), (2000, 0.9), (3000, 0.95), (4000, 0.955), (5000, 0.958), (6000, 0.97),
                        (7000, 0.97), (8000, 0.97)]:
        trainer.global_step, trainer.callback_metrics = step, {"val/exact_match": torch.tensor(value)}
        curve.on_validation_end(trainer, None)
        stops.append(trainer.should_stop)
    # the rule holds at 5,000 (as when stopping at once, above): half as many steps again decay, to 7,500
    assert curve.anneal == (5000, 7500) and stops == [False] * 7 + [True]
    trainer.global_step = 6250  # halfway: half of the rate the schedule set for this step
    curve.on_train_batch_start(trainer, None, None, 0)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)
    # the verdict is the rule's where the decay began (0.958 - 0.95 by step 3,500), though the decay gained 1.2
    assert curve.verdict(8000) == {"val_late_gain": pytest.approx(0.008), "converged": True,
                                   "annealed_from_step": 5000}
    resumed = ValidationCurve("val/exact_match", stop_when_converged=True, anneal_share=0.5)
    resumed.load_state_dict(curve.state_dict())
    assert resumed.anneal == (5000, 7500) and resumed.points == curve.points


def test_anneal_when_converged_needs_the_stop_rule_and_a_step_schedule():
    from types import SimpleNamespace

    from zoo.options import OptionError, RunConfigError, check_options
    from zoo.train import ValidationCurve

    cfg = compose_run("model=seq2seq", "data=scan_simple", "anneal_when_converged=0.2")
    with pytest.raises(OptionError, match="stop_when_converged=true"):
        check_options(cfg)
    curve = ValidationCurve("val/exact_match", stop_when_converged=True, anneal_share=0.2)
    with pytest.raises(RunConfigError, match="anneal_when_converged=0.2: object sets no learning rate schedule"):
        curve.on_train_start(SimpleNamespace(lr_scheduler_configs=[]), object())


def test_stop_when_converged_trains_at_least_min_steps(tmp_path):
    cfg = smoke(tmp_path, "model=seq2seq", "data=scan_simple", "stop_when_converged=true",
                "trainer.max_steps=40", "+trainer.min_steps=10", "+trainer.val_check_interval=2",
                "trainer.check_val_every_n_epoch=null", "trainer.max_epochs=-1")
    row = run(cfg, tmp_path / "run")
    assert 10 <= row["global_steps"] <= 40
    if row["global_steps"] < 40:  # it stopped early only because it had converged
        assert row["converged"] is True


def test_a_shorter_budget_bounds_the_recipes_minimum(tmp_path):
    """debug=smoke's 4 steps (or GandR's continue_steps for its second stage) under a recipe with trainer.min_steps
    2000: the run trains the shorter budget, where Lightning alone would train on to the minimum."""
    cfg = smoke(tmp_path, "experiment=seq2seq_grid_cpu", "model=seq2seq", "data=scan_simple")
    assert cfg.trainer.min_steps == 2000 and cfg.trainer.max_steps == 4
    assert run(cfg, tmp_path / "run")["global_steps"] == 4


def test_the_annealing_grid_protocol_runs_on_seq2seq(tmp_path):
    cfg = smoke(tmp_path, "experiment=seq2seq_grid_cpu_anneal", "model=seq2seq", "data=scan_simple")
    assert cfg.anneal_when_converged == 0.2 and cfg.model.params.schedule == "constant"
    assert run(cfg, tmp_path / "run")["global_steps"] == 4  # seq2seq's schedule passes the check at the start


def test_ema_weights_are_the_ones_checkpointed_and_tested(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.demos.boring_classes import BoringModel
    from zoo.train import EMAWeights

    class Recorded(BoringModel):
        def on_test_start(self):
            self.tested = {k: v.clone() for k, v in self.state_dict().items()}

    model, best = Recorded(), ModelCheckpoint(dirpath=tmp_path, filename="best", every_n_train_steps=10)
    trainer = L.Trainer(max_steps=20, logger=False, enable_progress_bar=False, default_root_dir=tmp_path,
                        callbacks=[EMAWeights(decay=0.9), best])
    trainer.fit(model)
    checkpoint = torch.load(best.best_model_path, weights_only=False)
    averaged, raw = checkpoint["state_dict"], checkpoint["current_model_state"]
    assert not all(torch.equal(averaged[k], raw[k]) for k in averaged)  # the average differs from the step's weights
    trainer.test(model, ckpt_path=best.best_model_path, verbose=False)
    assert all(torch.equal(model.tested[k], averaged[k]) for k in averaged)  # not the raw weights Lightning restores


def test_a_moved_run_directory_keeps_its_best_checkpoint(tmp_path):
    """A run begun elsewhere (a GPU machine) and resumed here still counts the best score it had there."""
    before, after = tmp_path / "gpu" / "checkpoints", tmp_path / "here" / "checkpoints"
    trained = RunCheckpoint(dirpath=before, filename="best", monitor="val/exact_match", mode="max")
    trained.best_model_score, trained.best_model_path = torch.tensor(0.97), str(before / "best.ckpt")
    trained.best_k_models = {str(before / "best.ckpt"): torch.tensor(0.97)}
    state = trained.state_dict()
    assert trained.state_key.startswith("ModelCheckpoint{")  # checkpoints of Lightning's own callback resume here

    resumed = RunCheckpoint(dirpath=after, filename="best", monitor="val/exact_match", mode="max")
    resumed.load_state_dict(state)  # the moved directory lacks best.ckpt: Lightning's behaviour, the score forgotten
    assert resumed.best_model_score is None

    after.mkdir(parents=True)
    (after / "best.ckpt").touch()
    resumed = RunCheckpoint(dirpath=after, filename="best", monitor="val/exact_match", mode="max")
    resumed.load_state_dict(state)
    assert float(resumed.best_model_score) == pytest.approx(0.97)
    assert resumed.best_model_path == str(after / "best.ckpt")
    assert list(resumed.best_k_models) == [str(after / "best.ckpt")]
