"""benchmarks/ggd_speed.py on debug=smoke: it times each phase, counts FLOPs and writes its row."""
import sys

import pytest
import torch

from conftest import MIRROR_MISSING, MIRROR_PRESENT, REPO, needs_mirror
from zoo.results import read_rows

sys.path.insert(0, str(REPO / "benchmarks"))
import ggd_speed  # noqa: E402


@pytest.fixture(autouse=True)
def syntax_cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))


@needs_mirror
def test_ggd_speed_benchmark_on_smoke(tmp_path):
    out = tmp_path / "speed.csv"
    arguments = ["debug=smoke", "--batch-size", "8", "--steps", "2", "--warmup", "1", "--out", str(out)]
    row = ggd_speed.main(arguments)
    assert row["data"] == "cfq_mcd1" and row["batch_size"] == 8 and row["steps"] == 2
    for phase in ggd_speed.PHASES:
        assert row[f"{phase}_ms_per_step"] > 0
    assert row["examples_per_s"] > 0 and row["validate_examples_per_s"] > 0 and row["encode_ms_per_example"] > 0
    assert row["gflops_per_step"] > 0 and 0 < row["flops_share"] < 1 and 0 < row["lstm_share"] < 1
    ggd_speed.main(arguments)
    assert len(read_rows(out)) == 1  # a rerun replaces its row
    with pytest.raises(SystemExit, match="training examples"):
        ggd_speed.main(["debug=smoke", "--batch-size", "8", "--steps", "10", "--out", str(out)])


def test_ggd_speed_benchmark_bucketed_under_bf16_or_says_the_cpu_cannot(tmp_path):
    out = tmp_path / "speed.csv"
    # batches as a bucketed run forms them, the forward pass under bfloat16 autocast
    arguments = ["debug=smoke", "--batch-size", "8", "--steps", "2", "--warmup", "1", "--out", str(out),
                 "data.bucket_by_length=true", "+trainer.precision=bf16-mixed"]
    if not ggd_speed.cpu_runs_bf16_lstm():  # a CPU without AVX-512: said before any data is read
        with pytest.raises(SystemExit, match="cannot run GGD's LSTM under bfloat16 autocast"):
            ggd_speed.main(arguments)
        return
    if not MIRROR_PRESENT:  # this CPU can: the measurement reads CFQ
        pytest.skip(MIRROR_MISSING)
    bucketed = ggd_speed.main(arguments)
    assert bucketed["bucketed"] and bucketed["precision"] == "bf16-mixed" and bucketed["examples_per_s"] > 0


def test_a_damaged_speed_table_is_said_before_measuring(tmp_path, monkeypatch):
    out = tmp_path / "speed.csv"
    out.write_text("data,batch_size\ncfq_mcd1,512,extra\n")
    monkeypatch.setattr(ggd_speed, "prepared_data", None)  # measuring would call it
    with pytest.raises(SystemExit, match=rf"^error: {out}:2: 3 cells for the 2 columns of the header$"):
        ggd_speed.main(["debug=smoke", "--out", str(out)])


@pytest.mark.parametrize("arguments, message", [
    (["data=no_such_dataset"], "error: In 'run': Could not find 'data/no_such_dataset'"),
    (["data.root={tmp}"], "error: dataset 'cfq_mcd1' is missing"),  # nothing under that root
])
def test_an_unknown_dataset_or_missing_data_is_a_message(tmp_path, arguments, message):
    with pytest.raises(SystemExit) as error:
        ggd_speed.main(["debug=smoke", *(a.format(tmp=tmp_path) for a in arguments),
                        "--out", str(tmp_path / "speed.csv")])
    assert str(error.value.code).startswith(message)


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures the message of a machine without a GPU")
def test_the_gpu_asked_for_on_a_machine_without_one_is_a_message(tmp_path):
    with pytest.raises(SystemExit) as error:
        ggd_speed.main(["debug=smoke", "trainer=gpu", "--out", str(tmp_path / "speed.csv")])
    assert str(error.value.code).startswith("error: trainer=gpu, but torch sees no CUDA device here")
