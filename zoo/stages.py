"""Stages: the training runs that a multi-stage method chains, shared between the runs that need them.

The IR pipelines (``zoo.ir.pipeline``) and GandR (``zoo.retrieval``) train several seq2seq models per run. Each is a
*stage*: an ordinary ``zoo.train.train_and_test`` run on rewritten examples, in a directory named by the stage and a
hash of everything that determines it (model, data, trainer, seed, and the method's own settings), so any run that
needs the same stage with the same settings reuses it. A stage is finished when its ``runs.csv`` holds its row; an
interrupted one resumes with ``ckpt_path=last`` like any run. Runs side by side that need a stage nobody has
trained yet take turns on a lock on its directory (``zoo.results.locked_directory``, POSIX): one trains it, the
others reuse it. The method's run then combines the stages' rows into its own results row (``combined_row``).
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from zoo import run_variant
from zoo.results import locked_directory, path_for_row, read_rows, write_jsonl
from zoo.types import Example, Rewrite

log = logging.getLogger(__name__)



def prepared_data(cfg: DictConfig):
    """The run's ``ParsingDataModule``, read and split: the examples a multi-stage run rewrites or retrieves from."""
    from datamodules import ParsingDataModule

    datamodule = ParsingDataModule(**OmegaConf.to_container(cfg.data, resolve=True))
    datamodule.prepare_data()
    datamodule.setup()
    return datamodule


# Options added after stages were first trained, left out of the hash at their default (which trains as before the
# option existed), so the directories of stages trained earlier, finished or interrupted, keep their names
UNHASHED_DEFAULTS = {("data", "heldout"): None}


def stage_directory(cfg: DictConfig, root: str | Path, name: str, settings: dict[str, Any] | None = None) -> Path:
    """``root/<data>/seed<seed>/<name>-<hash>``, the hash over the model, data and trainer configs (not the run's
    variant, nor ``UNHASHED_DEFAULTS`` at their defaults), the seed, ``stop_when_converged`` and
    ``anneal_when_converged`` where set and the method's ``settings`` for this stage."""
    hashed = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in ("model", "data", "trainer")}
    hashed["model"].pop("variant", None)
    for (section, key), default in UNHASHED_DEFAULTS.items():
        if hashed[section].get(key, default) == default:
            hashed[section].pop(key, None)
    hashed["seed"] = cfg.seed
    if cfg.get("stop_when_converged"):  # (only where set, so the directories of earlier stages keep their names)
        hashed["stop_when_converged"] = True
    if cfg.get("anneal_when_converged"):  # (the same)
        hashed["anneal_when_converged"] = cfg.anneal_when_converged
    if settings:
        hashed["stage"] = settings
    digest = hashlib.sha1(json.dumps(hashed, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return Path(root) / cfg.data.name / f"seed{cfg.seed}" / f"{name}-{digest}"


def run_stage(cfg: DictConfig, name: str, stage_dir: Path, rewrite: Rewrite, formalism: str | None = None,
              init_from: str | None = None, max_steps: int | None = None) -> dict[str, str]:
    """Train and test the stage in ``stage_dir`` unless it finished there before; its results row.

    ``formalism``: what its targets are scored in (None: the dataset's). ``init_from``: a checkpoint whose weights
    and featurizer the stage starts from (GandR's second stage continues the first). ``max_steps``: its own budget
    instead of ``trainer.max_steps``.
    """
    from zoo.train import RunConfigError, train_and_test

    done = stage_dir / "runs.csv"
    # runs side by side that need one stage (GandR's alphas, its fold models) train it once: the others wait here
    # until it is done, then find its row
    with locked_directory(stage_dir):
        if cfg.overwrite and done.exists():
            done.unlink()
        if done.exists():
            log.info("stage %s already trained in %s", name, stage_dir)
        else:
            if cfg.test_only:
                raise RunConfigError(f"test_only=true: stage {name} has no finished run in {stage_dir}")
            log.info("training stage %s in %s", name, stage_dir)
            for cached in stage_dir.glob("cache-*.json"):  # outputs of the weights this training replaces
                cached.unlink()
            train_and_test(stage_config(cfg, name, stage_dir, max_steps), stage_dir, formalism=formalism,
                           rewrite=rewrite, init_from=init_from)
        return read_rows(done)[-1]


def stage_config(cfg: DictConfig, name: str, stage_dir: Path, max_steps: int | None = None) -> DictConfig:
    stage_cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    stage_cfg.model.variant = f"stage:{name}"
    stage_cfg.subsample = ""  # the stage's row names the stage only, not the data subsample nor the augmentation
    if "augment" in stage_cfg:
        stage_cfg.augment.name = "none"
    stage_cfg.results_file = str(stage_dir.resolve() / "runs.csv")  # the stage's row marks it finished
    if max_steps is not None:  # (a trainer.min_steps above it is lowered to it, zoo.train._step_bounds)
        stage_cfg.trainer.max_steps = max_steps
    last = stage_dir / "checkpoints" / "last.ckpt"
    stage_cfg.ckpt_path = "last" if cfg.ckpt_path == "last" and last.exists() else None
    OmegaConf.save(stage_cfg, stage_dir / "config.yaml")
    return stage_cfg


def stage_checkpoint(stage_dir: Path, checkpoint: str = "best") -> Path:
    """The stage's best checkpoint (its final weights when validation never ran), or with ``checkpoint="last"`` its
    final weights."""
    chosen = stage_dir / "checkpoints" / f"{checkpoint}.ckpt"
    return chosen if chosen.exists() else stage_dir / "checkpoints" / "last.ckpt"


def load_stage_model(stage_dir: Path, checkpoint: str = "best"):
    from zoo.parser import Parser

    model = Parser.load(str(stage_checkpoint(stage_dir, checkpoint)))
    return model.cuda() if torch.cuda.is_available() else model


def averaged_test(models: Sequence, datamodule, run_dir: Path) -> tuple[dict[str, float], float]:
    """The test set decoded by ``models`` together, with the mean of their scores (the first model's
    ``average_with``: GGD's logits, span_cky's span scores), scored as any run's test is (GGD first chooses its
    decision thresholds for the mean on dev); the predictions go to ``run_dir``. The test metrics as results
    columns, and the seconds the test took (GGD's pass over dev included)."""
    import lightning.pytorch as L

    final = models[0].average_with(list(models[1:]))
    datamodule.attach(final.featurizer)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, devices=1,
                        accelerator="gpu" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    metrics = trainer.test(final, datamodule=datamodule, verbose=False)[0]
    seconds = time.perf_counter() - start
    write_jsonl(run_dir / "predictions.jsonl", final.test_predictions)
    return {key.replace("/", "_"): float(value) for key, value in metrics.items()}, seconds


@torch.no_grad()
def predict(model, sources: list[str], batch_size: int) -> list[str]:
    """A seq2seq model's outputs for raw source strings."""
    featurizer = model.featurizer
    outputs = []
    for start in range(0, len(sources), batch_size):
        items = [{"input_ids": torch.tensor(featurizer.source_ids(s)), "labels": torch.tensor([featurizer.eos_id])}
                 for s in sources[start:start + batch_size]]
        batch = {k: v.to(model.device) for k, v in featurizer.collate(items).items()}
        outputs += model.parse(batch)
    return outputs


def test_metrics(stage_row: dict[str, str]) -> dict[str, float]:
    """A stage's test metrics (``test_exact_match``, ``test_denotation``, ...) as numbers: a method whose last stage
    is tested on the dataset's own test set reports them as its own."""
    return {key: float(value) for key, value in stage_row.items()
            if key.startswith("test_") and key != "test_examples_per_s" and value != ""}


def run_identity(cfg: DictConfig) -> dict[str, Any]:
    """The model, variant, data and seed that name a run's results row."""
    return {"model": cfg.model.name, "variant": run_variant(cfg), "data": cfg.data.name, "seed": cfg.seed}


def combined_row(identity: dict[str, Any], stage_rows: Sequence[dict[str, str]], stage_dirs: Sequence[Path],
                 run_dir: Path, commit: str, n_train: int, n_test: int, test_seconds: float) -> dict[str, Any]:
    """The results columns of a run named by ``identity`` (``run_identity``) that come from its stages: a
    multi-stage run's, or benchmarks/ensemble.py's, whose stages are finished runs (the caller adds the test
    metrics)."""
    steps = [max(int(r["global_steps"] or 0), 1) for r in stage_rows]
    rates = [max(float(r["train_examples_per_s"]), 1e-9) for r in stage_rows]
    return {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": commit,
        "model": identity["model"],
        "variant": identity["variant"],
        "backbone": stage_rows[0]["backbone"],
        "data": identity["data"],
        "seed": identity["seed"],
        "best_val_metric": f"{stage_rows[-1]['best_val_metric']} (last stage)",
        "best_val": stage_rows[-1]["best_val"],
        "params": sum(int(r["params"]) for r in stage_rows),
        "n_train": n_train,
        "n_test": n_test,
        "train_seconds": round(sum(float(r["train_seconds"]) for r in stage_rows), 1),  # also shared stages'
        "epochs": "+".join(str(r["epochs"]) for r in stage_rows),
        "global_steps": "+".join(str(r["global_steps"]) for r in stage_rows),
        # the stages' batches have one size: the rate over all of them weighs each stage by its steps
        "train_examples_per_s": round(sum(steps) / sum(s / r for s, r in zip(steps, rates)), 1),
        # a pipeline has converged when every stage has; its late gain is its least converged stage's
        "val_late_gain": max((float(r["val_late_gain"]) for r in stage_rows if r.get("val_late_gain")), default=""),
        "converged": all(str(r.get("converged")) == "True" for r in stage_rows),
        "test_examples_per_s": round(n_test / max(test_seconds, 1e-9), 1),
        "hardware": stage_rows[-1]["hardware"],
        "peak_memory_mb": max(float(r["peak_memory_mb"]) for r in stage_rows),
        "resumed": any(str(r["resumed"]) == "True" for r in stage_rows),
        "run_dir": path_for_row(run_dir),
        "stage_dirs": " ".join(path_for_row(d) for d in stage_dirs),
    }
