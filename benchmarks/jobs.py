"""Parallel ``benchmarks/run.py`` processes, shared by the comparison grids (``benchmarks/ir_grid.py``) and the
suites (``benchmarks/suite.py``): at most ``workers`` at once, each once the jobs it needs succeeded, until a
deadline, with one progress line per job (start, its outcome and how long it took) and a log file per job.

Each job runs in the repository root; ``benchmarks/run.py`` puts its own checkout first on ``PYTHONPATH``, so that
a job started from a checkout (or a git worktree) imports that checkout's code, not an installed copy of the zoo.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from zoo.threads import threads_per_job  # noqa: E402


@dataclass
class Job:
    name: str
    command: list[str]
    needs: list[str] = field(default_factory=list)


def stamp() -> str:
    return time.strftime("%H:%M:%S")


def log_name(name: str) -> str:
    """A job's log file name: its name with what a file name cannot hold (``/``) replaced."""
    return re.sub(r"[^\w.@+=-]", "_", name) + ".log"


def job_environment(workers: int) -> dict[str, str]:
    """The environment of each job: each job's share of the cores (zoo/threads.py) unless ``OMP_NUM_THREADS`` says
    otherwise."""
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or str(threads_per_job(workers))}


def _stop(process: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGTERM to a job's process group (Lightning ends training and the run leaves no row), SIGKILL after
    ``grace_s``."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_jobs(jobs: list[Job], workers: int, deadline: float, log_dir: Path,
             say: Callable[[str], None] | None = None) -> dict[str, str]:
    """Run ``jobs`` in order, at most ``workers`` at once, each once the jobs it needs succeeded, until
    ``deadline``; each job's outcome by name (``ok``, ``failed (exit N)``, ``skipped: ...``, ``stopped at the
    deadline``, ``not started (deadline)``). ``say`` prints the progress lines (default: stdout)."""
    say = say or (lambda line: print(line, flush=True))
    log_dir.mkdir(parents=True, exist_ok=True)
    pending, running, outcome = list(jobs), {}, {}
    env = job_environment(workers)
    # the jobs run in sessions of their own (a job's DataLoader workers die with it): when this runner is stopped
    # (Ctrl-C, SIGTERM) it stops them, which leaves each its last.ckpt and no row, for the next launch to resume
    previous = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    if previous is not None:
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        while pending or running:
            for job in list(pending):  # a job whose needs failed will never start
                failed = [n for n in job.needs if n in outcome and outcome[n] != "ok"]
                if failed:
                    outcome[job.name] = f"skipped: {failed[0]} did not finish"
                    pending.remove(job)
                    say(f"[{stamp()}] {outcome[job.name]}: {job.name}")
            for job in [j for j in pending if all(outcome.get(n) == "ok" for n in j.needs)]:
                if len(running) >= workers or time.time() >= deadline:
                    break
                pending.remove(job)
                log = open(log_dir / log_name(job.name), "w")
                process = subprocess.Popen(job.command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)
                running[job.name] = (process, log, time.time())
                say(f"[{stamp()}] start {job.name}")
            for name, (process, log, started) in list(running.items()):
                if process.poll() is None and time.time() < deadline:
                    continue
                if process.poll() is None:
                    _stop(process)
                    outcome[name] = "stopped at the deadline"
                else:
                    outcome[name] = "ok" if process.returncode == 0 else f"failed (exit {process.returncode})"
                log.close()
                tail = "" if outcome[name] == "ok" else f" (log: {log_dir / log_name(name)})"
                say(f"[{stamp()}] {outcome[name]}: {name} after {time.time() - started:.0f} s{tail}")
                del running[name]
            if time.time() >= deadline and not running:
                outcome.update({job.name: "not started (deadline)" for job in pending})
                pending = []
            if pending and not running and not any(all(outcome.get(n) == "ok" for n in j.needs) for j in pending):
                for job in pending:  # waiting for a job that is not in the list: it would wait for ever
                    missing = [n for n in job.needs if n not in outcome][0]
                    outcome[job.name] = f"skipped: needs {missing}, not a job here"
                    say(f"[{stamp()}] {outcome[job.name]}: {job.name}")
                pending = []
            time.sleep(0.2)
    except BaseException:
        for name, (process, log, started) in running.items():
            _stop(process)
            log.close()
            say(f"[{stamp()}] interrupted: {name} after {time.time() - started:.0f} s (resumes on the next launch)")
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return outcome
