"""Shared test set-up: offline, the data mirror from ZOO_DATA, and Hydra configs composed as the CLI would."""
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
DATA_ROOT = Path(os.environ.get("ZOO_DATA", REPO / "data"))

MIRROR_PRESENT = (DATA_ROOT / "scan").is_dir()
MIRROR_MISSING = f"data mirror not found at {DATA_ROOT} (set ZOO_DATA)"
needs_mirror = pytest.mark.skipif(not MIRROR_PRESENT, reason=MIRROR_MISSING)


def compose_run(*overrides: str):
    """The config ``benchmarks/run.py <overrides>`` would run with."""
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose("run", overrides=list(overrides))
