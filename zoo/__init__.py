"""The zoo's shared layer. Importing it registers the OmegaConf resolvers that configs/ uses."""
from __future__ import annotations

from omegaconf import OmegaConf


def _ir_variant(ir: str | None, limit_train: int | None = None, limit_eval: int | None = None) -> str:
    """configs/model/seq2seq.yaml: the run's variant is the IR pipeline's name (no IR: the baseline), with the sizes of
    the subsamples when there are any (``data.limit_train``, ``data.limit_eval``): ``rir-train20000-eval2000``."""
    variant = "baseline" if ir in (None, "none") else ir
    variant += "" if limit_train is None else f"-train{limit_train}"
    return variant + ("" if limit_eval is None else f"-eval{limit_eval}")


OmegaConf.register_new_resolver("ir_variant", _ir_variant, replace=True)
