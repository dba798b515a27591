"""Datasets of the zoo: one reader module per family, and ``ParsingDataModule`` serving any of them.

Importing this package registers every dataset (``zoo.registry.DATASETS``). ``python -m datamodules stats`` prints
the split sizes of every dataset present under the data root.
"""
from datamodules import cfq, cogs, geoquery, scan, scan_sp, text2sql  # noqa: F401  (importing registers)
from datamodules.base import (DATA_ERRORS, DataConfigError, DataFormatError, MissingDataError, programs_unchecked,
                              resolve_root)
from datamodules.datamodule import ParsingDataModule, load_world, read_splits

__all__ = ["DATA_ERRORS", "DataConfigError", "DataFormatError", "MissingDataError", "ParsingDataModule", "load_world", "read_splits",
           "resolve_root"]
