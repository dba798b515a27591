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


def test_a_rerun_of_a_seed_replaces_its_row_but_a_run_of_the_other_definition_stays(tmp_path):
    """runs.csv is append-only: a run launched again for the same seed (spelt "1.0" or not) is one seed, the newest
    row, as in the leaderboard, not n=2 with a spread; the same seed under the other IR definition is another run."""
    rir = {"model": "seq2seq", "variant": "rir", "backbone": "t5", "data": "geo_sql_iid", "seed": "1",
           "test_exact_match": 0.3, "train_seconds": 60, "train_examples_per_s": 10, "ir_definition": ""}
    pd.DataFrame([{**rir, "variant": "baseline", "test_exact_match": 0.1}, rir,  # before the option: the zoo's
                  {**rir, "seed": "1.0", "ir_definition": "zoo", "test_exact_match": 0.5},  # its re-run
                  {**rir, "seed": "2", "test_exact_match": 0.7},
                  {**rir, "ir_definition": "paper", "test_exact_match": 0.9}]).to_csv(tmp_path / "runs.csv",
                                                                                      index=False)
    paper, zoo = ir_table.ir_tables(ir_table.read_runs(tmp_path / "runs.csv")).split("## ")[1:]
    assert "| geo_sql_iid | **10.0** (n=1) ? · 1.0 min · 10/s | **90.0** (n=1)" in paper
    assert "| geo_sql_iid | **10.0** (n=1) ? · 1.0 min · 10/s | **60.0** ± 14.1 (n=2)" in zoo
