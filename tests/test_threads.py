"""zoo/threads.py: runs wait passively from their first torch import on, parallel jobs share the cores out, and
benchmarks/threads_under_load.py measures it (on debug=smoke)."""
import os
import subprocess
import sys

import pytest

from conftest import REPO, needs_mirror
from zoo.results import read_rows
from zoo.threads import threads_per_job

sys.path.insert(0, str(REPO / "benchmarks"))
import threads_under_load  # noqa: E402

# Loads an entry point as a module (its main() does not run) and prints OMP_WAIT_POLICY as it was when torch was
# first imported: the moment OpenMP reads it.
POLICY_AT_TORCH_IMPORT = """
import importlib.abc, os, runpy, sys
seen = []
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("OMP_WAIT_POLICY"))
sys.meta_path.insert(0, Watch())
runpy.run_path(sys.argv[1], run_name="loaded")
print(seen)
"""


@pytest.mark.parametrize("entry_point", ["run.py", "seq2seq_speed.py"])
def test_entry_points_choose_passive_waiting_before_torch_starts_openmp(entry_point):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", POLICY_AT_TORCH_IMPORT, str(REPO / "benchmarks" / entry_point)],
                          env=env, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['PASSIVE']"
    done = subprocess.run([sys.executable, "-c", POLICY_AT_TORCH_IMPORT, str(REPO / "benchmarks" / entry_point)],
                          env={**env, "OMP_WAIT_POLICY": "ACTIVE"}, capture_output=True, text=True, cwd=REPO)
    assert done.stdout.strip() == "['ACTIVE']"  # the user's choice stands


def test_parallel_jobs_share_the_cores_out_at_least_one_thread_each(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert [threads_per_job(n) for n in (1, 4, 5, 12, 32)] == [16, 4, 3, 1, 1]


@needs_mirror
def test_threads_under_load_measures_each_policy_idle_and_busy(tmp_path):
    out = tmp_path / "load.csv"
    rows = threads_under_load.main(["debug=smoke", "--steps", "2", "--busy", "0", "1", "--threads", "1",
                                    "--out", str(out)])
    assert [(r["busy_cores"], r["omp_wait_policy"]) for r in rows] == [
        (0, "default"), (0, "PASSIVE"), (1, "default"), (1, "PASSIVE")]
    for row in rows:
        assert row["threads"] == 1 and row["examples"] > 0 and row["examples_per_s"] > 0
        assert row["fair_share"] == (row["cores"] - row["busy_cores"]) / row["cores"]
    assert [r["share_of_idle"] for r in rows[:2]] == [1.0, 1.0]
    # the share comes from the unrounded speeds, the row's examples/s are rounded to 0.1
    assert rows[2]["share_of_idle"] == pytest.approx(rows[2]["examples_per_s"] / rows[0]["examples_per_s"], abs=2e-3)
    assert len(read_rows(out)) == 4
