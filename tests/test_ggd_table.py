"""benchmarks/ggd_table.py: the paper's number, the authors' protocol and the whole-query runs in one table."""
import importlib.util
import sys

import pandas as pd
import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
_spec = importlib.util.spec_from_file_location("ggd_table", REPO / "benchmarks" / "ggd_table.py")
ggd_table = sys.modules.setdefault("ggd_table", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(ggd_table)

PUBLISHED = pd.DataFrame([{"model": "ggd", "variant": "ggd-gold_variables", "data": "cfq_mcd1", "metric": "emr",
                           "value": 97.9, "source": "gai2021 table 1 (emr)"},
                          {"model": "ggd", "variant": "ggd", "data": "cfq_mcd1", "metric": "exact_match",
                           "value": 97.9, "source": "gai2021 table 1"}])


def run(seed, em, emr, protocol="", variant="ggd", commit="abcdef0123", **extra):
    return {"model": "ggd", "variant": variant, "backbone": "bilstm3x64", "data": "cfq_mcd1", "seed": seed,
            "protocol": protocol, "test_exact_match": em, "test_emr": emr, "best_val": em, "train_seconds": 600,
            "hardware": "cpu", "git_commit": commit, **extra}


def test_rows_in_order_with_the_number_to_read_in_bold():
    runs = pd.DataFrame([run(2, 0.80, 0.90), run(1, 0.60, 0.70, commit="1234567890-dirty"),
                         run(1, 0.5, 0.9, "ggd_authors_emr_cpu", "ggd-gold_variables"),
                         {**run(1, 0.1, 0.1), "model": "spanbasedsp"},  # another model: not GGD's table
                         {**run(1, 0.1, 0.1), "variant": "graph_only"},  # an ablation: not the full model
                         run(1, 0.9, 0.95, variant="ggd-chosen")])
    lines = [line for line in ggd_table.ggd_table(runs, PUBLISHED, benchmarked="ggd-chosen").splitlines()
             if line.startswith("| ")]
    assert len(lines) == 5  # the header, the paper, the authors' protocol, the benchmarked setting, the whole query
    assert lines[1].startswith("| paper (gai2021 table 1), gold variables | cfq_mcd1 | | **97.9** |")
    assert lines[2].startswith("| ggd-gold_variables · bilstm3x64 · ggd_authors_emr_cpu | cfq_mcd1 | 50.00 "
                               "| **90.00** |")
    assert lines[3].startswith("| ggd-chosen · bilstm3x64 (`experiment=ggd_cfq`) | cfq_mcd1 | **90.00** | 95.00 |")
    # mean ± sample std of 60 and 80; seeds in order; 600 s a seed; a dirty commit says so
    assert lines[4] == ("| ggd · bilstm3x64 | cfq_mcd1 | **70.00 ± 14.14** | 80.00 ± 14.14 | 70.00 ± 14.14 | 1, 2 "
                        "| 10 | cpu | 1234567-dirty, abcdef0 |")
    assert ggd_table.BENCHMARKED == "ggd-authors_schedule"  # configs/experiment/ggd_cfq.yaml's variant


def test_an_ensemble_row_names_its_runs_seeds():
    runs = pd.DataFrame([run(1, 0.9, 0.95), run(1, 0.95, 0.97, variant="ggd+ensemble2", member_seeds="1+2"),
                         run(3, 0.93, 0.96, variant="ggd+ensemble2", member_seeds="3+4")])
    lines = ggd_table.ggd_table(runs, PUBLISHED, benchmarked="ggd").splitlines()
    assert [line.split(" | ")[5] for line in lines if line.startswith("| ggd")] == ["1", "1+2, 3+4"]


def test_the_readme_block_is_replaced_and_a_readme_without_it_is_an_error(tmp_path):
    from headline import splice_readme

    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- t.md: start -->\nold\n<!-- t.md: end -->\nrest\n")
    splice_readme(readme, "t.md", "| new |\n")
    assert readme.read_text() == "intro\n<!-- t.md: start -->\n| new |\n<!-- t.md: end -->\nrest\n"
    with pytest.raises(ValueError, match="README.md: no <!-- other.md: start -->"):
        splice_readme(readme, "other.md", "x")
