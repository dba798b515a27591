"""The shared model base (docs/DESIGN.md, Contracts): ``Featurizer`` and ``Parser``.

A model implements ``training_step`` (its loss) and ``parse(batch) -> list[str]``; validation, testing,
prediction, metrics, collected predictions and checkpointed featurizer state live here, once.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, ClassVar, Sequence

import lightning.pytorch as L
import numpy as np
import torch
import torch.distributed as dist
from torchmetrics import MetricCollection

from zoo.formalisms import get_formalism
from zoo.metrics import DenotationAccuracy, EdgeMatchRate, ExactMatch, ExampleScore, Scorer
from zoo.options import RunConfigError
from zoo.types import Example


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    """A checkpoint of this zoo, or a ``RunConfigError`` naming the file when it is none (random bytes, empty,
    truncated, another program's)."""
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as error:  # torch raises UnpicklingError, EOFError, RuntimeError... by what the bytes are
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RunConfigError(f"{path}: not a readable checkpoint ({reason})") from None
    if not isinstance(checkpoint, dict) or not {"state_dict", "model_name", "featurizer"} <= checkpoint.keys():
        raise RunConfigError(f"{path}: not a checkpoint of this zoo (no state_dict, model_name and featurizer)")
    return checkpoint


def distributed() -> bool:
    """Whether this process is one of several (DDP)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def state_digest(state: Any) -> str:
    """A digest of a featurizer's ``state_dict`` that is the same in every process for equal states: dicts by sorted
    key, sets sorted (their order follows each process's string hashing), tensors by dtype, shape and bytes."""
    digest = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, dict):
            digest.update(b"{")
            for key in sorted(value, key=repr):
                feed(key)
                feed(value[key])
            digest.update(b"}")
        elif isinstance(value, (set, frozenset)):
            digest.update(b"<")
            for text in sorted(repr(item) for item in value):
                digest.update(text.encode())
            digest.update(b">")
        elif isinstance(value, (list, tuple)):
            digest.update(b"[")
            for item in value:
                feed(item)
            digest.update(b"]")
        elif isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
            digest.update(tensor.numpy().tobytes() if tensor.dtype != torch.bfloat16 else
                          tensor.view(torch.int16).numpy().tobytes())
        elif isinstance(value, np.ndarray):  # (whose repr elides the middle of a large array)
            digest.update(f"{value.dtype}{value.shape}".encode())
            digest.update(np.ascontiguousarray(value).tobytes())
        else:
            digest.update(repr(value).encode())
        digest.update(b",")

    feed(state)
    return digest.hexdigest()


class UnsupportedFormalismError(ValueError):
    """A model asked to run on a program language it cannot produce."""


class Featurizer:
    """Turns examples into tensors for one model. Owned by the model; saved in its checkpoints.

    ``fit`` sees only the training split. ``state_dict``/``from_state_dict`` must round-trip everything
    ``fit`` learned, so a checkpoint alone can rebuild the model.
    """

    def fit(self, examples: Sequence[Example], world: Any = None) -> "Featurizer":
        """Learn the inventories from the training ``examples``; ``world`` is the dataset's database (or None), for
        featurizers whose inventory also takes its constants (span_cky's Σ holds every geobase entity)."""
        raise NotImplementedError

    def prepare(self, examples: Sequence[Example]) -> None:
        """Precompute, in bulk, what ``encode`` needs beyond the fitted state (a tagger's analyses); called by the
        datamodule with every split's examples. Default: nothing."""

    def encode(self, example: Example) -> Any:
        raise NotImplementedError

    def unencodable(self, utterance: str) -> str | None:
        """Why ``encode`` would not read a new ``utterance`` whole (``zoo.inference`` refuses it then), or None.
        ``encode`` itself raises ``ValueError`` for what it cannot encode at all; this is for what it would quietly
        change, such as cutting a long input to the model's limit, which training and testing accept. Default: None."""
        return None

    def length(self, example: Example) -> Any:
        """A sort key for batching ``example`` with others of similar cost (``ParsingDataModule`` buckets training
        batches by it); ``None``, the default, leaves batches at random."""
        return None

    def collate(self, items: list[Any]) -> dict[str, Any]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "Featurizer":
        raise NotImplementedError


class Parser(L.LightningModule):
    """Base of every model in the zoo.

    Subclasses set ``featurizer_class`` (and ``supported_formalisms`` when they cannot emit every language),
    take ``featurizer`` and ``formalism`` as their first constructor arguments, call
    ``self.save_hyperparameters(ignore=["featurizer"])``, and implement ``training_step`` and ``parse``.
    """

    model_name: ClassVar[str] = ""  # set by @register_model
    featurizer_class: ClassVar[type[Featurizer]] = Featurizer
    supported_formalisms: ClassVar[tuple[str, ...] | None] = None  # None: any formalism
    primary_metric: ClassVar[str] = "exact_match"

    def __init__(self, featurizer: Featurizer, formalism: str):
        super().__init__()
        self.check_formalism(formalism)
        self.featurizer = featurizer
        self.formalism = get_formalism(formalism)
        # compute_groups=False: the metrics share state shapes, and torchmetrics would merge them after a first
        # batch where their counts happen to agree.
        self.val_metrics = MetricCollection({"exact_match": ExactMatch()}, prefix="val/", compute_groups=False)
        self.test_metrics = self.val_metrics.clone(prefix="test/")
        self.test_predictions: list[dict[str, Any]] = []
        self._test_rows: list[tuple[int, dict[str, Any]]] = []  # (index in the test set, row), this rank's
        self.attach_world(None)

    def attach_world(self, world: Any) -> None:
        """Score against ``world`` (the dataset's database, or None); adds denotation accuracy where programs run,
        and on CFQ the GGD authors' ``emr`` (``zoo.metrics.EdgeMatchRate``).

        Called from ``setup`` with the datamodule's world, so any dataset whose formalism executes gets the metric.
        """
        self.scorer = Scorer(self.formalism, world)
        if self.scorer.executes and "denotation" not in self.val_metrics:
            for metrics in (self.val_metrics, self.test_metrics):
                metrics.add_metrics({"denotation": DenotationAccuracy()})
        if self.scorer.has_emr and "emr" not in self.val_metrics:
            for metrics in (self.val_metrics, self.test_metrics):
                metrics.add_metrics({"emr": EdgeMatchRate()})

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is not None and self.scorer.world is None:
            self.attach_world(datamodule.world)
        if distributed():
            self.check_same_featurizer()

    def check_same_featurizer(self) -> None:
        """Under DDP every process fits its own featurizer on train: they must agree (one vocabulary order, one
        inventory), or the ranks would train one model on different encodings. A digest per rank, compared."""
        digests: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(digests, state_digest(self.featurizer.state_dict()))
        if len(set(digests)) > 1:
            raise RuntimeError(f"{type(self.featurizer).__name__}: the processes fitted different featurizers "
                               f"(state digests {digests}); its fit must depend on the training data alone")

    # ----- construction -------------------------------------------------------------------------------------
    @classmethod
    def check_formalism(cls, formalism: str) -> None:
        if cls.supported_formalisms is not None and formalism not in cls.supported_formalisms:
            raise UnsupportedFormalismError(
                f"model {cls.model_name!r} does not support formalism {formalism!r}; "
                f"it supports: {', '.join(cls.supported_formalisms)}")

    @classmethod
    def build(cls, train: Sequence[Example], formalism: str, featurizer: dict | None = None,
              featurizer_state: dict | None = None, world: Any = None, **hparams) -> "Parser":
        """Fit a featurizer on ``train`` and ``world`` (or restore it from a checkpoint's state) and construct the
        model."""
        cls.check_formalism(formalism)
        if featurizer_state is not None:
            fitted = cls.featurizer_class.from_state_dict(featurizer_state)
        else:
            fitted = cls.featurizer_class(**(featurizer or {})).fit(train, world)
        return cls(fitted, formalism, **hparams)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["model_name"] = self.model_name
        checkpoint["featurizer"] = self.featurizer.state_dict()

    @staticmethod
    def load(path: str, map_location: str = "cpu") -> "Parser":
        """Rebuild any registered model from one of its checkpoints, featurizer included; a file that is none (empty,
        truncated, another program's) is a ``RunConfigError`` naming it."""
        return Parser.from_checkpoint(load_checkpoint(path, map_location))

    @staticmethod
    def from_checkpoint(checkpoint: dict[str, Any]) -> "Parser":
        """``load`` of a checkpoint already read (``load_checkpoint``), for callers that also read its
        other entries (the dataset it was trained on: ``zoo.inference``)."""
        from zoo.registry import get_model

        cls = get_model(checkpoint["model_name"])
        featurizer = cls.featurizer_class.from_state_dict(checkpoint["featurizer"])
        model = cls(featurizer, **checkpoint["hyper_parameters"])
        model.load_state_dict(checkpoint["state_dict"])
        return model.eval()

    # ----- what a model implements ----------------------------------------------------------------------------
    def parse(self, batch: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def parse_with_details(self, batch: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
        """The programs of ``parse`` and, per example, extra fields for its row of predictions.jsonl (span_cky:
        the span tree). Override this instead of ``parse`` to report more than the program."""
        programs = self.parse(batch)
        return programs, [{} for _ in programs]

    def explain(self, batch: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
        """What ``python -m zoo.parse`` shows for each utterance: ``parse_with_details`` by default. A model adds here
        what would be too large to save in predictions.jsonl for every test example (GGD: its query graph with each
        edge's probability); the programs must be those of ``parse``."""
        return self.parse_with_details(batch)

    # ----- shared evaluation ----------------------------------------------------------------------------------
    def _evaluate(self, batch: dict[str, Any], metrics: MetricCollection
                  ) -> tuple[list[str], list[dict[str, Any]], list[ExampleScore]]:
        predictions, details = self.parse_with_details(batch)
        return predictions, details, self._score(batch, predictions, metrics)

    def _score(self, batch: dict[str, Any], predictions: list[str], metrics: MetricCollection) -> list[ExampleScore]:
        scores = self.scorer.score_batch(predictions, batch["examples"])
        metrics.update(scores)
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=True, batch_size=len(scores))
        return scores

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluate(batch, self.val_metrics)

    def on_test_epoch_start(self) -> None:
        self.test_predictions, self._test_rows = [], []

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        predictions, details, scores = self._evaluate(batch, self.test_metrics)
        # (a batch built by hand has no indices: rows in the order they come)
        indices = batch.get("indices") or range(len(self._test_rows), len(self._test_rows) + len(predictions))
        for index, example, prediction, detail, score in zip(indices, batch["examples"], predictions, details,
                                                              scores):
            self._test_rows.append((index, {"utterance": example.utterance, "gold": example.program,
                                            "prediction": prediction, **score.fields(), **detail}))

    def on_test_epoch_end(self) -> None:
        """``test_predictions``: every rank's rows, in test-set order. Under DDP each rank tested a shard
        (``EvaluationShardSampler``); every rank gets the whole list, so rank 0 can write it and a model can compute
        a test metric from it (span_cky's tree F1) on every rank alike."""
        rows = self._test_rows
        if distributed():
            shards: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(shards, rows)
            rows = [row for shard in shards for row in shard]
        rows.sort(key=lambda row: row[0])
        indices = [index for index, _ in rows]
        if len(set(indices)) != len(indices):  # a sampler that pads would score some examples twice
            raise RuntimeError(f"test examples evaluated more than once: {len(indices)} rows for "
                               f"{len(set(indices))} examples")
        self.test_predictions = [row for _, row in rows]

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> list[str]:
        return self.parse(batch)
