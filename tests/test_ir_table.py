"""benchmarks/ir_table.py: one table per IR definition, each beside the baseline and GraphQ runs."""
import importlib.util
import sys

import pandas as pd

from conftest import REPO

_spec = importlib.util.spec_from_file_location("ir_table", REPO / "benchmarks" / "ir_table.py")
ir_table = sys.modules.setdefault("ir_table", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(ir_table)


def test_each_ir_definition_gets_a_table_beside_the_same_baseline():
    def run(variant, em, definition=None):
        row = {"model": "seq2seq", "variant": variant, "backbone": "bart", "data": "scan_length", "seed": 1,
               "protocol": "grid", "test_exact_match": em, "train_seconds": 60, "train_examples_per_s": 10}
        return row if definition is None else {**row, "ir_definition": definition}

    # rows from before the option have no ir_definition: theirs was the zoo's
    runs = pd.DataFrame([run("baseline", 0.1), run("rir", 0.2), run("rir", 0.3, "paper"),
                         run("lir_d+rir", 0.4, "zoo"), run("graphq", 0.5)])
    tables = ir_table.ir_tables(runs).split("## ")[1:]
    assert [t.splitlines()[0] for t in tables] == ["bart, protocol grid, IR definitions: paper",
                                                   "bart, protocol grid, IR definitions: zoo"]
    assert "| data | baseline | rir | graphq |" in tables[0] and "| scan_length | **10.0** (n=1)" in tables[0]
    assert "**30.0** (n=1)" in tables[0] and "**20.0**" not in tables[0]
    assert "| data | baseline | rir | lir_d+rir | graphq |" in tables[1] and "**20.0** (n=1)" in tables[1]
    assert "IR definitions" not in ir_table.ir_tables(runs[runs["variant"] == "baseline"])
