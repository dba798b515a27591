"""One training run, as ``benchmarks/run.py`` drives it (docs/DESIGN.md, "The flow of one run").

Resolve names (fail before any work) -> read data -> fit the featurizer and build the model -> train with
best/last checkpoints -> test the best checkpoint -> write ``predictions.jsonl`` and one row of
``results/runs.csv``. A row is written only when the run finishes, so an interrupted run leaves none; it
resumes from ``checkpoints/last.ckpt`` with ``ckpt_path=last``. ``test_only=true`` skips training and tests
``checkpoints/best.ckpt`` (or ``ckpt_path``) with the current code, e.g. after a change to decoding.
"""
from __future__ import annotations

import logging
import math
import os
import platform
import resource
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, EMAWeightAveraging, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from omegaconf import DictConfig, OmegaConf

from zoo import run_variant
from zoo.cfq_breakdown import breakdown_row, record_breakdown, summary
from zoo.options import RunConfigError
from zoo.parser import load_checkpoint
from zoo.registry import get_dataset, get_model
from zoo.results import ResultsFileError, Row, append_row, path_for_row, read_rows, write_jsonl
from zoo.types import Rewrite

REPO_ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger(__name__)


class Throughput(Callback):
    """Counts training examples and the seconds spent in training batches only (no validation), and times the test
    loop alone (not what a model prepares in ``on_test_start``, such as GGD choosing its threshold on dev). The
    counts and the wall time of training go into checkpoints, so a resumed run reports its whole training."""

    def __init__(self):
        self.examples, self.seconds, self._start = 0, 0.0, 0.0
        self.test_seconds, self._test_start = 0.0, 0.0
        self.earlier_fit_seconds, self._fit_start = 0.0, time.perf_counter()  # earlier: before a resume

    def fit_seconds(self) -> float:
        return self.earlier_fit_seconds + time.perf_counter() - self._fit_start

    def on_fit_start(self, trainer, module):
        self._fit_start = time.perf_counter()

    def state_dict(self) -> dict[str, float]:
        return {"examples": self.examples, "seconds": self.seconds, "fit_seconds": self.fit_seconds()}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.examples, self.seconds = state["examples"], state["seconds"]
        self.earlier_fit_seconds = state["fit_seconds"]

    def on_test_epoch_start(self, trainer, module):
        self._test_start = time.perf_counter()

    def on_test_epoch_end(self, trainer, module):
        self.test_seconds = time.perf_counter() - self._test_start

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seconds += time.perf_counter() - self._start
        self.examples += len(batch["examples"])


class ValidationCurve(Callback):
    """The monitored validation metric after each validation, as ``(global step, value)``; kept in checkpoints, so
    a resumed run's curve is whole. ``late_gain`` reads convergence off it. With ``stop_when_converged`` training
    ends at the first validation where the run counts as converged (not before the trainer's ``min_steps``):
    ``max_steps`` becomes a cap, and a run that plateaus early spends no more time.

    With ``anneal_share`` > 0 as well (``anneal_when_converged``), that validation does not stop the run but starts
    its last phase: the learning rate decays linearly to 0 over ``anneal_share`` times the steps trained so far,
    and training ends at the first validation after that. A fixed-horizon decay leaves a run that plateaus early
    unannealed (a GeoQuery baseline stopped at 2,500 of 12,000 steps with 83% of its peak rate: README,
    "Stopping early costs the annealing"); here the stop rule says where the decay begins, whatever the cap. The
    decay multiplies the rate the model's schedule sets every step, so it needs one (a step-wise ``LambdaLR``, as
    ``seq2seq`` has)."""

    def __init__(self, monitor: str, stop_when_converged: bool = False, anneal_share: float = 0.0):
        self.monitor, self.stop_when_converged, self.anneal_share = monitor, stop_when_converged, anneal_share
        self.points: list[tuple[int, float]] = []
        self.anneal: tuple[int, int] | None = None  # first and last step of the decay, once it has begun

    def on_train_start(self, trainer, module):
        schedules = trainer.lr_scheduler_configs
        step_wise = schedules and all(config.interval == "step" and isinstance(
            config.scheduler, torch.optim.lr_scheduler.LambdaLR) for config in schedules)
        if self.anneal_share and not step_wise:
            raise RunConfigError(f"anneal_when_converged={self.anneal_share}: {type(module).__name__} sets no "
                                 "learning rate schedule every step (a LambdaLR) for the decay to scale; use 0")

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self.anneal is None:
            return
        first, last = self.anneal
        decay = max(0.0, 1.0 - (trainer.global_step - first) / (last - first))
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"] *= decay  # of this step's rate: the LambdaLR sets it anew after every step

    def on_validation_end(self, trainer, module):
        value = trainer.callback_metrics.get(self.monitor)
        if value is None or trainer.sanity_checking:
            return
        step = trainer.global_step
        self.points.append((step, float(value)))
        if not self.stop_when_converged or step < (trainer.min_steps or 0):
            return  # (a stop asked for earlier would stand once min_steps are reached, however the curve went on)
        if self.anneal is None:
            gain = late_gain(self.points, step)
            if gain is None or gain >= CONVERGED_GAIN:
                return
            if self.anneal_share:
                self.anneal = (step, step + max(1, math.ceil(self.anneal_share * step)))
                log.info("converged at step %d: the learning rate decays to 0 by step %d", *self.anneal)
        if self.anneal is None or step >= self.anneal[1]:
            trainer.should_stop = True

    def verdict(self, last_step: int) -> dict[str, Any]:
        """The results columns of the convergence rule; for an annealed run, where the decay began (where the rule
        held), and that step as ``annealed_from_step``."""
        if self.anneal is None:
            return convergence_columns(self.points, last_step)
        first = self.anneal[0]
        return {**convergence_columns([point for point in self.points if point[0] <= first], first),
                "annealed_from_step": first}

    def state_dict(self) -> dict[str, Any]:
        return {"points": self.points, "anneal": self.anneal}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.points = [tuple(point) for point in state["points"]]
        self.anneal = tuple(state["anneal"]) if state.get("anneal") else None


class EMAWeights(EMAWeightAveraging):
    """Lightning's exponential moving average of the weights (``callbacks=ema``), which validates, checkpoints and
    tests the averaged weights. Lightning's own callback, on loading a checkpoint for testing in the process that
    trained it, puts the raw weights of that step back (``current_model_state``), so the best checkpoint chosen on
    the averaged weights would be tested without them; outside fitting this keeps the checkpoint's averaged
    ``state_dict``, as a fresh ``test_only=true`` run does."""

    def on_load_checkpoint(self, trainer, module, checkpoint):
        if trainer.state.fn == TrainerFn.FITTING:  # resuming: restore both the raw and the averaged weights
            super().on_load_checkpoint(trainer, module, checkpoint)


class RunCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` for a run directory that may move between machines (a run begun on a GPU
    machine, then resumed here from its ``last.ckpt``). Lightning forgets the best score when the directory it
    recorded differs from the current one, so the resumed run would choose its checkpoint only among the epochs
    after the move; here a checkpoint recorded in the old directory is read as the same file in the new one, when
    that file is there."""

    @property
    def state_key(self) -> str:  # Lightning's own key, so that checkpoints written by ModelCheckpoint resume here
        return ModelCheckpoint.__qualname__ + super().state_key.removeprefix(type(self).__qualname__)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old = Path(state_dict.get("dirpath") or "")

        def moved(path: str) -> str:
            return str(Path(self.dirpath) / Path(path).name) if path and Path(path).parent == old else path

        best = state_dict.get("best_model_path") or ""
        if self.dirpath and old != Path(self.dirpath) and moved(best) != best and Path(moved(best)).exists():
            state_dict = {**state_dict, "dirpath": self.dirpath,
                          **{key: moved(state_dict.get(key) or "")
                             for key in ("best_model_path", "kth_best_model_path", "last_model_path")},
                          "best_k_models": {moved(path): score for path, score in state_dict["best_k_models"].items()}}
        super().load_state_dict(state_dict)


# A run has converged when its validation metric rose by less than this over the last LATE_SHARE of its steps.
CONVERGED_GAIN, LATE_SHARE = 0.01, 0.3


def late_gain(points: list[tuple[int, float]], last_step: int) -> float | None:
    """How much the best validation value rose over the last ``LATE_SHARE`` of ``last_step`` steps: the best of
    all ``(step, value)`` points minus the best up to step ``(1 - LATE_SHARE) * last_step``. None without a point
    before that step (nothing to compare with)."""
    cut = (1 - LATE_SHARE) * last_step
    early = [value for step, value in points if step <= cut]
    if not early:
        return None
    return max(value for _, value in points) - max(early)


def convergence_columns(points: list[tuple[int, float]], last_step: int) -> dict[str, Any]:
    """The results columns of the convergence rule: ``val_late_gain`` and ``converged``."""
    gain = late_gain(points, last_step)
    return {"val_late_gain": "" if gain is None else round(gain, 4),
            "converged": gain is not None and gain < CONVERGED_GAIN}


def train_and_test(cfg: DictConfig, run_dir: str | Path, rewrite: Rewrite | None = None,
                   formalism: str | None = None, init_from: str | None = None) -> dict[str, Any]:
    """One model: train, test, record. A stage of a multi-stage method (``zoo.stages``) passes ``rewrite`` (what
    each split becomes: an IR stage's sources and targets, exemplars appended to the utterances), the ``formalism``
    its targets are scored in, and ``init_from``, a checkpoint whose featurizer and weights training starts from."""
    spec = get_dataset(cfg.data.name)
    formalism = formalism or spec.formalism
    model_cls = get_model(cfg.model.name)
    model_cls.check_formalism(formalism)
    commit = git_commit()  # the code that trains, read before a long run gives time for new commits
    run_dir = Path(run_dir)
    checkpoint_dir = run_dir / "checkpoints"
    resume_from = None if cfg.test_only else _resume_path(cfg, checkpoint_dir)
    tested = _existing_checkpoint(cfg.ckpt_path or "best", checkpoint_dir, "test_only=true") if cfg.test_only else None
    restored = resume_from or tested or init_from
    checkpoint = load_checkpoint(restored) if restored else None  # checked before the data is read
    if restored and restored != init_from:
        _check_checkpoint_run(checkpoint, restored, cfg)
    L.seed_everything(cfg.seed, workers=True)

    from datamodules import ParsingDataModule

    datamodule = ParsingDataModule(**OmegaConf.to_container(cfg.data, resolve=True))
    datamodule.prepare_data()
    datamodule.setup()
    if rewrite is not None:
        datamodule.train, datamodule.val, datamodule.test = (
            rewrite(name, split) for name, split in
            (("train", datamodule.train), ("val", datamodule.val), ("test", datamodule.test)))

    params, featurizer = model_settings(cfg)
    model = model_cls.build(datamodule.train, formalism, featurizer=featurizer,
                            featurizer_state=checkpoint["featurizer"] if checkpoint else None,
                            world=datamodule.world, **params)
    if restored:  # Lightning restores a resumed or tested run's weights again: this checks they fit first
        _load_weights(model, checkpoint, restored, featurizer)
    datamodule.attach(model.featurizer)

    monitor = f"val/{model.primary_metric}"
    best = RunCheckpoint(dirpath=checkpoint_dir, filename="best", monitor=monitor, mode="max", save_top_k=1,
                         enable_version_counter=False)
    last = RunCheckpoint(dirpath=checkpoint_dir, save_top_k=0, save_last=True,
                         every_n_train_steps=cfg.checkpoint_every_n_steps)
    curve = ValidationCurve(monitor, cfg.get("stop_when_converged", False), cfg.get("anneal_when_converged", 0.0))
    throughput = Throughput()
    extra_callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values()]
    logger = instantiate(cfg.logger, save_dir=str(run_dir)) if cfg.get("logger") else False
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=[best, last, throughput, curve, *extra_callbacks],
                                     logger=logger, default_root_dir=str(run_dir), **_step_bounds(cfg.trainer))
    _check_distributed(trainer)

    train_seconds, convergence = None, {}
    if tested is None:
        trainer.fit(model, datamodule=datamodule, ckpt_path=resume_from)
        train_seconds = throughput.fit_seconds()  # a resumed run's included
        # read now: testing the best checkpoint restores the callbacks' state as it was at that step
        convergence = curve.verdict(trainer.global_step)
        if trainer.interrupted:
            raise KeyboardInterrupt(f"training interrupted; resume with ckpt_path=last (run dir {run_dir})")
        # last.ckpt is saved every checkpoint_every_n_steps, so it may miss the final steps: save the end state,
        # or ckpt_path=last would train them again
        trainer.save_checkpoint(checkpoint_dir / "last.ckpt")
    # None when validation never ran: test the final weights
    best_path = tested or best.best_model_path or None
    test_metrics = trainer.test(model, datamodule=datamodule, ckpt_path=best_path, verbose=False)[0]

    row: dict[str, Any] = {}
    if trainer.is_global_zero:  # the other DDP processes write nothing (Parser gathered their rows here)
        write_jsonl(run_dir / "predictions.jsonl", model.test_predictions)
        row = {
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "git_commit": commit,
            "model": cfg.model.name,
            "variant": run_variant(cfg),
            "backbone": getattr(model, "backbone", cfg.model.name),
            "data": cfg.data.name,
            "seed": cfg.seed,
            **{key.replace("/", "_"): float(value) for key, value in sorted(test_metrics.items())},
            "best_val_metric": monitor,
            "best_val": float(best.best_model_score) if best.best_model_score is not None else "",
            "params": sum(p.numel() for p in model.parameters()),
            "n_train": len(datamodule.train),
            "n_test": len(datamodule.test),
            # a test-only run trained nothing: its training columns stay empty
            "train_seconds": "" if tested else round(train_seconds, 1),
            "epochs": "" if tested else trainer.current_epoch,
            "global_steps": "" if tested else trainer.global_step,
            # every process trains on as many examples as this one (DistributedSampler): all of them together
            "train_examples_per_s": "" if tested else round(
                throughput.examples * trainer.world_size / max(throughput.seconds, 1e-9), 1),
            **convergence,
            "test_examples_per_s": round(len(datamodule.test) / max(throughput.test_seconds, 1e-9), 1),
            "hardware": hardware_string(trainer),
            "processes": trainer.world_size,  # training and testing processes (DDP), each on its own device
            "peak_memory_mb": round(_peak_memory_mb(), 1),
            "resumed": bool(resume_from),
            "run_dir": path_for_row(run_dir),
            "retested_checkpoint": path_for_row(tested) if tested else "",
        }
        record(cfg, run_dir, row)
        log.info("test %s; predictions in %s", {k: round(float(v), 4) for k, v in test_metrics.items()},
                 run_dir / "predictions.jsonl")
        if formalism == "cfq_sparql":  # kept beside the results file: the run directory may not outlive the machine
            breakdown = breakdown_row(row, run_dir / "predictions.jsonl")
            record_breakdown(breakdown, results_path(cfg, run_dir).with_name("cfq_edge_match.csv"))
            log.info("CFQ breakdown: %s", summary(breakdown))
    return row


def _check_distributed(trainer: L.Trainer) -> None:
    """Several processes must not run a collective per evaluation step: their shards of dev and test may differ by
    a batch (``EvaluationShardSampler``), and DDP broadcasts buffers before every forward unless told not to."""
    if trainer.world_size > 1 and getattr(trainer.strategy, "_ddp_kwargs", {}).get("broadcast_buffers", True):
        raise RunConfigError(
            f"trainer.strategy: {trainer.world_size} processes need a DDPStrategy with broadcast_buffers: false "
            "(evaluation shards may differ by a batch); use trainer=cpu_ddp or trainer=ddp, which set it")


def _step_bounds(trainer_cfg: DictConfig) -> dict[str, int]:
    """``min_steps`` no larger than ``max_steps``: a shorter budget (``debug=smoke``'s 4 steps, a stage's own
    ``continue_steps``) bounds the recipe's minimum too, where Lightning would train on to the minimum."""
    max_steps, min_steps = trainer_cfg.get("max_steps", -1), trainer_cfg.get("min_steps")
    if min_steps is not None and max_steps is not None and 0 <= max_steps < min_steps:
        return {"min_steps": max_steps}
    return {}


def model_settings(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's constructor arguments and its featurizer's, with ``debug=smoke``'s small sizes merged in."""
    params = OmegaConf.to_container(cfg.model.params, resolve=True)
    featurizer = OmegaConf.to_container(cfg.model.featurizer, resolve=True)
    if cfg.smoke:  # the model config's small sizes for debug=smoke, where it has them
        for target, key in ((params, "smoke_params"), (featurizer, "smoke_featurizer")):
            if cfg.model.get(key):
                target.update(OmegaConf.to_container(cfg.model[key], resolve=True))
    return params, featurizer


def record(cfg: DictConfig, run_dir: Path, row: dict[str, Any]) -> None:
    """Append ``row``, with the free-form columns the config sets (``note``, ``protocol``), to the results file; a
    ``debug=smoke`` row says so (``smoke``), so that the headline table leaves it out wherever it was written."""
    row.update({key: str(cfg[key]) for key in ("note", "protocol") if cfg.get(key)})
    if cfg.get("smoke"):
        row["smoke"] = True
    append_row(results_path(cfg, run_dir), row)


def results_path(cfg: DictConfig, run_dir: Path) -> Path:
    results_file = Path(cfg.results_file) if cfg.results_file else run_dir / "runs.csv"
    return results_file if results_file.is_absolute() else REPO_ROOT / results_file


def rows_before_training(path: Path, required: tuple[str, ...] = ()) -> list[Row]:
    """``zoo.results.read_rows`` of a table a run will append to: one that would refuse the row at the end (a row
    that does not fit, another kind of table, a folder that cannot be written) is refused before any training."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "a"):  # (what append_row will open)
            return read_rows(path, required)
    except ResultsFileError as error:
        raise RunConfigError(f"{error}: repair it, or give another results_file, before training") from None
    except OSError as error:
        raise RunConfigError(f"{path}: cannot write there ({error.strerror}): give another results_file") from None


def _resume_path(cfg: DictConfig, checkpoint_dir: Path) -> str | None:
    if cfg.get("resume") and not cfg.overwrite and cfg.ckpt_path in (None, "last"):
        last = checkpoint_dir / "last.ckpt"
        if last.is_file():
            return str(last)
        for stale in checkpoint_dir.glob("*.ckpt"):  # a best.ckpt without a last.ckpt: a start killed early
            stale.unlink()
        return None
    if cfg.ckpt_path is None:
        earlier = sorted(checkpoint_dir.glob("*.ckpt"))
        if earlier and not cfg.overwrite:
            raise RunConfigError(
                f"{checkpoint_dir} already holds checkpoints of an earlier run: pass ckpt_path=last to resume it, "
                "overwrite=true to start again there, or another seed / hydra.run.dir")
        for path in earlier:  # overwrite=true: a stale best.ckpt must not be tested in place of this run's
            path.unlink()
        return None
    return _existing_checkpoint(cfg.ckpt_path, checkpoint_dir, f"ckpt_path={cfg.ckpt_path}")


def _existing_checkpoint(name: str, checkpoint_dir: Path, option: str) -> str:
    """``last`` and ``best`` are this run directory's checkpoints; any other name is a file."""
    path = checkpoint_dir / f"{name}.ckpt" if name in ("last", "best") else Path(name)
    if not path.is_file():
        raise RunConfigError(f"{option}: no checkpoint at {path}")
    return str(path)


def _check_checkpoint_run(checkpoint: dict[str, Any], path: str, cfg: DictConfig) -> None:
    """A checkpoint resumed or tested must come from this run's model and dataset."""
    model = checkpoint["model_name"]
    data = (checkpoint.get("datamodule_hyper_parameters") or {}).get("name")
    if model != cfg.model.name:
        raise RunConfigError(f"{path} is a checkpoint of model={model}, not of this run's model={cfg.model.name}")
    if data is not None and data != cfg.data.name:
        raise RunConfigError(f"{path} was trained on data={data}, not on this run's data={cfg.data.name}")


def _load_weights(model: L.LightningModule, checkpoint: dict[str, Any], path: str, featurizer: dict) -> None:
    """Load ``checkpoint``'s weights into ``model``, or say which featurizer option or hyperparameter of the run
    differs from the checkpoint's when they do not fit."""
    restored = model.featurizer
    for key, value in featurizer.items():  # the checkpoint's featurizer is used: an option asking otherwise is lost
        if hasattr(restored, key) and getattr(restored, key) != value:
            raise RunConfigError(f"{path} was trained with model.featurizer.{key}={getattr(restored, key)}, "
                                 f"not {value}: drop the option or choose another checkpoint")
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as error:
        trained = checkpoint.get("hyper_parameters") or {}
        differ = [f"{k}={v} (this run: {model.hparams[k]})" for k, v in trained.items()
                  if k in model.hparams and model.hparams[k] != v]
        raise RunConfigError(f"{path}: its weights do not fit this run's model: "
                             f"{'; '.join(differ) or str(error).splitlines()[0]}") from None


def git_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()

    if os.environ.get("ZOO_GIT_COMMIT"):  # a copy of the code on a batch machine: the commit it was copied at
        return os.environ["ZOO_GIT_COMMIT"]
    commit = git("rev-parse", "--short=10", "HEAD") or "unknown"
    # results/ changes whenever a run finishes: another run's new row does not make this code dirty
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    return commit + ("-dirty" if changed else "")


def hardware_string(trainer: L.Trainer | None = None) -> str:
    """The GPU a trainer runs on, else this machine's CPU and torch's thread count (per process), and the number of
    processes where there are several (DDP; also the results' ``processes`` column)."""
    on_cuda = trainer is not None and trainer.accelerator.__class__.__name__.lower().startswith("cuda")
    if on_cuda and torch.cuda.is_available():
        return f"{trainer.num_devices}x {torch.cuda.get_device_name(0)}"
    processes = trainer.world_size if trainer is not None else 1
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    threads = f"torch threads: {torch.get_num_threads()}"
    return f"{cpu}, {threads}" if processes == 1 else f"{cpu}, {processes} processes, {threads} each"


def _peak_memory_mb() -> float:
    if torch.cuda.is_available() and torch.cuda.max_memory_allocated() > 0:
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
