"""``ParsingDataModule``: the one LightningDataModule behind every dataset of the zoo (docs/DESIGN.md, Contracts).

It looks a dataset up in the registry, reads it through the registered reader, makes a validation set where the
dataset has none (a seeded slice held out of train), and serves batches that the model's featurizer encodes lazily.
It never knows which model it feeds: the model hands over its featurizer with ``attach``.
"""
from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any, Protocol

import lightning.pytorch as L
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from datamodules.base import DataConfigError, DataFormatError, MissingDataError, check_files, not_utf8, resolve_root
from zoo.formalisms import Formalism, FormalismError, get_formalism
from zoo.registry import DATASETS, DatasetSpec, get_dataset
from zoo.types import Example

log = logging.getLogger(__name__)
_CACHE: dict[tuple[str, Path], dict[str, list[Example]]] = {}
_WORLDS: dict[Path, Any] = {}


def read_splits(name: str, root: str | Path | None = None, cache: bool = True) -> dict[str, list[Example]]:
    """The reader's ``{"train", "dev"?, "test"}`` for ``name`` under ``root``, read once per process when cached.

    Callers must not mutate the returned lists (``ParsingDataModule`` copies them).
    """
    spec, root = get_dataset(name), resolve_root(root)
    key = (name, root)
    if key in _CACHE:
        return _CACHE[key]
    check_files(spec, root)
    splits = spec.reader(str(root))
    if cache:
        _CACHE[key] = splits
    return splits


def clear_cache() -> None:
    _CACHE.clear()
    _WORLDS.clear()


def load_world(name: str, root: str | Path | None = None) -> Any:
    """The database ``name``'s programs execute against (the spec's ``world`` file through the formalism's
    ``load_world``), loaded once per process; None when the dataset names none or its file is absent."""
    spec, root = get_dataset(name), resolve_root(root)
    relative = spec.extra.get("world")
    if not relative:
        return None
    path = root / relative
    if path not in _WORLDS:
        if not path.is_file():
            log.warning("%s: world file %s not found; denotation accuracy is not reported", name, path)
            return None
        try:
            _WORLDS[path] = get_formalism(spec.formalism).load_world(path)
        except UnicodeDecodeError:
            raise not_utf8(path) from None
        except FormalismError as e:  # the formalism's message says where in the file, not which file
            raise DataFormatError(path, None, f"the {spec.formalism} database that {name}'s programs run on",
                                  str(e)) from None
    return _WORLDS[path]


def hold_out(examples: list[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """Split ``examples`` into (kept, held out): a ``seed``-determined ``fraction`` (rounded, at least one when the
    fraction is positive) held out; both keep the source order, so the split depends only on (data, fraction, seed)."""
    if not 0 <= fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {fraction}")
    n_val = min(len(examples) - 1, max(1, round(len(examples) * fraction))) if fraction > 0 and examples else 0
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    held = set(order[:n_val])
    return ([e for i, e in enumerate(examples) if i not in held], [e for i, e in enumerate(examples) if i in held])


class Featurizer(Protocol):
    """What the datamodule needs of a model's featurizer (the full contract is in docs/DESIGN.md)."""

    def encode(self, example: Example) -> Any: ...

    def collate(self, items: list[Any]) -> dict[str, Any]: ...


class LengthBucketBatchSampler(Sampler[list[int]]):
    """Training batches of examples of similar length, so padding stays a small share of every batch.

    Each epoch, the indices are shuffled (by ``seed`` and the epoch), cut into pools of ``pool_batches`` batches,
    each pool sorted by length and cut into batches, and the batches shuffled; so every example is in exactly one
    batch per epoch, batch composition still varies from epoch to epoch, and lengths do not come in order. Lightning
    calls ``set_epoch`` before each epoch.
    """

    def __init__(self, lengths: list, batch_size: int, seed: int = 0, pool_batches: int = 8):
        self.lengths, self.batch_size, self.seed, self.pool_batches = lengths, batch_size, seed, pool_batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        rng = random.Random(f"{self.seed}-{self.epoch}")
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        pool_size = self.batch_size * self.pool_batches
        batches = []
        for start in range(0, len(order), pool_size):
            pool = sorted(order[start:start + pool_size], key=self.lengths.__getitem__)
            batches += [pool[i:i + self.batch_size] for i in range(0, len(pool), self.batch_size)]
        rng.shuffle(batches)
        return batches

    def __iter__(self):
        return iter(self.batches())

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)


class EvaluationShardSampler(DistributedSampler):
    """One process's share of a validation or test set under DDP: the one-process batches, whole, batch ``b`` to
    rank ``b mod world``, so every example is evaluated once (no padding, no repeats, unlike ``DistributedSampler``)
    and in the same batch as in one process (the same padding, so the same numbers). With fewer batches than
    processes, each rank takes a contiguous share of the examples instead. Ranks may get different numbers of
    batches: evaluation must not run a collective per step (DDP's ``broadcast_buffers`` is off in the DDP trainer
    configs), and ``Parser`` gathers the rows by ``batch["indices"]``.

    A ``DistributedSampler`` by type only, so that Lightning's ``use_distributed_sampler`` leaves it in place.
    """

    def __init__(self, size: int, batch_size: int, num_replicas: int, rank: int):  # (no super().__init__: it pads)
        if size < num_replicas:
            raise DataConfigError(f"{size} evaluation examples for {num_replicas} processes: each process needs one; "
                                  "evaluate with fewer processes (trainer.devices) or more examples (data.limit_eval)")
        self.size, self.batch_size, self.num_replicas, self.rank = size, batch_size, num_replicas, rank
        self.epoch, self.shuffle, self.drop_last, self.seed = 0, False, False, 0

    def indices(self) -> list[int]:
        starts = range(0, self.size, self.batch_size)
        if len(starts) < self.num_replicas:
            return list(range(self.rank * self.size // self.num_replicas,
                              (self.rank + 1) * self.size // self.num_replicas))
        return [i for start in starts[self.rank::self.num_replicas]
                for i in range(start, min(start + self.batch_size, self.size))]

    def __iter__(self):
        return iter(self.indices())

    def __len__(self) -> int:
        return len(self.indices())


def fixed_subset(examples: list[Example], size: int | None, seed: int) -> list[Example]:
    """``size`` examples drawn by ``seed`` alone, in their source order: the same subset for every run and model
    (a fixed validation subset, a low-resource training sample); all of them when ``size`` is None or too large."""
    if size is None or size >= len(examples):
        return examples
    chosen = set(random.Random(seed).sample(range(len(examples)), size))
    return [e for i, e in enumerate(examples) if i in chosen]


class EncodedDataset(Dataset):
    """Examples encoded on access: ``(example, featurizer.encode(example), i)``, ``i`` the example's position in the
    split (under DDP, evaluation rows are put back in order by it)."""

    def __init__(self, examples: list[Example], featurizer: Featurizer):
        self.examples, self.featurizer = examples, featurizer

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int):
        return self.examples[i], self.featurizer.encode(self.examples[i]), i


class Collate:
    """``featurizer.collate`` of the encodings, plus ``batch["examples"]`` (the metrics compare against them) and,
    for items ``(example, encoding, index)`` (``EncodedDataset``'s), ``batch["indices"]``: the examples' positions in
    their split.

    A class rather than a closure so that worker processes can pickle it.
    """

    def __init__(self, featurizer: Featurizer):
        self.featurizer = featurizer

    def __call__(self, items: list[tuple[Example, Any]]) -> dict[str, Any]:
        batch = self.featurizer.collate([item[1] for item in items])
        batch["examples"] = [item[0] for item in items]
        if items and all(len(item) > 2 for item in items):
            batch["indices"] = [item[2] for item in items]
        return batch


class ParsingDataModule(L.LightningDataModule):
    """Train/val/test ``Example`` lists of one registered dataset, served through the attached featurizer.

    Args:
        name: registry name (``scan_simple``, ``cfq_mcd1``, ...; ``python -m datamodules stats`` lists them).
        root: data root; ``None`` means ``$ZOO_DATA``, else ``<repo>/data``.
        val_fraction, val_seed: for datasets without a dev set (SCAN), the share of train held out as validation
            and the seed choosing it; ignored where a dev set exists.
        train_limit, train_limit_seed: a low-resource variant: a random N training examples (after the hold-out),
            chosen by the seed, in their source order; ``None`` keeps all.
        limit_train: keep only the first N training examples (after the hold-out): quick runs on large data.
        limit_eval: keep only the first N validation and N test examples.
        val_subset: validate on a fixed random N of the validation examples (chosen by ``val_seed``, the same for
            every run), so frequent validation of a slow decoder stays cheap; ``None`` validates on all.
        heldout: test on N training examples held out by the rule of the dataset's own test split (the longest
            programs for a length split, with every program of the N-th's length; whole templates for a template
            split, chosen by ``val_seed`` where the rule draws) instead of the test set, which is then never read:
            settings are chosen on these runs, and the test set stays unseen (issue 28). ``None``: the test set.
        bucket_by_length: batch training examples of similar length together (``LengthBucketBatchSampler``) when
            the model's featurizer measures lengths (``Featurizer.length``); the order is seeded by ``seed``.
        bucket_pool_batches: how many batches' worth of examples are sorted by length together: more pads less,
            fewer keeps each batch's examples more varied.
        batch_size, eval_batch_size: training batch size; evaluation batch size (``None``: same as training).
        num_workers: DataLoader worker processes.
        download: fetch missing files with ``zoo.download`` (verified by SHA-256) instead of failing.
    """

    def __init__(self, name: str, root: str | None = None, val_fraction: float = 0.1, val_seed: int = 0,
                 train_limit: int | None = None, train_limit_seed: int = 0, limit_train: int | None = None,
                 limit_eval: int | None = None, val_subset: int | None = None, bucket_by_length: bool = True,
                 bucket_pool_batches: int = 8, batch_size: int = 64, eval_batch_size: int | None = None,
                 num_workers: int = 0, download: bool = False, seed: int = 0, heldout: int | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.name = name
        self.root = resolve_root(root)
        if not (isinstance(val_fraction, (int, float)) and 0 <= val_fraction < 1):
            raise DataConfigError(f"data.val_fraction={val_fraction}: expected a share of the training set in [0, 1)")
        for option, value, least, meaning in (
                ("limit_train", limit_train, 1, "training examples, or null for all of them"),
                ("limit_eval", limit_eval, 1, "validation and test examples, or null for all of them"),
                ("val_subset", val_subset, 1, "validation examples, or null for all of them"),
                ("train_limit", train_limit, 1, "training examples, or null for all of them"),
                ("heldout", heldout, 1, "training examples to test on, or null for the test set"),
                ("bucket_pool_batches", bucket_pool_batches, 1, "batches"),
                ("batch_size", batch_size, 1, "examples"),
                ("eval_batch_size", eval_batch_size, 1, "examples, or null for batch_size"),
                ("num_workers", num_workers, 0, "worker processes")):
            # a negative limit would slice examples off the end, 0 empty a split that training needs
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise DataConfigError(f"data.{option}={value}: expected a whole number of at least {least} ({meaning})")
        self.val_fraction, self.val_seed = val_fraction, val_seed
        self.limit_train, self.limit_eval = limit_train, limit_eval
        self.val_subset, self.seed, self.heldout = val_subset, seed, heldout
        self.bucket_by_length, self.bucket_pool_batches = bucket_by_length, bucket_pool_batches
        self.train_limit, self.train_limit_seed = train_limit, train_limit_seed
        if train_limit is not None and limit_train is not None:
            raise DataConfigError("data.train_limit (a random subsample) and data.limit_train (the first examples) "
                                  "do not combine: set one of them")
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers = num_workers
        self.download = download
        self.featurizer: Featurizer | None = None
        self.train: list[Example] | None = None
        self.val: list[Example] | None = None
        self.test: list[Example] | None = None
        self.val_held_out = False  # True when val was taken out of train
        if heldout is not None and get_dataset(name).extra.get("heldout") is None:  # (an unknown name fails too)
            ruled = sorted(n for n, spec in DATASETS.items() if spec.extra.get("heldout") is not None)
            raise DataConfigError(f"data.heldout={heldout}: {name} has no rule for holding out a test set like its "
                                  f"own; the datasets that have one: {', '.join(ruled)}")
        get_dataset(name)  # fail at construction on an unknown name

    @property
    def spec(self) -> DatasetSpec:
        return get_dataset(self.name)

    @property
    def formalism(self) -> Formalism:
        return get_formalism(self.spec.formalism)

    @property
    def world(self) -> Any:
        """What the dataset's programs execute against (a database), or None; ``Parser.setup`` scores with it."""
        return load_world(self.name, self.root)

    def prepare_data(self) -> None:
        """Check that the dataset's files are under the root, downloading the missing ones when ``download``;
        otherwise ``MissingDataError`` says which are missing and how to get them."""
        try:
            check_files(self.spec, self.root)
        except MissingDataError as missing:
            if not self.download:
                raise
            from zoo.download import DownloadError, download

            log.info("%s\ndata.download=true: downloading them", missing)
            try:
                download(self.name, self.root, files=[str(p.relative_to(self.root)) for p in missing.missing])
            except DownloadError as failed:  # offline, or a file that did not verify: say what to do instead
                raise DownloadError(f"data.download=true could not fetch {self.name!r} into {self.root} ({failed}); "
                                    f"without network, copy the files listed above there") from failed
            check_files(self.spec, self.root)

    def setup(self, stage: str | None = None) -> None:
        if self.train is not None:
            return
        splits = read_splits(self.name, self.root)
        train, test = list(splits["train"]), list(splits["test"])
        if self.heldout is not None:  # (before the validation slice below, which the rule must not leak into)
            if self.heldout >= len(train):
                raise DataConfigError(f"data.heldout={self.heldout}, but {self.name} has only {len(train)} training "
                                      "examples: hold out fewer")
            train, test = self.spec.extra["heldout"](train, self.heldout, self.val_seed)
            if not train:  # (a length rule whose cut falls on the shortest programs holds out their ties too)
                raise DataConfigError(f"data.heldout={self.heldout} holds out every training example of {self.name} "
                                      "by its rule: hold out fewer")
        if splits.get("dev") is not None:
            val = list(splits["dev"])
        else:
            train, val = hold_out(train, self.val_fraction, self.val_seed)
            self.val_held_out = True
        if self.train_limit is not None and self.train_limit > len(train):
            raise DataConfigError(f"data.train_limit={self.train_limit}, but {self.name} has only {len(train)} "
                                  "training examples: drop train_limit to use them all")
        train = fixed_subset(train, self.train_limit, self.train_limit_seed)
        if self.limit_train is not None:
            train = train[: self.limit_train]
        if self.limit_eval is not None:
            val, test = val[: self.limit_eval], test[: self.limit_eval]
        val = fixed_subset(val, self.val_subset, self.val_seed)
        self.train, self.val, self.test = train, val, test

    def attach(self, featurizer: Featurizer) -> None:
        """Use the model's ``featurizer`` to encode and collate every batch from now on (after letting it
        precompute what it needs for every split in bulk)."""
        self.featurizer = featurizer
        prepare = getattr(featurizer, "prepare", None)
        if prepare is not None:
            prepare([e for split in (self.train, self.val, self.test) if split for e in split])

    def _loader(self, examples_attr: str, shuffle: bool) -> DataLoader:
        if self.featurizer is None:
            raise RuntimeError(f"ParsingDataModule({self.name!r}): call attach(featurizer) with the model's featurizer "
                               "before asking for a dataloader (the datamodule does not know how to encode examples)")
        self.setup()
        examples = getattr(self, examples_attr)
        batching: dict[str, Any] = {"batch_size": self.batch_size if shuffle else self.eval_batch_size,
                                    "shuffle": shuffle}
        if not shuffle and self._distributed():
            batching["sampler"] = EvaluationShardSampler(len(examples), self.eval_batch_size, self.trainer.world_size,
                                                         self.trainer.global_rank)
        length = getattr(self.featurizer, "length", None)  # None, or returning None: the model does not bucket
        if shuffle and self.bucket_by_length and length is not None and not self._distributed():
            lengths = [length(example) for example in examples]
            if lengths and None not in lengths:
                batching = {"batch_sampler": LengthBucketBatchSampler(lengths, self.batch_size, self.seed,
                                                                         self.bucket_pool_batches)}
        return DataLoader(EncodedDataset(examples, self.featurizer), **batching,
                          collate_fn=Collate(self.featurizer), num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)

    def _distributed(self) -> bool:
        # Under DDP Lightning shards training data with its own sampler, which a custom batch sampler would bypass;
        # evaluation data is sharded by EvaluationShardSampler.
        trainer = getattr(self, "trainer", None)
        return trainer is not None and trainer.world_size > 1

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        # batch["examples"] (frozen dataclasses, for scoring) stays on the host; Lightning would try to move them.
        examples = batch.pop("examples")
        batch = super().transfer_batch_to_device(batch, device, dataloader_idx)
        batch["examples"] = examples
        return batch

    def __repr__(self) -> str:
        sizes = ("not set up" if self.train is None
                 else f"train={len(self.train)} val={len(self.val)} test={len(self.test)}")
        return f"ParsingDataModule({self.name!r}, root={str(self.root)!r}, {sizes})"
