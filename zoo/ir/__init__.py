"""Intermediate representations (IRs) of programs, after Herzig et al. 2021, "Unlocking Compositional Generalization
in Pre-trained Models Using Intermediate Representations" (§3).

An IR ``z = F(y, x)`` rewrites a program y (the utterance x may guide it, as SCAN's bracketing does) so that a
seq2seq model finds it easier to predict. A *reversible* IR (RIR, §3.2) has an inverse ``F^-1(z, x) = y`` up to the
formalism's canonical form; a *lossy* IR (LIR, §3.3) drops or anonymises parts of y, and a second model maps
``x [SEP] z`` back to y. Each formalism's IRs live in one module (``zoo.ir.sparql``, ``zoo.ir.sql``,
``zoo.ir.scan``) and register themselves here under ``(formalism, name)``:

    ir = get_ir("rir", "sql").fit(train_programs)
    z = ir.forward(program, utterance)
    program == ir.inverse(z, utterance)        # up to SQL.canonical

``python -m zoo.ir verify --ir rir --data geo_sql_template`` checks the round trip on every program of a dataset.

Two definitions (``get_ir(..., definition=)``, ``ir_definition=`` of a run): ``paper``, the default, is each IR as
Herzig et al. 2021 define it; ``zoo`` keeps the zoo's earlier readings where they departed from it (SPARQL RIR:
relations shortened to their shortest unique dotted suffix; SCAN RIR: the four parts of ``around`` grouped, a
repeated single action unbracketed; SQL RIR: derived-table and derived-field aliases kept), under which the rows of
the protocols that pin ``ir_definition: zoo`` (``configs/experiment/``) and every row without an ``ir_definition``
column were measured. An IR the zoo never read differently is the same under both names.
"""
from __future__ import annotations

from zoo.formalisms import FormalismError


class IRError(FormalismError):
    """An IR that cannot be read or inverted (a malformed prediction is scored wrong with this reason)."""


class UnsupportedIRError(ValueError):
    """An IR asked for a formalism that has none of that name."""


class IntermediateRepresentation:
    """One IR of one formalism. Subclasses set ``name``, ``formalism``, ``reversible`` and ``forward``; reversible
    ones also ``inverse``; one that learns from the training programs (SPARQL's relation names) ``fit``."""

    name: str = ""
    formalism: str = ""
    reversible: bool = False

    def __init__(self, definition: str = "paper"):
        self.definition = definition

    def fit(self, programs: list[str]) -> "IntermediateRepresentation":
        return self

    def forward(self, program: str, utterance: str = "") -> str:
        raise NotImplementedError

    def inverse(self, ir: str, utterance: str = "") -> str:
        raise IRError(f"{self.formalism} {self.name} is lossy: it has no inverse (a second model predicts the program)")

    def structure(self, ir: str) -> str:
        """The IR with its values anonymised, for counting structures unseen in training (Table 5)."""
        return ir


_IRS: dict[tuple[str, str], type[IntermediateRepresentation]] = {}


def register_ir(cls: type[IntermediateRepresentation]) -> type[IntermediateRepresentation]:
    _IRS[(cls.formalism, cls.name)] = cls
    return cls


def available_irs(formalism: str) -> list[str]:
    _load_modules()
    return sorted(name for f, name in _IRS if f == formalism)


DEFINITIONS = ("paper", "zoo")
DEFINED_PIPELINES = ("rir", "lir_d", "lir_ind", "lir_d+rir", "lir_ind+rir")  # the pipelines a definition changes


def row_definition(pipeline: str, recorded: object) -> str:
    """The IR definition a results row of ``pipeline`` (its variant without subsample suffixes) was measured under:
    its ``ir_definition``, the zoo's for rows from before the option, and '' for a run no definition changes."""
    if pipeline not in DEFINED_PIPELINES:
        return ""
    return recorded if isinstance(recorded, str) and recorded else "zoo"


def get_ir(name: str, formalism: str, definition: str = "paper") -> IntermediateRepresentation:
    """A new, unfitted instance of the IR ``name`` of ``formalism`` under ``definition`` (one of DEFINITIONS)."""
    if definition not in DEFINITIONS:
        raise UnsupportedIRError(f"ir_definition={definition!r}: expected one of {', '.join(DEFINITIONS)}")
    _load_modules()
    if (formalism, name) not in _IRS:
        known = available_irs(formalism)
        raise UnsupportedIRError(f"no IR {name!r} for formalism {formalism!r}; available: "
                                 f"{', '.join(known) if known else 'none'}")
    return _IRS[(formalism, name)](definition)


def _load_modules() -> None:
    # the formalism modules register their IRs on import
    from zoo.ir import scan, sparql, sql  # noqa: F401
    from zoo.ir.graphq import sparql as graphq_sparql  # noqa: F401
