"""benchmarks/ir_grid.py: the job order, dependencies and the deadline (with stand-in commands)."""
import importlib.util
import os
import sys
import time

from conftest import REPO

_spec = importlib.util.spec_from_file_location("ir_grid", REPO / "benchmarks" / "ir_grid.py")
ir_grid = sys.modules["ir_grid"] = importlib.util.module_from_spec(_spec)  # dataclasses look their module up
_spec.loader.exec_module(ir_grid)
Job, grid_jobs, run_jobs = ir_grid.Job, ir_grid.grid_jobs, ir_grid.run_jobs


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_grid_lists_each_pipeline_once_with_lir_ind_after_its_stages():
    jobs = grid_jobs(["scan_length", "cfq_mcd1:data.limit_train=20000"], ["seq2seq"], 1, ["debug=smoke"])
    assert [j.name for j in jobs[:4]] == ["seq2seq-scan_length-lir_d+rir-seed1", "seq2seq-scan_length-rir-seed1",
                                          "seq2seq-scan_length-none-seed1", "seq2seq-scan_length-lir_ind+rir-seed1"]
    assert jobs[3].needs == ["seq2seq-scan_length-rir-seed1", "seq2seq-scan_length-lir_d+rir-seed1"]
    assert jobs[4].command[-3:] == ["ir=lir_d+rir", "seed=1", "data.limit_train=20000"]
    assert "debug=smoke" in jobs[4].command and "data=cfq_mcd1" in jobs[4].command


def test_gandr_grid_trains_stage_one_first_then_the_alphas_side_by_side():
    jobs = grid_jobs(["geo_sql_iid"], ["seq2seq"], 2, [], grid="gandr", alphas=[0, 0.5, 1])
    assert [j.name for j in jobs] == [f"seq2seq-geo_sql_iid-{m}-seed2" for m in
                                      ("input", "none", "gandr-a0", "gandr-a0.5", "gandr-a1")]
    assert [j.needs for j in jobs] == [[], []] + [["seq2seq-geo_sql_iid-input-seed2"]] * 3
    assert jobs[0].command[-2:] == ["retrieval=input", "seed=2"]
    assert jobs[2].command[-3:] == ["retrieval=gandr", "retrieval.alpha=0", "seed=2"]


def test_failed_needs_skip_a_job_and_the_deadline_stops_the_rest(tmp_path):
    jobs = [Job("fails", python("raise SystemExit(2)"), []), Job("ok", python("pass"), []),
            Job("after_fail", python("pass"), ["fails"]), Job("after_ok", python("pass"), ["ok"])]
    outcome = run_jobs(jobs, workers=2, deadline=time.time() + 60, log_dir=tmp_path)
    assert outcome == {"fails": "failed (exit 2)", "ok": "ok", "after_fail": "skipped: fails did not finish",
                       "after_ok": "ok"}
    slow = [Job("slow", python("import time; time.sleep(60)"), []), Job("queued", python("pass"), [])]
    outcome = run_jobs(slow, workers=1, deadline=time.time() + 2, log_dir=tmp_path)
    assert outcome == {"slow": "stopped at the deadline", "queued": "not started (deadline)"}


def test_each_job_gets_its_share_of_the_cores_unless_omp_num_threads_is_set(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    jobs = [Job(f"job{i}", python("import os; print(os.environ['OMP_NUM_THREADS'])"), []) for i in range(2)]
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    run_jobs(jobs, workers=4, deadline=time.time() + 60, log_dir=tmp_path)
    assert [(tmp_path / f"job{i}.log").read_text() for i in range(2)] == ["4\n", "4\n"]
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    run_jobs(jobs, workers=4, deadline=time.time() + 60, log_dir=tmp_path)
    assert (tmp_path / "job0.log").read_text() == "3\n"


def test_an_unknown_dataset_or_model_is_said_before_any_job_starts(monkeypatch, capsys):
    """Not one failed job per model and method, each with its reason in a log file."""
    import pytest

    monkeypatch.setattr(ir_grid, "run_jobs", None)  # starting the jobs would call it
    for arguments, message in ((["--data", "scan_simple", "no_such_dataset:data.limit_train=10"],
                                "--data no_such_dataset: no configs/data/no_such_dataset.yaml; known: atis_sql_iid, "),
                               (["--data", "scan_simple", "--models", "seq2seq", "no_such_model"],
                                "--models no_such_model: no configs/model/no_such_model.yaml; known: bert2bert_minilm, "
                                "ggd, seq2seq, span_cky")):
        with pytest.raises(SystemExit):
            ir_grid.main(arguments)
        assert f"error: {message}" in capsys.readouterr().err
