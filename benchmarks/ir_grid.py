"""The comparison grids of multi-stage methods, as parallel ``benchmarks/run.py`` processes (several fit one GPU at
once): IR pipelines (``--grid ir``, Herzig et al. 2021 Tables 1 and 4: none, rir, lir_d+rir and lir_ind+rir) or
exemplar retrieval (``--grid gandr``, Zemlyanskiy et al. 2022 Table 1: none, input TF-IDF, GandR at each
``--alphas``) for each backbone and dataset.

    python benchmarks/ir_grid.py --workers 12 --deadline-s 540 \\
        --data scan_length geo_sql_template cfq_mcd1:data.limit_train=20000 \\
        --models seq2seq bert2bert_minilm -- experiment=seq2seq_ir_gpu
    python benchmarks/ir_grid.py --grid gandr --alphas 0 0.25 0.5 0.75 1 --data geo_sql_iid \\
        atis_sql_iid:data.train_limit=1000 --models bert2bert_minilm -- experiment=gandr_cpu_short trainer=gpu

Stages are shared through ``ir_stages_dir`` (zoo/ir/pipeline.py): ``none``, ``rir`` (which trains x -> z_r) and
``lir_d+rir`` (x -> z_lr, then x [SEP] z_lr -> z_r) run side by side, and ``lir_ind+rir`` starts once ``rir`` and
``lir_d+rir`` of its dataset and model succeeded: it finds both of its stages trained and only chains them over the
test set. GandR's ``retrieval=input`` run trains stage 1 alone; every alpha starts after it and trains its own stage 2,
side by side (with ``retrieval.folds``, the first alpha trains the fold models and the others wait for them,
``zoo.stages``). Jobs start in the order given (``--seeds`` outer, then datasets,
then models). At the deadline, running jobs are stopped (they leave no results row) and the rest are skipped; the
same command with ``--resume`` later skips the runs that finished and resumes the interrupted ones. Each job logs to
``logs/ir_grid/``; every finished pipeline appends its row to the results file as any run does.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

sys.path.insert(0, str(REPO / "benchmarks"))
from jobs import Job, run_jobs  # noqa: E402,F401  (the job runner the suites share: benchmarks/jobs.py)

# lir_ind+rir needs the x -> z_r stage of rir and the second stage of lir_d+rir; the two-stage lane starts first,
# being the longest
ORDER = ("lir_d+rir", "rir", "none", "lir_ind+rir")
NEEDS = {"lir_ind+rir": ("rir", "lir_d+rir")}


def method_jobs(grid: str, alphas: list[float]) -> list[tuple[str, list[str], list[str]]]:
    """(name, overrides, names of the methods it waits for) of one dataset and model, in start order."""
    if grid == "ir":
        return [(ir, [f"ir={ir}"], list(NEEDS.get(ir, ()))) for ir in ORDER]
    # retrieval=input trains stage 1 (and, with retrieval.folds, the fold models) alone; every alpha then trains
    # only its own stage 2, so the alphas can run side by side
    return [("input", ["retrieval=input"], []), ("none", ["retrieval=none"], [])] + [
        (f"gandr-a{a:g}", ["retrieval=gandr", f"retrieval.alpha={a:g}"], ["input"]) for a in alphas]


def grid_jobs(data: list[str], models: list[str], seed: int, overrides: list[str], grid: str = "ir",
              alphas: list[float] = (0.5,)) -> list[Job]:
    jobs = []
    for entry in data:
        name, *data_overrides = entry.split(":")
        for model in models:
            def job_name(method: str) -> str:
                return f"{model}-{name}-{method}-seed{seed}"

            for method, method_overrides, needs in method_jobs(grid, list(alphas)):
                command = [sys.executable, str(REPO / "benchmarks" / "run.py"), *overrides, f"model={model}",
                           f"data={name}", *method_overrides, f"seed={seed}", *data_overrides]
                jobs.append(Job(job_name(method), command, [job_name(need) for need in needs]))
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", required=True,
                        help="datasets, each optionally with overrides: cfq_mcd1:data.limit_train=20000")
    parser.add_argument("--grid", choices=("ir", "gandr"), default="ir")
    parser.add_argument("--alphas", nargs="+", type=float, default=[0.5], help="GandR's output weights")
    parser.add_argument("--models", nargs="+", default=["seq2seq", "bert2bert_minilm"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1], help="each seed's grid, one after the other")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--deadline-s", type=float, default=float("inf"), help="stop everything after this long")
    parser.add_argument("--resume", action="store_true",
                        help="launch the grid again: finished runs are skipped, interrupted ones resume (resume=true)")
    parser.add_argument("overrides", nargs="*", help="passed to every run (after --): experiment=seq2seq_ir_gpu")
    args = parser.parse_args(argv)
    for option, group, names in (("--data", "data", [entry.split(":")[0] for entry in args.data]),
                                 ("--models", "model", args.models)):
        known = sorted(path.stem for path in (REPO / "configs" / group).glob("*.yaml"))
        for name in names:  # said now, not as one failed job per model and method
            if name not in known:
                parser.error(f"{option} {name}: no configs/{group}/{name}.yaml; known: {', '.join(known)}")

    log_dir = REPO / "logs" / "ir_grid"
    log_dir.mkdir(parents=True, exist_ok=True)
    jobs = [job for seed in args.seeds
            for job in grid_jobs(args.data, args.models, seed, args.overrides + ["resume=true"] * args.resume,
                                 args.grid, args.alphas)]
    try:
        outcome = run_jobs(jobs, args.workers, time.time() + args.deadline_s, log_dir)
    except KeyboardInterrupt:  # (Ctrl-C or SIGTERM) the running jobs were stopped and left no row
        print("ir_grid: interrupted; the same command with --resume resumes the interrupted jobs", flush=True)
        return 130
    print("\n".join(f"{outcome[job.name]:45s} {job.name}" for job in jobs))
    return 0 if all(result == "ok" for result in outcome.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
