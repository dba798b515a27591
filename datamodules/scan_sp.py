"""SCAN-SP: SCAN commands with the span-parser programs of Herzig & Berant 2021 (span-based-sp ``datasets/scan/dsl``).

Files: ``scan_sp/dsl/{train,dev,test}_<x>.json``, JSON lines ``{"question", "program", "answer"}``
(``../shared/data/scan_sp/PROVENANCE.md``). The answer (the SCAN action sequence) is kept in ``meta["answer"]``
for denotation accuracy: a program is right if it executes to it.
"""
from __future__ import annotations

from datamodules.base import json_record, register_line_dataset

SPLITS = ("simple", "right", "around_right")


def parse_line(line: str):
    record = json_record(line, "question", "program", "answer")
    return record["question"], record["program"], {"answer": record["answer"]}


for _split in SPLITS:
    register_line_dataset(
        f"scan_sp_{_split}", formalism="scan_sp", family="scan_sp",
        description=f"SCAN {_split} split with span-based-sp programs (Herzig & Berant 2021)",
        files={part: f"scan_sp/dsl/{part}_{_split}.json" for part in ("train", "dev", "test")},
        parse=parse_line, expected='a JSON object {"question": str, "program": str, "answer": str}',
        lowercase=True,
    )
