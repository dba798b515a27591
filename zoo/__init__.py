"""The zoo's shared layer. Importing it registers the OmegaConf resolvers that configs/ uses."""
from __future__ import annotations

from omegaconf import OmegaConf


def _ir_variant(ir: str | None, limit_train: int | None = None) -> str:
    """configs/model/seq2seq.yaml: the run's variant is the IR pipeline's name (no IR: the baseline), with the size of
    a training subsample (``data.limit_train``) when there is one: ``rir-train20000``."""
    variant = "baseline" if ir in (None, "none") else ir
    return variant if limit_train is None else f"{variant}-train{limit_train}"


OmegaConf.register_new_resolver("ir_variant", _ir_variant, replace=True)
