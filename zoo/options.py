"""Check a run's options before any work: a mistyped value (``seed=abc``, ``trainer.max_epochs=abc``,
``data.batch_size=0``) is one line naming the option, the value and what was expected, instead of a traceback from
deep inside Lightning or torch after the data and the model were built.

Two sources of what is expected: the constructors the options are passed to (``data.*`` to ``ParsingDataModule``,
``model.params.*`` to the model class, ``model.featurizer.*`` to its featurizer), whose annotations give the types
and whose parameters are the only names allowed; ``RUN_OPTIONS`` below for the run's own and Lightning's keys,
with the ranges a type cannot say; the data module's constructor checks the ranges of ``data.*``.
"""
from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from zoo.ir import DEFINITIONS
from zoo.registry import get_model


class OptionError(ValueError):
    """An option whose value cannot be what it configures."""


class RunConfigError(ValueError):
    """A run that cannot start as configured (resume without a checkpoint, a used run directory, a file that is no
    checkpoint...)."""


def _at_least(low: int) -> Callable[[Any], bool]:
    return lambda value: value is None or value >= low


def _anything(value: Any) -> bool:
    return True


_ABSENT = object()
# option: (accepted types, range test, what is expected). None among the types: the option may be null.
RUN_OPTIONS: dict[str, tuple[tuple[type | None, ...], Callable[[Any], bool], str]] = {
    "seed": ((int,), lambda v: 0 <= v < 2**32, "an integer from 0 to 2**32 - 1"),
    "checkpoint_every_n_steps": ((int,), _at_least(1), "a positive integer"),
    "resume": ((bool,), _anything, "true or false"),
    "overwrite": ((bool,), _anything, "true or false"),
    "test_only": ((bool,), _anything, "true or false"),
    "stop_when_converged": ((bool,), _anything, "true or false"),
    "anneal_when_converged": ((float,), lambda v: 0 <= v <= 1, "a share of the steps trained, from 0 (off) to 1"),
    "ir_definition": ((str,), lambda v: v in DEFINITIONS, " or ".join(DEFINITIONS)),
    "trainer.max_epochs": ((int, None), _at_least(-1), "an integer, -1 or null for no limit"),
    "trainer.min_epochs": ((int, None), _at_least(0), "a non-negative integer or null"),
    "trainer.max_steps": ((int, None), _at_least(-1), "an integer, -1 for no limit"),
    "trainer.min_steps": ((int, None), _at_least(0), "a non-negative integer or null"),
    "trainer.log_every_n_steps": ((int,), _at_least(1), "a positive integer"),
    "trainer.check_val_every_n_epoch": ((int, None), _at_least(1), "a positive integer or null"),
    "trainer.gradient_clip_val": ((float, None), _at_least(0), "a non-negative number or null"),
    "trainer.accumulate_grad_batches": ((int,), _at_least(1), "a positive integer"),
}


def check_options(cfg: DictConfig) -> None:
    """Raise ``OptionError`` naming the first option of ``cfg`` that cannot work; return when all can."""
    for option, (accepted, in_range, expected) in RUN_OPTIONS.items():
        value = OmegaConf.select(cfg, option, default=_ABSENT)
        if value is _ABSENT:
            continue
        if not (_has_type(value, accepted) and in_range(value)):
            raise OptionError(f"{option}={_shown(value)}: expected {expected}")
    if cfg.get("anneal_when_converged") and not cfg.get("stop_when_converged"):
        raise OptionError(f"anneal_when_converged={cfg.anneal_when_converged}: the decay starts where the stop rule "
                          "holds; set stop_when_converged=true as well")
    from datamodules import ParsingDataModule

    model_cls = get_model(cfg.model.name)
    for section, target in (("data", ParsingDataModule), ("model.params", model_cls),
                            ("model.featurizer", model_cls.featurizer_class)):
        check_against_constructor(OmegaConf.select(cfg, section) or {}, section, target)
    ParsingDataModule(**OmegaConf.to_container(cfg.data, resolve=True))  # its own range checks; it reads nothing yet


# constructor parameters the zoo fills in itself, never options
_NOT_OPTIONS = ("self", "featurizer", "formalism")



def check_against_constructor(options: DictConfig | dict, section: str, target: type) -> None:
    """Every option of ``section`` must be a parameter of ``target``'s constructor, of its annotated type."""
    signature = inspect.signature(target.__init__)
    try:
        hints = typing.get_type_hints(target.__init__)
    except (NameError, TypeError):  # an annotation only a type checker resolves: names are still checked
        hints = {}
    names = [name for name in signature.parameters if name not in _NOT_OPTIONS]
    for key, value in (OmegaConf.to_container(options, resolve=True) if isinstance(options, DictConfig)
                       else options).items():
        if key not in names:
            raise OptionError(f"{section}.{key}: not an option of {target.__name__} (its options: {', '.join(names)})")
        accepted = _simple_types(hints.get(key))
        if accepted and not _has_type(value, accepted):
            expected = " or ".join("null" if t is None else t.__name__ for t in accepted)
            raise OptionError(f"{section}.{key}={_shown(value)}: expected {expected}")


def _simple_types(annotation: Any) -> tuple[type | None, ...]:
    """``int`` -> (int,), ``float | None`` -> (float, None); () for anything richer, which is not checked."""
    scalar = (int, float, bool, str)
    if annotation in scalar:
        return (annotation,)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = typing.get_args(annotation)
        if all(m in scalar or m is type(None) for m in members):
            return tuple(None if m is type(None) else m for m in members)
    return ()


def _has_type(value: Any, accepted: tuple[type | None, ...]) -> bool:
    if value is None:
        return None in accepted
    if isinstance(value, bool):  # a bool is an int to Python, never to a user
        return bool in accepted
    if isinstance(value, int) and float in accepted:
        return True
    return any(t is not None and isinstance(value, t) for t in accepted)


def _shown(value: Any) -> str:
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)
