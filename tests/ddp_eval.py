"""The process script of tests/test_ddp.py: re-tests runs' checkpoints under ``trainer=cpu_ddp`` through
``zoo.launch.run``, as ``benchmarks/run.py ... test_only=true trainer=cpu_ddp`` would, in one pair of processes.

    python tests/ddp_eval.py '[["<run dir>", ["model=...", "data=...", ...]], ...]'

Lightning's subprocess launcher starts rank 1 by running this same command again; the runs after the first reuse
the process group, so the processes start (and import torch) once for every run.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (the checkout, as benchmarks/run.py does)
from zoo.threads import use_passive_waiting  # noqa: E402

use_passive_waiting()
from conftest import compose_run  # noqa: E402
from zoo.launch import run  # noqa: E402

if __name__ == "__main__":
    for run_dir, overrides in json.loads(sys.argv[1]):
        run(compose_run(*overrides, "trainer=cpu_ddp", "test_only=true"), Path(run_dir))
