"""Program languages of the zoo, by the name a dataset declares (``DatasetSpec.formalism``).

``python -m zoo.formalisms verify <dataset>`` checks every gold program of a dataset against its formalism.
"""
from zoo.formalisms.base import Formalism, FormalismError
from zoo.formalisms.cogs import COGS
from zoo.formalisms.funql import FunQL
from zoo.formalisms.scan import ScanActions, ScanSP
from zoo.formalisms.sparql import CfqSparql
from zoo.formalisms.sql import SQL

# "tokens" (the base class) compares whitespace-separated tokens: the targets of IR pipeline stages (zoo.ir.pipeline)
FORMALISMS: dict[str, Formalism] = {f.name: f for f in (Formalism(), ScanActions(), ScanSP(), FunQL(), SQL(), COGS(),
                                                        CfqSparql())}


def get_formalism(name: str) -> Formalism:
    if name not in FORMALISMS:
        raise KeyError(f"unknown formalism {name!r}; known: {', '.join(sorted(FORMALISMS))}")
    return FORMALISMS[name]


__all__ = ["FORMALISMS", "Formalism", "FormalismError", "get_formalism"]
