"""How a run's CPU threads wait, and how many there are, so that a run slows down in proportion to the CPU it loses
to other processes and no more (issue 25, item 14; measured by ``benchmarks/threads_under_load.py``).

torch runs each parallel operation on OpenMP threads. Under OpenMP's default wait policy a thread that finishes its
share early spins at the barrier for the others; when another process holds one of the cores, the spinning thread
burns the time slice the working thread needs (issue 25 measured a 2-thread run 25x slower than a 1-thread run on
the same load). With ``OMP_WAIT_POLICY=PASSIVE`` a waiting thread sleeps instead. On 2 cores with one busy
(``results/threads_under_load.csv``) a 2-thread run kept 92% of its idle speed with ``PASSIVE`` and 31-33% under
the default and ``ACTIVE`` policies; idle, ``PASSIVE`` costs the second core's gain (649 against 862 examples/s),
which a dedicated machine gets back with ``OMP_WAIT_POLICY=ACTIVE``. OpenMP reads the policy once, when it starts
(at the first ``import torch``), so the entry points call ``use_passive_waiting()`` before importing torch. A
user's own ``OMP_WAIT_POLICY`` is kept.

The thread count stays torch's default (one per core, or ``OMP_NUM_THREADS``), except in ``benchmarks/ir_grid.py``,
which gives each of its parallel jobs ``threads_per_job(workers)`` so that the jobs do not oversubscribe the cores.
"""
from __future__ import annotations

import os


def use_passive_waiting() -> None:
    """Let OpenMP threads sleep rather than spin while they wait; a no-op once torch was imported."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and ``taskset`` narrow)."""
    return len(os.sched_getaffinity(0))


def threads_per_job(jobs: int) -> int:
    """The threads each of ``jobs`` parallel runs gets: the usable cores shared out, at least one each."""
    return max(1, usable_cores() // jobs)
