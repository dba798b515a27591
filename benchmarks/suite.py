"""Suites: a declared list of runs (``configs/suite/<name>.yaml``) run as parallel ``benchmarks/run.py`` jobs,
skipping those that already finished, resuming those that were interrupted, and ending with the leaderboard
rebuilt (``benchmarks/leaderboard.py``).

    python benchmarks/suite.py cpu_day --dry-run           # the plan: each job, what it will do, its estimated time
    python benchmarks/suite.py cpu_day --workers 2         # run it; the same command again picks up where it stopped
    python benchmarks/suite.py gpu_hour --workers 8 -- trainer.devices=1   # after --: given to every run
    python benchmarks/suite.py smoke --results /tmp/smoke.csv              # every family at debug=smoke, seconds

A suite file lists entries, each one run per dataset, seed and combination of its ``sweep`` values::

    description: what the suite is for
    workers: 2                         # the default of --workers
    overrides: [ir_definition=zoo]     # given to every run of the suite (optional)
    runs:
      - experiment: span_cky_geo       # optional: configs/experiment/<name>.yaml
        model: span_cky                # optional: the experiment's model, else run.yaml's
        data: [geo_funql_iid, geo_funql_template]  # one name or a list
        seeds: [1, 2, 3]               # default [1]
        overrides: [trainer.max_epochs=5]           # optional
        sweep: {ir: [none, rir]}       # optional: one run per combination of these values

**What "already finished" means.** Each job's config is composed as ``run.py`` would compose it, which gives its
*settings*: model, variant (with its subsample suffix), data, seed, protocol (the experiment's budget), IR
definition (IR pipelines only, as the leaderboard keeps them apart: ``zoo.ir.row_definition``) and the run folder
above ``<data>/seed<N>``, ``<model or dir_name>-<variant>`` (which tells presets of one model apart:
``seq2seq_bert2bert_minilm-rir``) unless the experiment sets ``hydra.run.dir`` (``ggd_cfq_authors_sizes``). A
job is *done*, and skipped, when its results file (``results_file``, ``--results``) holds a row with the same
settings from the same commit (``git_commit``; from a clean tree: a ``-dirty`` row or tree never counts as the same
commit, since the changes cannot be compared). ``--any-commit`` counts rows of any commit.

**What a job does.** *new* (no row of these settings in its run directory): ``resume=true``, which starts it or
resumes it from ``checkpoints/last.ckpt`` (a multi-stage run resumes its interrupted stage). *rerun* (finished, at
another commit): ``overwrite=true``, or ``ckpt_path=last`` when its ``last.ckpt`` is newer than that row (an
earlier rerun was interrupted). A multi-stage run (IR pipeline, GandR) reruns without either: its finished stages
are reused as ``zoo/stages.py`` always reuses them, whatever their commit, and the pipeline is chained again with the
current code. *blocked*: its run directory holds the checkpoints of a finished run of other settings (another
protocol); the suite does not overwrite them and says so (move them aside, or set ``hydra.run.dir``).

Jobs start in the suite's order, at most ``--workers`` at once (``benchmarks/jobs.py``, also the runner of
``benchmarks/ir_grid.py``); a multi-stage job waits for the earlier jobs of the same model, data and seed that
train one of its stages (``lir_ind+rir`` listed after ``rir`` and ``lir_d+rir`` waits for both; every
retrieval run for the first), so that no stage is trained twice at once. One line per job says when it started,
finished, failed or was skipped. Stopped (Ctrl-C, SIGTERM), the suite stops its running jobs, which leave their
``last.ckpt`` and no row: the same command resumes them.

**Estimates** (``--dry-run``): per job, the median over earlier rows of the same settings but any seed and commit of
``train_seconds`` plus the test time (``n_test / test_examples_per_s``), from the job's results file; "no earlier
timed row" where there is none (counted as 0 in the totals, which say how many). The wall time on N workers is the
jobs in order, each on the first free worker once the jobs it waits for ended, at the measured times (runs side by
side on shared cores take longer than alone).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing
sys.path.insert(0, str(REPO / "benchmarks"))

from jobs import Job, run_jobs  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

import zoo  # noqa: E402,F401  (registers the configs' resolvers)
from zoo import run_variant, split_variant  # noqa: E402
from zoo.results import REPO_ROOT, ResultsFileError, Row, read_rows  # noqa: E402

SUITES = REPO / "configs" / "suite"
ENTRY_KEYS = {"experiment", "model", "data", "seeds", "overrides", "sweep"}


class SuiteError(ValueError):
    """A suite file that cannot be planned: the message names the file and the entry."""


@dataclass
class Planned:
    """One job of a suite: its overrides, its settings as composed, and what the suite will do with it."""
    overrides: list[str]
    settings: dict[str, str]
    folder: str
    run_dir: Path
    results: Path
    multistage: bool
    stages: set[str]
    checkpoint: Path | None = None  # the ckpt_path it tests or starts from (test_only decodings of another job)
    state: str = "new"  # new | done | rerun | blocked
    detail: str = ""
    action: list[str] = field(default_factory=list)  # what the command adds: resume=true, overwrite=true...
    estimate: float | None = None
    estimate_rows: int = 0
    needs: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        s = self.settings
        return f"{self.folder}/{s['data']}/seed{s['seed']}" + (f"@{s['protocol']}" if s["protocol"] else "")


def read_suite(name_or_path: str) -> tuple[Path, DictConfig]:
    path = Path(name_or_path)
    if not path.suffix:
        path = SUITES / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SUITES.glob("*.yaml")))
        raise SuiteError(f"no suite {name_or_path!r}: no {path}; known: {known}")
    suite = OmegaConf.load(path)
    if not isinstance(suite, DictConfig) or "runs" not in suite or not suite.runs:
        raise SuiteError(f"{path}: expected a mapping with a non-empty list 'runs'")
    for k, entry in enumerate(suite.runs, 1):
        unknown = set(entry) - ENTRY_KEYS if isinstance(entry, DictConfig) else {"(not a mapping)"}
        if unknown or "data" not in entry:
            problem = f"unknown keys {sorted(unknown)}" if unknown else "no data"
            raise SuiteError(f"{path}: runs entry {k}: {problem}; an entry has data and optionally "
                             f"{', '.join(sorted(ENTRY_KEYS - {'data'}))}")
    return path, suite


def _listed(value: Any) -> list:
    """One value or a list of them, as a list; ``${...}`` stays as written, for ``run.py`` to resolve in the run's
    own config (``ckpt_path=runs/.../${data.name}/seed${seed}/...``)."""
    if OmegaConf.is_list(value):
        return OmegaConf.to_container(value, resolve=False)
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def expand(suite: DictConfig, extra: list[str] = ()) -> list[list[str]]:
    """Each job's ``run.py`` overrides, in the suite's order: entries, then datasets, seeds and sweep combinations."""
    jobs = []
    for entry in suite.runs:
        sweep = entry.get("sweep") or {}
        keys = list(sweep)
        for data in _listed(entry.data):
            for seed in _listed(entry.get("seeds")) or [1]:
                for values in itertools.product(*(_listed(sweep[key]) for key in keys)):
                    jobs.append([*map(str, _listed(suite.get("overrides"))),
                                 *([f"experiment={entry.experiment}"] if entry.get("experiment") else []),
                                 *([f"model={entry.model}"] if entry.get("model") else []),
                                 f"data={data}", f"seed={seed}", *map(str, _listed(entry.get("overrides"))),
                                 *(f"{key}={value}" for key, value in zip(keys, values)), *extra])
    return jobs


def compose_all(overrides: list[list[str]]) -> list[DictConfig]:
    """The config each job's ``run.py`` would run with (and Hydra's, for its run directory)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    configs = []
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        for job in overrides:
            try:
                configs.append(compose("run", overrides=job, return_hydra_config=True))
            except (HydraException, OmegaConfBaseException) as error:  # its first line names the option
                raise SuiteError(f"{' '.join(job)}: {str(error).splitlines()[0]}") from None
    return configs


def _stages(cfg: DictConfig) -> set[str]:
    """The stages a multi-stage run trains (zoo/ir/pipeline.py, zoo/retrieval.py, zoo/augment.py), by name."""
    if cfg.get("augment", {}).get("name", "none") != "none":  # every ratio shares the first parser
        return {"trees"}
    retrieval = cfg.get("retrieval", {}).get("name", "none")
    if retrieval != "none":  # retrieval=input trains the first stage; gandr also any fold models (and its own)
        return {"input", "folds"} if retrieval == "gandr" and cfg.retrieval.get("folds") else {"input"}
    if cfg.get("ir", "none") != "none":
        from zoo.ir.pipeline import PIPELINES

        return {stage.name for stage in PIPELINES.get(cfg.ir, ())}
    return set()


def planned(overrides: list[str], cfg: DictConfig) -> Planned:
    from zoo.ir import row_definition

    variant = run_variant(cfg)
    settings = {"model": cfg.model.name, "variant": variant, "data": cfg.data.name, "seed": str(cfg.seed),
                "protocol": str(cfg.get("protocol") or ""),
                "ir_definition": row_definition(split_variant(variant)[0], cfg.get("ir_definition"))}
    run_dir = Path(cfg.hydra.run.dir)
    run_dir = run_dir if run_dir.is_absolute() else REPO / run_dir
    results = Path(cfg.results_file) if cfg.results_file else run_dir / "runs.csv"
    stages = _stages(cfg)
    checkpoint = None if cfg.ckpt_path in (None, "last", "best") else Path(cfg.ckpt_path)
    # the folder above <data>/seed<N>: <model or dir_name>-<variant> unless an experiment names its own
    return Planned(overrides, settings, run_dir.parts[-3], run_dir,
                   results if results.is_absolute() else REPO_ROOT / results, bool(stages), stages,
                   checkpoint if checkpoint is None or checkpoint.is_absolute() else REPO / checkpoint)


def row_settings(row: Row) -> tuple[dict[str, str], str]:
    """A results row's settings (as ``Planned.settings``) and its run folder."""
    from zoo.ir import row_definition

    settings = {key: row.get(key, "") for key in ("model", "variant", "data", "seed", "protocol")}
    settings["ir_definition"] = row_definition(split_variant(settings["variant"])[0], row.get("ir_definition"))
    parts = Path(row.get("run_dir", "")).parts
    return settings, parts[-3] if len(parts) >= 3 else ""


def same_commit(recorded: str, commit: str) -> bool:
    return bool(commit) and recorded == commit and not commit.endswith("-dirty")


def _row_time(row: Row) -> float:
    try:
        return datetime.fromisoformat(row["time"]).timestamp()
    except (KeyError, ValueError):
        return 0.0


def seconds(row: Row) -> float | None:
    """A row's train plus test seconds (test: ``n_test / test_examples_per_s``); None without a train time."""
    try:
        total = float(row["train_seconds"])
    except (KeyError, ValueError):
        return None
    try:
        total += float(row["n_test"]) / float(row["test_examples_per_s"])
    except (KeyError, ValueError, ZeroDivisionError):
        pass
    return total


def classify(job: Planned, rows: list[Row], commit: str, any_commit: bool) -> None:
    """Set ``job.state``, ``detail``, ``action`` and the estimate from the rows of its results file."""
    mine, here, any_seed = [], [], []
    unseeded = {**job.settings, "seed": ""}
    for row in rows:
        settings, folder = row_settings(row)
        if folder == job.folder and {**settings, "seed": ""} == unseeded:
            any_seed.append(row)
            if settings == job.settings:
                mine.append(row)
        recorded = row.get("run_dir", "")
        if recorded and (REPO_ROOT / recorded).resolve() == job.run_dir.resolve():
            here.append(row)
    times = [t for t in map(seconds, any_seed) if t is not None]
    job.estimate, job.estimate_rows = (statistics.median(times), len(times)) if times else (None, 0)
    done = [row for row in mine if any_commit or same_commit(row.get("git_commit", ""), commit)]
    if done:
        job.state, job.detail = "done", f"finished at {done[-1].get('git_commit', '?')} ({done[-1].get('time', '?')})"
        return
    last = job.run_dir / "checkpoints" / "last.ckpt"
    mine_here = [row for row in here if any(row is m for m in mine)]
    if not mine_here:
        checkpoints = list((job.run_dir / "checkpoints").glob("*.ckpt")) if not job.multistage else []
        if here and checkpoints and not (last.is_file() and last.stat().st_mtime > _row_time(here[-1]) + 1):
            other = row_settings(here[-1])[0]
            job.state = "blocked"
            job.detail = (f"{job.run_dir} holds the checkpoints of a finished run of protocol "
                          f"{other['protocol'] or '(none)'}: move them aside, or set hydra.run.dir")
            return
        job.state, job.action = "new", ["resume=true"]
        job.detail = "resumes from its last.ckpt" if last.is_file() else "starts"
        return
    job.state = "rerun"
    newest = mine_here[-1]
    if job.multistage:
        job.action, job.detail = [], f"chains its stages again (last at {newest.get('git_commit', '?')})"
    elif last.is_file() and last.stat().st_mtime > _row_time(newest) + 1:
        job.action, job.detail = ["ckpt_path=last"], "resumes an interrupted rerun"
    else:
        job.action, job.detail = ["overwrite=true"], f"trains again (last at {newest.get('git_commit', '?')})"


def find_needs(jobs: list[Planned]) -> None:
    """A multi-stage job waits for the earlier jobs of the same model, data and seed that share one of its stages,
    and a job given a checkpoint (``ckpt_path=runs/...``) for the earlier job that trains in that run directory."""
    for k, job in enumerate(jobs):
        group = (job.settings["model"], job.settings["data"], job.settings["seed"])
        job.needs = [other.name for other in jobs[:k] if other.state in ("new", "rerun") and (
            other.stages & job.stages and (other.settings["model"], other.settings["data"],
                                           other.settings["seed"]) == group
            or job.checkpoint is not None and other.run_dir in job.checkpoint.parents)]


def plan(suite: DictConfig, extra: list[str] = (), results: Path | None = None, commit: str | None = None,
         any_commit: bool = False) -> list[Planned]:
    """Every job of ``suite``, classified against its results file; ``commit``: the current one (default: git's)."""
    if commit is None:
        from zoo.train import git_commit

        commit = git_commit()
    overrides = expand(suite, [*extra, *([f"results_file={results}"] if results else [])])
    jobs = [planned(o, cfg) for o, cfg in zip(overrides, compose_all(overrides))]
    seen: dict[Path, Planned] = {}
    for job in jobs:
        if job.run_dir in seen:
            raise SuiteError(f"two jobs would run in {job.run_dir}: {' '.join(seen[job.run_dir].overrides)} and "
                             f"{' '.join(job.overrides)}")
        seen[job.run_dir] = job
    tables: dict[Path, list[Row]] = {}
    for job in jobs:
        if job.results not in tables:
            tables[job.results] = read_rows(job.results)
        classify(job, tables[job.results], commit, any_commit)
    find_needs(jobs)
    return jobs


def wall_time(jobs: list[Planned], workers: int) -> float:
    """The jobs to run in order, each on the first free worker once those it waits for ended, at their estimates."""
    free, ends = [0.0] * max(1, workers), {}
    for job in jobs:
        if job.state in ("done", "blocked"):
            continue
        worker = min(range(len(free)), key=free.__getitem__)
        start = max([free[worker], *(ends.get(n, 0.0) for n in job.needs)])
        ends[job.name] = free[worker] = start + (job.estimate or 0.0)
    return max(free)


def hours(value: float) -> str:
    if value < 60:
        return f"{value:.0f} s"
    return f"{value / 3600:.1f} h" if value >= 3600 else f"{value / 60:.1f} min"


def describe(jobs: list[Planned], workers: int) -> list[str]:
    """The plan, one line per job, and its totals."""
    lines = []
    for k, job in enumerate(jobs, 1):
        if job.estimate is None:
            estimate = "no earlier timed row"
        else:
            estimate = f"~{hours(job.estimate)} (median of {job.estimate_rows} row{'s' * (job.estimate_rows > 1)})"
        wait = f"; after {', '.join(job.needs)}" if job.needs else ""
        lines.append(f"{k:3d} {job.state:7s} {job.name}  [{' '.join(job.overrides)}]  {job.detail}"
                     + ("" if job.state in ("done", "blocked") else f"; {estimate}{wait}"))
    todo = [job for job in jobs if job.state in ("new", "rerun")]
    unknown = sum(job.estimate is None for job in todo)
    counts = {state: sum(job.state == state for job in jobs) for state in ("new", "rerun", "done", "blocked")}
    lines.append(f"{len(jobs)} jobs: {counts['new']} new, {counts['rerun']} to rerun, {counts['done']} done "
                 f"(skipped), {counts['blocked']} blocked")
    total = sum(job.estimate or 0.0 for job in todo)
    lines.append(f"estimated {hours(total)} of job time for the {len(todo) - unknown} jobs with an earlier row"
                 + (f" ({unknown} without one, counted as 0)" if unknown else "")
                 + f"; about {hours(wall_time(jobs, workers))} on {workers} worker{'s' * (workers > 1)}")
    return lines


def rebuild_leaderboards(jobs: list[Planned]) -> int:
    """``benchmarks/leaderboard.py`` on each results file the jobs append to (not run directories' own tables)."""
    import leaderboard

    status = 0
    for path in dict.fromkeys(job.results for job in jobs if job.results != job.run_dir / "runs.csv"):
        if path.is_file():
            status |= leaderboard.main(["--runs", str(path)])
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", help="a name in configs/suite/ (smoke, cpu_day, gpu_hour, paper_tables) or a path")
    parser.add_argument("--workers", type=int, help="jobs at once (default: the suite's workers, else 1)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and its estimated time; run nothing")
    parser.add_argument("--any-commit", action="store_true",
                        help="a finished run of the same settings counts whatever its commit")
    parser.add_argument("--results", type=Path, help="the results file of every job (results_file=)")
    parser.add_argument("--deadline-s", type=float, default=float("inf"), help="stop everything after this long")
    parser.add_argument("--log-dir", type=Path, help="one log per job (default: logs/suite/<suite>/)")
    parser.add_argument("--no-leaderboard", action="store_true", help="do not rebuild the leaderboard at the end")
    parser.add_argument("overrides", nargs="*", help="after --: given to every run, e.g. trainer=gpu")
    args = parser.parse_args(argv)
    try:
        path, suite = read_suite(args.suite)
        results = args.results.resolve() if args.results else None
        jobs = plan(suite, args.overrides, results, any_commit=args.any_commit)
    except (SuiteError, ResultsFileError) as error:
        parser.exit(2, f"suite: error: {error}\n")
    workers = args.workers or int(suite.get("workers") or 1)
    print(f"suite {path.stem}: {suite.get('description', '')}".rstrip(": "), flush=True)
    if args.dry_run:
        print("\n".join(describe(jobs, workers)))
        return 0
    for job in jobs:
        if job.state in ("done", "blocked"):
            print(f"[{time.strftime('%H:%M:%S')}] {'skip' if job.state == 'done' else 'blocked'} {job.name}: "
                  f"{job.detail}", flush=True)
    todo = [job for job in jobs if job.state in ("new", "rerun")]
    runner = [Job(job.name, [sys.executable, str(REPO / "benchmarks" / "run.py"), *job.overrides, *job.action],
                  job.needs) for job in todo]
    log_dir = args.log_dir or REPO / "logs" / "suite" / path.stem
    try:
        outcome = run_jobs(runner, workers, time.time() + args.deadline_s, log_dir)
    except KeyboardInterrupt:  # (Ctrl-C or SIGTERM) the running jobs were stopped and left no row
        print(f"suite {path.stem}: interrupted; the same command resumes the interrupted jobs", flush=True)
        return 130
    failed = [name for name, result in outcome.items() if result != "ok"]
    blocked = sum(job.state == "blocked" for job in jobs)
    print(f"suite {path.stem}: {len(outcome) - len(failed)} ran, {len(failed)} did not finish, "
          f"{sum(job.state == 'done' for job in jobs)} skipped as done, {blocked} blocked", flush=True)
    status = 0 if args.no_leaderboard else rebuild_leaderboards(jobs)
    return 1 if failed or blocked or status else 0


if __name__ == "__main__":
    sys.exit(main())
