"""SCAN (Lake & Baroni 2018) and its template (Loula et al. 2018) and MCD (Keysers et al. 2020) splits.

Files: ``scan/<x>_split/tasks_{train,test}_<x>.txt``, one ``IN: <command> OUT: <actions>`` per line
(``../shared/data/scan/PROVENANCE.md``). SCAN has no dev set; the datamodule holds out a seeded slice of train.
"""
from __future__ import annotations

import re

from datamodules.base import register_line_dataset

# registry name -> (file pattern under scan/, {part} being train or test; what the split tests)
SPLITS = {
    "scan_simple": ("simple_split/tasks_{part}_simple.txt", "random 80/20 split"),
    "scan_length": ("length_split/tasks_{part}_length.txt", "longer action sequences at test"),
    "scan_addjump": ("add_prim_split/tasks_{part}_addprim_jump.txt", "'jump' seen only alone in train"),
    "scan_turn_left": ("add_prim_split/tasks_{part}_addprim_turn_left.txt", "'turn left' seen only alone in train"),
    "scan_around_right": ("template_split/tasks_{part}_template_around_right.txt",
                          "template split, 'around right' unseen (Loula et al. 2018)"),
    "scan_right": ("template_split/tasks_{part}_template_right.txt",
                   "template split, primitive 'right' (Loula et al. 2018)"),
    **{f"scan_mcd{i}": (f"mcd_split/tasks_{{part}}_mcd{i}.txt", f"maximum compound divergence split {i} "
                        "(Keysers et al. 2020)") for i in (1, 2, 3)},
}

_LINE = re.compile(r"IN: (.+?) OUT: (.+)")


def parse_line(line: str):
    match = _LINE.fullmatch(line.strip())
    if match is None:
        raise ValueError("no 'IN: ... OUT: ...' pair")
    return match[1].strip(), match[2].strip(), {}


for _name, (_pattern, _what) in SPLITS.items():
    register_line_dataset(
        _name, formalism="scan", family="scan", description=f"SCAN, {_what}",
        files={part: f"scan/{_pattern.format(part=part)}" for part in ("train", "test")},
        parse=parse_line, expected="'IN: <command> OUT: <actions>'", lowercase=True,
    )
