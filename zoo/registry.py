"""Name -> implementation registries for models and datasets (fairseq-style decorators).

Importing ``models`` and ``datamodules`` registers everything; ``load_all()`` does both so a caller never
sees a half-filled registry.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from zoo.types import Example

MODELS: dict[str, type] = {}
DATASETS: dict[str, "DatasetSpec"] = {}

Reader = Callable[[str], dict[str, list[Example]]]


class RegistryError(KeyError):
    """Unknown or conflicting registry name."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it readable
        return str(self.args[0])


@dataclass(frozen=True)
class DatasetSpec:
    """What the zoo knows about a registered dataset.

    ``reader(root)`` returns ``{"train": [...], "dev": [...], "test": [...]}``; ``dev`` may be missing
    (SCAN has none), in which case the datamodule holds out a seeded slice of train.
    ``files`` are the paths (relative to the data root) the reader needs; used to report what is missing.
    """

    name: str
    reader: Reader
    formalism: str
    files: tuple[str, ...] = ()
    family: str = ""
    description: str = ""
    extra: dict = field(default_factory=dict)


def register_model(name: str):
    """Class decorator: ``@register_model("seq2seq")`` on a ``zoo.parser.Parser`` subclass."""

    def decorate(cls):
        from zoo.parser import Parser

        if not (isinstance(cls, type) and issubclass(cls, Parser)):
            raise TypeError(f"model {name!r}: {cls!r} must be a subclass of zoo.parser.Parser")
        if name in MODELS:
            raise RegistryError(f"model {name!r} is already registered by {MODELS[name].__module__}.{MODELS[name].__name__}")
        cls.model_name = name
        MODELS[name] = cls
        return cls

    return decorate


def register_dataset(name: str, *, formalism: str, files: tuple[str, ...] = (), family: str = "", description: str = "",
                     **extra):
    """Function decorator: ``@register_dataset("scan_simple", formalism="scan")`` on a reader ``root -> splits``.

    ``extra`` is kept in ``DatasetSpec.extra`` for the reader family's own use (alternative layouts, hints).
    """

    def decorate(reader: Reader) -> Reader:
        from zoo.formalisms import FORMALISMS

        if not callable(reader):
            raise TypeError(f"dataset {name!r}: reader {reader!r} is not callable")
        if formalism not in FORMALISMS:
            raise RegistryError(f"dataset {name!r}: unknown formalism {formalism!r}; known: {sorted(FORMALISMS)}")
        if name in DATASETS:
            raise RegistryError(f"dataset {name!r} is already registered")
        DATASETS[name] = DatasetSpec(name, reader, formalism, tuple(files), family, description, dict(extra))
        return reader

    return decorate


def load_all() -> None:
    """Import the packages whose import registers every model and dataset."""
    importlib.import_module("models")
    importlib.import_module("datamodules")


def _lookup(table: dict, kind: str, name: str, package: str):
    importlib.import_module(package)  # registers the table's entries; a broken model never blocks a dataset lookup
    if name not in table:
        raise RegistryError(f"unknown {kind} {name!r}; registered {kind}s: {', '.join(sorted(table))}")
    return table[name]


def get_model(name: str) -> type:
    return _lookup(MODELS, "model", name, "models")


def get_dataset(name: str) -> DatasetSpec:
    return _lookup(DATASETS, "dataset", name, "datamodules")
