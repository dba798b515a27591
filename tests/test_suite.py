"""benchmarks/suite.py and the multirun launchers: which jobs a suite skips, resumes or reruns (synthetic results
files and run directories), the dry run's estimate against numbers computed by hand, the stage order of
multi-stage jobs, the launcher configs composing, and one real joblib multirun writing one row per job.

Hand-computed estimate: three earlier rows of the job's settings (seeds 1-3) took 100, 300 and 200 s to train and
tested 50 examples at 10 examples/s (5 s), so 105, 305, 205 s: the median is 205 s. A row without train_seconds (a
re-test) does not count. On 2 workers, jobs of 205 s, 100 s and 30 s (the last waiting for the first): the first
two start at 0, the third on the worker free at 100 s but waits for the first until 205 s, so the plan ends at 235 s.
"""
import csv
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import DATA_ROOT, REPO, needs_mirror

_spec = importlib.util.spec_from_file_location("suite", REPO / "benchmarks" / "suite.py")
suite = sys.modules["suite"] = importlib.util.module_from_spec(_spec)  # dataclasses look their module up
_spec.loader.exec_module(suite)

HEADER = ["time", "git_commit", "model", "variant", "backbone", "data", "seed", "test_exact_match", "n_test",
          "train_seconds", "test_examples_per_s", "run_dir", "protocol", "ir_definition"]
SETTINGS = {"model": "seq2seq", "variant": "baseline", "data": "scan_length", "seed": "1",
            "protocol": "seq2seq_grid_cpu", "ir_definition": ""}


def row(seed=1, commit="abc1234567", when="2026-01-01T00:00:00+00:00", seconds="100", run_dir=None, **cells):
    base = {"time": when, "git_commit": commit, "model": "seq2seq", "variant": "baseline", "backbone": "bart",
            "data": "scan_length", "seed": str(seed), "test_exact_match": "0.5", "n_test": "50",
            "train_seconds": seconds, "test_examples_per_s": "10",
            "run_dir": run_dir or f"runs/seq2seq-baseline/scan_length/seed{seed}", "protocol": "seq2seq_grid_cpu",
            "ir_definition": ""}
    return {**base, **cells}


def table(tmp_path, rows):
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(rows)
    return suite.read_rows(path)


def job(tmp_path, seed=1, multistage=False, **settings):
    settings = {**SETTINGS, "seed": str(seed), **settings}
    run_dir = tmp_path / "runs" / "seq2seq-baseline" / settings["data"] / f"seed{seed}"
    return suite.Planned([f"seed={seed}"], settings, "seq2seq-baseline", run_dir, tmp_path / "runs.csv",
                         multistage, {"x_to_rir"} if multistage else set())


def checkpoint(run_dir: Path, mtime: float, name="last.ckpt") -> None:
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints" / name).write_bytes(b"")
    os.utime(run_dir / "checkpoints" / name, (mtime, mtime))


@pytest.fixture
def in_tmp_repo(tmp_path, monkeypatch):
    """Rows record run directories relative to the repository: here, relative to tmp_path."""
    monkeypatch.setattr(suite, "REPO_ROOT", tmp_path)
    return tmp_path


def test_a_row_of_the_same_settings_and_commit_is_done_any_other_is_not(in_tmp_repo):
    tmp = in_tmp_repo
    rows = table(tmp, [row(seed=1), row(seed=2, commit="abc1234567-dirty"), row(seed=3, commit="0ld0000000"),
                       row(seed=4, protocol="seq2seq_scratch_cpu"),
                       row(seed=5, run_dir="runs/seq2seq_bert2bert_minilm-baseline/scan_length/seed5")])
    outcomes = {}
    for seed in range(1, 6):
        planned = job(tmp, seed)
        suite.classify(planned, rows, "abc1234567", any_commit=False)
        outcomes[seed] = (planned.state, planned.action)
    assert outcomes == {1: ("done", []),
                        2: ("rerun", ["overwrite=true"]),  # a dirty tree's row is never the same commit
                        3: ("rerun", ["overwrite=true"]),  # another commit: trained again
                        4: ("new", ["resume=true"]),  # another protocol is other settings
                        5: ("new", ["resume=true"])}  # another run folder (a preset of the model) too
    # a dirty tree counts nothing as its own commit; --any-commit counts every commit
    dirty = job(tmp, 2)
    suite.classify(dirty, rows, "abc1234567-dirty", any_commit=False)
    assert dirty.state == "rerun"
    for seed in (2, 3):
        planned = job(tmp, seed)
        suite.classify(planned, rows, "abc1234567", any_commit=True)
        assert planned.state == "done" and "finished at" in planned.detail


def test_interrupted_runs_resume_and_finished_checkpoints_of_other_settings_block(in_tmp_repo):
    tmp = in_tmp_repo
    row_time = 1767225600.0  # 2026-01-01T00:00:00Z, the rows' time
    rows = table(tmp, [row(seed=1, commit="0ld0000000"), row(seed=3, protocol="seq2seq_scratch_cpu"),
                       row(seed=4, protocol="seq2seq_scratch_cpu")])
    interrupted_rerun, interrupted_start = job(tmp, 1), job(tmp, 2)
    checkpoint(interrupted_rerun.run_dir, row_time + 60)  # written after the finished row: a rerun was interrupted
    checkpoint(interrupted_start.run_dir, row_time)
    occupied, resumed_over = job(tmp, 3), job(tmp, 4)
    checkpoint(occupied.run_dir, row_time - 60, "best.ckpt")  # the other protocol's finished checkpoints
    checkpoint(resumed_over.run_dir, row_time + 60)  # a run of these settings interrupted after the other finished
    for planned in (interrupted_rerun, interrupted_start, occupied, resumed_over):
        suite.classify(planned, rows, "abc1234567", any_commit=False)
    assert (interrupted_rerun.state, interrupted_rerun.action) == ("rerun", ["ckpt_path=last"])
    assert (interrupted_start.state, interrupted_start.action) == ("new", ["resume=true"])
    assert interrupted_start.detail == "resumes from its last.ckpt"
    assert occupied.state == "blocked" and "protocol seq2seq_scratch_cpu" in occupied.detail
    assert (resumed_over.state, resumed_over.action) == ("new", ["resume=true"])
    # a multi-stage run reruns without overwrite=true: its finished stages are reused, not trained again
    pipeline = job(tmp, 1, multistage=True)
    suite.classify(pipeline, rows, "abc1234567", any_commit=False)
    assert (pipeline.state, pipeline.action) == ("rerun", [])


def test_dry_run_estimate_is_the_median_of_earlier_rows_of_any_seed(in_tmp_repo, capsys):
    tmp = in_tmp_repo
    rows = table(tmp, [row(seed=1, seconds="100"), row(seed=2, seconds="300"), row(seed=3, seconds="200"),
                       row(seed=4, seconds=""), row(seed=1, seconds="999", data="scan_simple")])
    estimated, unknown = job(tmp, 7), job(tmp, 1, data="geo_sql_template")
    for planned in (estimated, unknown):
        suite.classify(planned, rows, "new0000000", any_commit=False)
    assert (estimated.estimate, estimated.estimate_rows) == (205.0, 3)
    assert unknown.estimate is None
    lines = suite.describe([estimated, unknown], workers=2)
    assert "~3.4 min (median of 3 rows)" in lines[0] and "no earlier timed row" in lines[1]
    assert lines[-2] == "2 jobs: 2 new, 0 to rerun, 0 done (skipped), 0 blocked"
    assert lines[-1] == ("estimated 3.4 min of job time for the 1 jobs with an earlier row (1 without one, counted "
                         "as 0); about 3.4 min on 2 workers")
    # the wall time: jobs in order on the first free worker, after the jobs they wait for
    a, b, c = job(tmp, 1), job(tmp, 2), job(tmp, 3)
    (a.estimate, b.estimate, c.estimate), c.needs = (205.0, 100.0, 30.0), [a.name]
    assert suite.wall_time([a, b, c], workers=2) == 235.0
    assert suite.wall_time([a, b, c], workers=1) == 335.0
    b.state = "done"  # a skipped job takes no time
    assert suite.wall_time([a, b, c], workers=1) == 235.0


def test_suite_entries_expand_to_datasets_seeds_and_sweeps_in_order():
    entries = OmegaConf.create({"overrides": ["debug=smoke"], "runs": [
        {"experiment": "seq2seq_grid_cpu", "data": ["scan_length", "geo_sql_iid"], "seeds": [1, 2],
         "sweep": {"ir": ["none", "rir"]}},
        {"model": "span_cky", "data": "scan_sp_simple", "overrides": ["trainer.max_epochs=2"]},
        {"data": "scan_simple", "overrides": ["test_only=true", "ckpt_path=runs/${data.name}/seed${seed}/best.ckpt"]}]})
    *jobs, tested = suite.expand(entries, ["trainer=gpu"])
    # an interpolation is the run's to resolve, in its own config
    assert tested[-2] == "ckpt_path=runs/${data.name}/seed${seed}/best.ckpt"
    assert len(jobs) == 2 * 2 * 2 + 1
    assert jobs[0] == ["debug=smoke", "experiment=seq2seq_grid_cpu", "data=scan_length", "seed=1", "ir=none",
                       "trainer=gpu"]
    assert jobs[1][-2] == "ir=rir" and jobs[2][3] == "seed=2" and jobs[4][2] == "data=geo_sql_iid"
    assert jobs[-1] == ["debug=smoke", "model=span_cky", "data=scan_sp_simple", "seed=1", "trainer.max_epochs=2",
                        "trainer=gpu"]


def test_every_suite_file_is_well_formed_and_an_unknown_suite_is_named():
    for path in sorted((REPO / "configs" / "suite").glob("*.yaml")):
        _, loaded = suite.read_suite(path.stem)
        assert suite.expand(loaded), path
    known = "cpu_day, ggd_authors_schedule, ggd_final, gpu_hour, paper_tables, seq2seq_turn_left_heldout, smoke"
    with pytest.raises(suite.SuiteError, match=f"no suite 'nope'.*known: {known}"):
        suite.read_suite("nope")


def test_an_experiment_that_names_its_run_folder_is_planned_in_it(tmp_path, monkeypatch):
    """ggd_cfq_authors_sizes shares ggd_cfq_cpu_schedule's variant: its folder, not the variant, keeps their rows
    apart."""
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    entries = OmegaConf.create({"runs": [{"experiment": "ggd_cfq_authors_sizes", "data": "cfq_mcd1", "seeds": [2]},
                                         {"experiment": "ggd_cfq_cpu_schedule", "data": "cfq_mcd1", "seeds": [2]}]})
    jobs = suite.plan(entries, [], tmp_path / "runs.csv", commit="abc1234567")
    assert [j.folder for j in jobs] == ["ggd-authors_sizes", "ggd-ggd"]
    assert jobs[0].run_dir == tmp_path / "runs" / "ggd-authors_sizes" / "cfq_mcd1" / "seed2"
    ggd_cfq_row = {**jobs[1].settings, "git_commit": "abc1234567", "run_dir": "runs/ggd-ggd/cfq_mcd1/seed2"}
    suite.classify(jobs[0], [ggd_cfq_row], "abc1234567", any_commit=True)
    assert jobs[0].state == "new"


def test_a_plan_composes_each_job_and_orders_shared_stages(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    entries = OmegaConf.create({"runs": [{"model": "seq2seq", "data": "scan_simple", "seeds": [1],
                                          "sweep": {"ir": ["lir_ind+rir", "rir", "lir_d+rir", "none"]}}]})
    jobs = suite.plan(entries, ["debug=smoke"], tmp_path / "runs.csv", commit="abc1234567")
    assert [j.folder for j in jobs] == [f"seq2seq-{v}-train32-eval8" for v in ("lir_ind+rir", "rir", "lir_d+rir",
                                                                              "baseline")]
    assert jobs[0].run_dir == tmp_path / "runs" / "seq2seq-lir_ind+rir-train32-eval8" / "scan_simple" / "seed1"
    assert jobs[0].results == tmp_path / "runs.csv" and jobs[0].settings["ir_definition"] == "paper"
    # lir_ind+rir shares x -> z_r with rir and x [SEP] z_lr -> z_r with lir_d+rir: whichever comes later waits
    assert jobs[0].needs == [] and jobs[1].needs == [jobs[0].name] and jobs[2].needs == [jobs[0].name]
    assert jobs[3].needs == [] and not jobs[3].multistage
    with pytest.raises(suite.SuiteError, match="two jobs would run in"):
        suite.plan(OmegaConf.create({"runs": [{"data": "scan_simple"}, {"data": "scan_simple"}]}), commit="x")
    with pytest.raises(suite.SuiteError, match="^data=nope seed=1: In 'run': Could not find 'data/nope'$"):
        suite.plan(OmegaConf.create({"runs": [{"data": "nope"}]}), commit="x")  # named in one line, per job


def test_a_decoding_waits_for_the_job_that_trains_its_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    trained = "${zoo_env:ZOO_RUNS,runs}/seq2seq-baseline-train32-eval8/${data.name}/seed${seed}/checkpoints/best.ckpt"
    entries = OmegaConf.create({"runs": [
        {"model": "seq2seq", "data": ["scan_simple", "scan_length"], "seeds": [1]},
        {"model": "seq2seq", "data": ["scan_simple", "scan_length"], "seeds": [1],
         "overrides": ["model.variant=greedy", "test_only=true", f"ckpt_path={trained}"]}]})
    jobs = suite.plan(entries, ["debug=smoke"], tmp_path / "runs.csv", commit="abc1234567")
    assert [j.needs for j in jobs] == [[], [], [jobs[0].name], [jobs[1].name]]
    assert jobs[2].checkpoint == jobs[0].run_dir / "checkpoints" / "best.ckpt"


def test_main_skips_what_finished_runs_nothing_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    started = []
    monkeypatch.setattr(suite, "run_jobs", lambda jobs, *args: started.extend(jobs) or {})
    results = tmp_path / "runs.csv"
    smoke = [row(seed=1, variant="baseline-train32-eval8", data="scan_simple", protocol="",
                 run_dir=str(tmp_path / "runs/seq2seq-baseline-train32-eval8/scan_simple/seed1"))]
    with open(results, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(smoke)
    suite_file = tmp_path / "one.yaml"
    suite_file.write_text("overrides: [debug=smoke]\nruns:\n  - {model: seq2seq, data: scan_simple}\n")
    assert suite.main([str(suite_file), "--results", str(results), "--any-commit", "--no-leaderboard"]) == 0
    out = capsys.readouterr().out
    assert "skip seq2seq-baseline-train32-eval8/scan_simple/seed1: finished at abc1234567" in out
    assert "0 ran, 0 did not finish, 1 skipped as done, 0 blocked" in out and started == []
    assert suite.main([str(suite_file), "--results", str(results), "--dry-run"]) == 0
    assert "1 jobs: 0 new, 1 to rerun, 0 done (skipped), 0 blocked" in capsys.readouterr().out


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local", "slurm"])
def test_launcher_configs_compose(launcher):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("run", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
        target = cfg.hydra.launcher._target_
        assert target.startswith("hydra_plugins.hydra_") and target.endswith(
            {"joblib": "JoblibLauncher", "submitit_local": "LocalLauncher", "slurm": "SlurmLauncher"}[launcher])
        if launcher == "slurm":
            assert cfg.hydra.launcher.partition is None  # sbatch's default partition unless one is named
            cfg = compose("run", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                                            "hydra.launcher.timeout_min=30"], return_hydra_config=True)
            assert (cfg.hydra.launcher.partition, cfg.hydra.launcher.gpus_per_node,
                    cfg.hydra.launcher.timeout_min) == ("gpu", 1, 30)
            launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
            assert launcher["submitit_folder"] == "${hydra.sweep.dir}/.submitit/%j"  # the jobs' logs, per sweep


@needs_mirror
@pytest.mark.slow  # about 65 s each on 2 busy cores, most of it starting the workers
@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_a_multirun_writes_one_row_per_job(tmp_path, launcher):
    """Two smoke runs side by side (joblib's workers, or submitit's local executor standing in for SLURM), each
    appending its row to one results file under its lock, each in its own run directory."""
    results = tmp_path / "runs.csv"
    env = {**os.environ, "ZOO_RUNS": str(tmp_path / "runs"), "ZOO_DATA": str(DATA_ROOT), "HF_HUB_OFFLINE": "1"}
    started = time.time()
    done = subprocess.run([sys.executable, "benchmarks/run.py", "-m", "model=seq2seq", "data=scan_simple",
                           "debug=smoke", "seed=1,2", f"results_file={results}", f"hydra/launcher={launcher}",
                           *(["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []),
                           "data.limit_train=16", "data.limit_eval=4", "trainer.max_steps=2"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = suite.read_rows(results)
    assert sorted(r["seed"] for r in rows) == ["1", "2"]
    assert len({r["run_dir"] for r in rows}) == 2
    print(f"{launcher} multirun of 2 smoke jobs: {time.time() - started:.0f} s")


def test_a_stopped_runner_stops_its_jobs(tmp_path):
    """SIGTERM (or Ctrl-C) to the suite stops the running jobs, which leave last.ckpt and no row, for the next
    launch to resume; the runner's own SIGTERM handler is removed again."""
    import signal
    import threading

    from jobs import Job, run_jobs

    said = []
    job = Job("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"])
    threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    started = time.time()
    with pytest.raises(KeyboardInterrupt):
        run_jobs([job], workers=1, deadline=time.time() + 120, log_dir=tmp_path, say=said.append)
    assert time.time() - started < 30
    assert said[0].endswith("start sleeper") and "interrupted: sleeper after" in said[1]
    assert signal.getsignal(signal.SIGTERM) is not suite.run_jobs.__globals__["_interrupt"]
