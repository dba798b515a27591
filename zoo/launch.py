"""What one launch of ``benchmarks/run.py`` runs: the checks of ``resume=`` and ``ckpt_path=``, then the run's kind,
one model (``zoo.train``), an IR pipeline (``zoo.ir.pipeline``), exemplar retrieval (``zoo.retrieval``) or subtree
substitution (``zoo.augment``).

The run path's imports point one way: this module -> ``zoo.ir.pipeline``, ``zoo.retrieval`` and ``zoo.augment`` ->
``zoo.stages`` -> ``zoo.train``, which trains and tests one model (one stage) and knows none of the modules above it.
"""
from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from datamodules import DATA_ERRORS
from zoo.augment import AugmentError, run_augmented
from zoo.download import DownloadError
from zoo.ir import UnsupportedIRError
from zoo.ir.pipeline import run_pipeline
from zoo.options import OptionError, check_options
from zoo.parser import UnsupportedFormalismError
from zoo.registry import RegistryError
from zoo.retrieval import RetrievalError, run_retrieval
from zoo.results import RUN_KEYS, ResultsFileError, Row, path_from_row
from zoo.train import RunConfigError, results_path, rows_before_training, train_and_test

log = logging.getLogger(__name__)

# Mistakes in the command or the data, and data.download=true failing (offline): what benchmarks/run.py, and the
# benchmarks that build a run's data and model, say in one message, without a traceback.
USER_ERRORS = (RegistryError, OptionError, RunConfigError, ResultsFileError, UnsupportedFormalismError,
               UnsupportedIRError, RetrievalError, AugmentError, DownloadError, *DATA_ERRORS)


def run(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    """Train, test and record one run in ``run_dir`` (with ``ir=``: a whole IR pipeline, ``zoo.ir.pipeline``; with
    ``retrieval=``: exemplar retrieval, ``zoo.retrieval``; with ``augment=``: subtree substitution, ``zoo.augment``);
    returns the row written to the results file."""
    check_options(cfg)
    run_dir = Path(run_dir)
    rows = finished_rows(cfg, run_dir)
    # a finished run's checkpoints, not those of a later launch that was interrupted there
    finished_checkpoints = bool(rows) and not cfg.overwrite and not _saved_after(rows[-1], run_dir)
    if cfg.get("resume"):
        protocol = str(cfg.get("protocol") or "")
        if same := [row for row in rows if row.get("protocol", "") == protocol]:
            log.info("resume=true: %s already finished (its row of %s); nothing to do", run_dir, same[-1]["time"])
            return same[-1]
        if finished_checkpoints and any((run_dir / "checkpoints").glob("*.ckpt")):
            raise RunConfigError(  # its last.ckpt is another recipe's end, not an interrupted run of this one
                f"resume=true: {run_dir} holds a finished run of protocol {rows[-1].get('protocol') or '(none)'}, "
                f"not {protocol or '(none)'}: move it aside, or overwrite=true to train this one there")
    elif cfg.ckpt_path == "last" and not cfg.test_only and finished_checkpoints:
        raise RunConfigError(  # it would test the same weights again and add a second row
            f"ckpt_path=last: the run in {run_dir} already finished (its row of {rows[-1]['time']}): "
            "test_only=true tests it again, overwrite=true trains it again")
    retrieval, ir = cfg.get("retrieval", {}).get("name", "none"), cfg.get("ir", "none")
    augment = cfg.get("augment", {}).get("name", "none")
    methods = [f"{key}={value}" for key, value in (("retrieval", retrieval), ("ir", ir), ("augment", augment))
               if value != "none"]
    if len(methods) > 1:
        raise RunConfigError(f"{' and '.join(methods)} do not combine: choose one of them")
    if methods and _several_processes(cfg):
        # every process would run the stages' predictions and write the method's files and row
        raise RunConfigError(f"{methods[0]} runs its stages in one process: drop trainer=ddp / trainer=cpu_ddp (or "
                             "set trainer.devices=1)")
    if retrieval != "none":
        return run_retrieval(cfg, run_dir)
    if ir != "none":
        return run_pipeline(cfg, run_dir)
    if augment != "none":
        return run_augmented(cfg, run_dir)
    return train_and_test(cfg, run_dir)


def _several_processes(cfg: DictConfig) -> bool:
    """Whether the trainer config asks for DDP over more than one device (``devices: -1``: every GPU there is)."""
    devices = cfg.trainer.get("devices", 1)
    if not cfg.trainer.get("strategy") or devices in ("auto", None):
        return False
    if devices == -1:
        import torch

        return cfg.trainer.get("accelerator") == "cpu" or torch.cuda.device_count() > 1
    if isinstance(devices, str):  # "2", or "0,1": GPU indices
        return int(devices) > 1 if devices.strip().isdigit() else len(devices.strip(",").split(",")) > 1
    return devices > 1 if isinstance(devices, int) else len(devices) > 1


def _saved_after(finished: dict[str, str], run_dir: Path) -> bool:
    """Whether ``run_dir``'s last.ckpt was written after the ``finished`` row: by a later launch that was
    interrupted (the finished run's own checkpoints were moved aside), not that run's end state."""
    last = run_dir / "checkpoints" / "last.ckpt"
    # the row's time has whole seconds and comes after its run's last save: a second's margin
    return last.is_file() and last.stat().st_mtime > datetime.fromisoformat(finished["time"]).timestamp() + 1


def finished_rows(cfg: DictConfig, run_dir: Path) -> list[Row]:
    """The results rows of the runs that finished in ``run_dir``, oldest first."""
    rows = rows_before_training(results_path(cfg, run_dir), required=(*RUN_KEYS, "run_dir"))
    return [row for row in rows if path_from_row(row["run_dir"]).resolve() == run_dir.resolve()]
