"""Training speed while other processes hold some of the cores: which thread count and OpenMP wait policy a run
should use (zoo/threads.py).

    python benchmarks/threads_under_load.py                      # scan_simple, the CPU recipe, 0 and 1 busy cores
    python benchmarks/threads_under_load.py --busy 0 1 --steps 30 data=geo_sql_template
    python benchmarks/threads_under_load.py debug=smoke --steps 2 --out /tmp/load.csv   # seconds (the test)

For each number of busy cores (``--busy``: processes spinning in a Python loop, started before and stopped after the
measurements) and each thread count (``--threads``) under each wait policy (``--policies``: OpenMP's default,
unset, and ``PASSIVE``, the zoo's choice, unless told others; ``GOMP_SPINCOUNT`` passes through and is
recorded), a fresh process trains the seq2seq backbone for ``--steps`` optimiser steps on the run's
length-bucketed batches, after a few untimed ones, and reports examples/s. A fresh process per measurement,
because OpenMP reads the policy once, when it starts.

``share_of_idle`` is a row's examples/s over the same threads and policy with no busy core; ``fair_share`` is the
share of the machine the busy processes leave, (cores - busy) / cores: a run that slows down in proportion to the CPU
it loses has ``share_of_idle`` near ``fair_share`` (or above it, for one thread on a machine with a core to spare).
Each row replaces the earlier row of the same (data, busy, threads, policy, hardware) in
``results/threads_under_load.csv``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.threads import usable_cores  # noqa: E402  (imports no torch: the policy must be set first)

POLICIES = ("default", "PASSIVE")
KEY = ("data", "busy_cores", "threads", "omp_wait_policy", "gomp_spincount", "hardware")


def measure(threads: int, policy: str, steps: int, overrides: list[str]) -> dict:
    """Train in a fresh process with ``threads`` OpenMP threads waiting by ``policy``; its report."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    command = [sys.executable, __file__, "--child", "--steps", str(steps), *overrides]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: the measurement ({threads} threads, {policy}) failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child(steps: int, overrides: list[str]) -> None:
    """One measurement (this process's threads and policy come from its environment): a JSON line."""
    import torch  # OpenMP starts here, under the policy measure() set (or none)

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import seq2seq_speed  # its use_passive_waiting() comes too late to change the policy: as wanted here
    from zoo.train import hardware_string

    cfg = seq2seq_speed.composed(overrides)
    model, datamodule = seq2seq_speed.model_and_data(cfg)
    datamodule.bucket_by_length = True
    examples, seconds, _ = seq2seq_speed.train_speed(model, datamodule.train_dataloader(), steps, warmup=3,
                                                     count_flops=False)
    print(json.dumps({"data": cfg.data.name, "batch_size": datamodule.batch_size, "threads": torch.get_num_threads(),
                      "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", ""),
                      "hardware": hardware_string().split(", torch threads")[0],
                      "examples": examples, "seconds": round(seconds, 3)}))


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busy", nargs="+", type=int, default=[0, 1], help="numbers of busy cores to measure under")
    parser.add_argument("--threads", nargs="+", type=int, help="thread counts (default: 1 and every core)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), help="OMP_WAIT_POLICY values (default: unset)")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per measurement")
    parser.add_argument("--out", type=Path, help="default: results/threads_under_load.csv")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args, overrides = parser.parse_known_args(argv)
    if args.child:
        child(args.steps, overrides)
        return []
    from zoo.results import ResultsFileError, append_row, check_appendable, results_table

    out = args.out or results_table("threads_under_load.csv")
    try:
        check_appendable(out)
    except ResultsFileError as e:
        sys.exit(f"error: {e}")
    cores = usable_cores()
    thread_counts = args.threads or sorted({1, cores})
    rows, idle = [], {}
    for busy in sorted(args.busy):
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            for threads in thread_counts:
                for policy in args.policies:
                    report = measure(threads, policy, args.steps, overrides)
                    speed = report["examples"] / report["seconds"]
                    if busy == 0:
                        idle[threads, policy] = speed
                    row = {**report, "busy_cores": busy, "cores": cores, "omp_wait_policy": policy,
                           "examples_per_s": round(speed, 1),
                           "share_of_idle": round(speed / idle[threads, policy], 3) if (threads, policy) in idle
                           else "", "fair_share": round((cores - busy) / cores, 3)}
                    append_row(out, row, replacing=KEY)
                    rows.append(row)
                    print(f"busy cores {busy}/{cores}  threads {threads}  {policy:8}: {speed:8.1f} examples/s"
                          + (f"  ({100 * row['share_of_idle']:.0f}% of idle)" if row["share_of_idle"] != "" else ""),
                          flush=True)
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.wait()
    return rows


if __name__ == "__main__":
    main()
