"""The IR comparison grid (Herzig et al. 2021 Tables 1 and 4): none, rir, lir_d+rir and lir_ind+rir for each
backbone and dataset, as parallel ``benchmarks/run.py`` processes (several fit one GPU at once).

    python benchmarks/ir_grid.py --workers 12 --deadline-s 540 \\
        --data scan_length geo_sql_template cfq_mcd1:data.limit_train=20000 \\
        --models seq2seq bert2bert_minilm -- experiment=seq2seq_ir_gpu

Stages are shared through ``ir_stages_dir`` (zoo/ir/pipeline.py): ``none``, ``rir`` (which trains x -> z_r) and
``lir_d+rir`` (x -> z_lr, then x [SEP] z_lr -> z_r) run side by side, and ``lir_ind+rir`` starts once ``rir`` and
``lir_d+rir`` of its dataset and model succeeded: it finds both of its stages trained and only chains them over the
test set. Jobs start in the order given (datasets outer, models inner). At the deadline, running jobs are stopped (they leave no results row and
resume with ``ckpt_path=last``) and the rest are skipped. Each job logs to ``logs/ir_grid/``; every finished
pipeline appends its row to the results file as any run does.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# lir_ind+rir needs the x -> z_r stage of rir and the second stage of lir_d+rir; the two-stage lane starts first,
# being the longest
ORDER = ("lir_d+rir", "rir", "none", "lir_ind+rir")
NEEDS = {"lir_ind+rir": ("rir", "lir_d+rir")}


@dataclass
class Job:
    name: str
    command: list[str]
    needs: list[str]


def grid_jobs(data: list[str], models: list[str], seed: int, overrides: list[str]) -> list[Job]:
    jobs = []
    for entry in data:
        name, *data_overrides = entry.split(":")
        for model in models:
            def job_name(ir: str) -> str:
                return f"{model}-{name}-{ir}-seed{seed}"

            for ir in ORDER:
                command = [sys.executable, str(REPO / "benchmarks" / "run.py"), *overrides, f"model={model}",
                           f"data={name}", f"ir={ir}", f"seed={seed}", *data_overrides]
                jobs.append(Job(job_name(ir), command, [job_name(need) for need in NEEDS.get(ir, ())]))
    return jobs


def run_jobs(jobs: list[Job], workers: int, deadline: float, log_dir: Path) -> dict[str, str]:
    """Run ``jobs`` in order, at most ``workers`` at once, each once the jobs it needs succeeded, until
    ``deadline``; each job's outcome by name."""
    pending, running, outcome = list(jobs), {}, {}

    def stamp() -> str:
        return time.strftime("%H:%M:%S")

    while pending or running:
        for job in list(pending):  # a job whose needs failed will never start
            failed = [n for n in job.needs if n in outcome and outcome[n] != "ok"]
            if failed:
                outcome[job.name] = f"skipped: {failed[0]} did not finish"
                pending.remove(job)
        for job in [j for j in pending if all(outcome.get(n) == "ok" for n in j.needs)]:
            if len(running) >= workers or time.time() >= deadline:
                break
            pending.remove(job)
            log = open(log_dir / f"{job.name}.log", "w")
            process = subprocess.Popen(job.command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            running[job.name] = (process, log, time.time())
            print(f"[{stamp()}] start {job.name}", flush=True)
        for name, (process, log, started) in list(running.items()):
            if process.poll() is None and time.time() < deadline:
                continue
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait()
                outcome[name] = "stopped at the deadline"
            else:
                outcome[name] = "ok" if process.returncode == 0 else f"failed (exit {process.returncode})"
            log.close()
            print(f"[{stamp()}] {outcome[name]}: {name} after {time.time() - started:.0f} s", flush=True)
            del running[name]
        if time.time() >= deadline and not running:
            outcome.update({job.name: "not started (deadline)" for job in pending})
            pending = []
        time.sleep(1)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", required=True,
                        help="datasets, each optionally with overrides: cfq_mcd1:data.limit_train=20000")
    parser.add_argument("--models", nargs="+", default=["seq2seq", "bert2bert_minilm"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--deadline-s", type=float, default=float("inf"), help="stop everything after this long")
    parser.add_argument("overrides", nargs="*", help="passed to every run (after --): experiment=seq2seq_ir_gpu")
    args = parser.parse_args(argv)

    log_dir = REPO / "logs" / "ir_grid"
    log_dir.mkdir(parents=True, exist_ok=True)
    jobs = grid_jobs(args.data, args.models, args.seed, args.overrides)
    outcome = run_jobs(jobs, args.workers, time.time() + args.deadline_s, log_dir)
    print("\n".join(f"{outcome[job.name]:45s} {job.name}" for job in jobs))
    return 0 if all(result == "ok" for result in outcome.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
