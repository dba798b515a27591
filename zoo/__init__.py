"""The zoo's shared layer. Importing it registers the OmegaConf resolvers that configs/ uses; ``zoo.load`` loads a
trained run to parse new utterances (``zoo.inference``)."""
from __future__ import annotations

import re
from collections.abc import Sequence

from omegaconf import OmegaConf

from zoo.results import setting


def load(path, data=None, root=None, device=None, batch_size=None):
    """A parser from a run directory or a checkpoint: ``.parse(utterances) -> programs``, ``.parse_with_details``,
    ``.execute(programs) -> denotations`` (``zoo.inference.load``). Imported on first use, so that ``import zoo``
    stays light (no torch)."""
    from zoo.inference import load as load_parser

    return load_parser(path, data=data, root=root, device=device, batch_size=batch_size)


def seq2seq_variant(ir: str | None, retrieval: str | None = None, k: int = 4, alpha: float = 0.5) -> str:
    """configs/model/seq2seq.yaml: the run's variant is the IR pipeline's name (``rir``) or the retrieval method with
    its exemplar count and output weight (``input_tfidf-k4``, ``gandr-k4-a0.5``); with neither, ``baseline``."""
    if retrieval == "input":
        return f"input_tfidf-k{k}"
    if retrieval == "gandr":
        return f"gandr-k{k}-a{alpha:g}"
    return "baseline" if ir in (None, "none") else ir


def augment_suffix(name: str | None = "none", ratio: float | Sequence[float] = 1.0, grow: bool = False,
                   ensemble: bool = False, ensemble_checkpoints: str = "best") -> str:
    """configs/run.yaml: what follows the model's variant when the training set is augmented (``zoo.augment``):
    ``+subs1`` for ``augment=subs`` with one substituted example per training example (``+subs1_2``: a second
    parser at each of two ratios), ``+subs1+grow`` where every substitution lengthens its program
    (``augment.grow``), ``+ensemble`` where the parsers decode together (``augment.ensemble``),
    ``+ensemble_best_last`` where each does with its best and its last weights (``augment.ensemble_checkpoints``);
    nothing without."""
    if name in (None, "none"):
        return ""
    ratios = "_".join(f"{r:g}" for r in ratio) if isinstance(ratio, Sequence) else f"{ratio:g}"
    ensembled = "+ensemble" + ("" if ensemble_checkpoints == "best" else "_" + ensemble_checkpoints.replace("+", "_"))
    return f"+{name}{ratios}" + ("+grow" if grow else "") + (ensembled if ensemble else "")


def subsample_suffix(train_limit: int | None = None, train_limit_seed: int = 0, limit_train: int | None = None,
                     limit_eval: int | None = None, heldout: int | None = None, val_seed: int = 0) -> str:
    """configs/run.yaml: what follows the model's variant when a run uses part of the data: ``-sample1000`` (a seeded
    random 1,000 training examples; ``-sample1000s3`` with another seed), ``-train20000`` (the first 20,000),
    ``-eval2000`` (the first 2,000 dev and test examples), ``-heldout100`` (tested on 100 training examples held
    out by the split's rule, ``data.heldout``; ``-heldout100s3`` drawn by another ``data.val_seed``)."""
    suffix = ""
    if heldout is not None:
        suffix = f"-heldout{heldout}" + (f"s{val_seed}" if val_seed else "")
    if train_limit is not None:
        suffix += f"-sample{train_limit}" + (f"s{train_limit_seed}" if train_limit_seed else "")
    suffix += "" if limit_train is None else f"-train{limit_train}"
    return suffix + ("" if limit_eval is None else f"-eval{limit_eval}")


def run_variant(cfg) -> str:
    """The results' variant of a run config: the model's (``rir``, ``gandr-k4-a0.5``), the augmentation (``+subs1``)
    and the data subsample (``-sample1000``), as configs/run.yaml names its directory."""
    augment = cfg.get("augment") or {}
    suffix = augment_suffix(augment.get("name"), augment.get("ratio", 1), augment.get("grow", False),
                            augment.get("ensemble", False), augment.get("ensemble_checkpoints", "best"))
    return f"{cfg.model.variant}{suffix}{cfg.get('subsample') or ''}"


_SUBSAMPLE = re.compile(r"-(?:heldout|sample|train|eval)\d.*$")


def split_variant(variant: str) -> tuple[str, str]:
    """``rir-train20000-eval2000`` -> (``rir``, ``train20000-eval2000``): the method, and the subsample it ran on."""
    match = _SUBSAMPLE.search(variant)
    return (variant, "") if match is None else (variant[:match.start()], match.group()[1:])


OmegaConf.register_new_resolver("zoo_env", setting, replace=True)
OmegaConf.register_new_resolver("seq2seq_variant", seq2seq_variant, replace=True)
OmegaConf.register_new_resolver("subsample", subsample_suffix, replace=True)
OmegaConf.register_new_resolver("augment_suffix", augment_suffix, replace=True)
