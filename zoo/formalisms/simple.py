"""Formalisms whose exact match is a whitespace-normalised token sequence.

Parsing here is what exact match needs (bracket trees for FunQL and SCAN-SP); execution and type systems
belong to the dedicated formalism modules.
"""
from __future__ import annotations

from zoo.formalisms.base import Formalism, parse_brackets


class _UnusedScanActions(Formalism):
    """SCAN output: a sequence of primitive actions (``I_TURN_LEFT I_JUMP ...``)."""

    name = "scan"


class _UnusedScanSP(Formalism):
    """SCAN-SP programs of Herzig & Berant 2021 (``i_after ( i_walk ( i_left ) , ... )``)."""

    name = "scan_sp"

    def parse(self, program: str):
        return parse_brackets(program, self.name)


class FunQL(Formalism):
    """GeoQuery FunQL, tokenised with spaces around brackets and commas."""

    name = "funql"

    def parse(self, program: str):
        return parse_brackets(program, self.name)


class SQL(Formalism):
    """Text-to-SQL queries with anonymised variables (Finegan-Dollak et al. 2018)."""

    name = "sql"


class COGS(Formalism):
    """COGS logical forms."""

    name = "cogs"
