"""Every gold program of every dataset in the mirror is well formed for its formalism.

Exact match canonicalises gold and prediction alike; a gold program the formalism rejected would make its
example impossible to get right, so this reads every split of every present dataset (about 20 s).
"""
import pytest

from conftest import needs_mirror
from datamodules import read_splits
from datamodules.base import MissingDataError
from zoo.formalisms import get_formalism
from zoo.registry import DATASETS, load_all

load_all()


@needs_mirror
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_every_gold_program_canonicalises(name):
    try:
        splits = read_splits(name, cache=False)
    except MissingDataError:
        pytest.skip(f"{name} is not in the mirror")
    formalism = get_formalism(DATASETS[name].formalism)
    for part, examples in splits.items():
        for example in examples:
            canonical = formalism.canonical(example.program)
            assert formalism.canonical(canonical) == canonical, (name, part, example.meta["index"])
