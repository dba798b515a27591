"""benchmarks/seq2seq_speed.py on debug=smoke: it measures, counts FLOPs and writes its rows."""
import sys

import pytest

from conftest import REPO, needs_mirror
from zoo.results import read_rows

sys.path.insert(0, str(REPO / "benchmarks"))
import seq2seq_speed  # noqa: E402


@needs_mirror
def test_speed_benchmark_on_smoke(tmp_path):
    out = tmp_path / "speed.csv"
    rows = seq2seq_speed.main(["debug=smoke", "--steps", "2", "--warmup", "1", "--out", str(out)])
    assert [r["phase"] for r in rows] == ["train", "train", "decode"]
    assert [r["bucketed"] for r in rows] == [True, False, ""]
    for row in rows:
        assert row["examples"] > 0 and row["examples_per_s"] > 0 and row["matmul_gflops"] > 0
        assert row["gflops_per_example"] > 0 and 0 < row["flops_share"] < 1
    assert rows[0]["backbone"] == "bart-tiny-scratch" and rows[0]["weights"] == "untrained"
    seq2seq_speed.main(["debug=smoke", "--steps", "2", "--warmup", "1", "--out", str(out)])
    assert len(read_rows(out)) == 3  # a rerun replaces its rows


def test_a_damaged_speed_table_is_said_before_measuring(tmp_path, monkeypatch):
    out = tmp_path / "speed.csv"
    out.write_text("phase,batch_size\ntrain,32,extra\n")
    monkeypatch.setattr(seq2seq_speed, "prepared_data", None)  # measuring would call it
    with pytest.raises(SystemExit, match=rf"^error: {out}:2: 3 cells for the 2 columns of the header$"):
        seq2seq_speed.main(["debug=smoke", "--out", str(out)])


@pytest.mark.parametrize("arguments, message", [
    (["data=no_such_dataset"], "error: In 'run': Could not find 'data/no_such_dataset'"),
    (["data.root={tmp}"], "error: dataset 'scan_simple' is missing"),  # nothing under that root
])
def test_an_unknown_dataset_or_missing_data_is_a_message(tmp_path, arguments, message):
    with pytest.raises(SystemExit) as error:
        seq2seq_speed.main(["debug=smoke", *(a.format(tmp=tmp_path) for a in arguments),
                            "--out", str(tmp_path / "speed.csv")])
    assert str(error.value.code).startswith(message)


def test_a_missing_checkpoint_is_a_message(tmp_path, capsys):
    with pytest.raises(SystemExit):
        seq2seq_speed.main(["debug=smoke", "--checkpoint", str(tmp_path / "best.ckpt"),
                            "--out", str(tmp_path / "speed.csv")])
    assert capsys.readouterr().err.endswith(f"error: no checkpoint at {tmp_path / 'best.ckpt'}\n")


@needs_mirror
def test_a_damaged_checkpoint_is_a_message(tmp_path):
    checkpoint = tmp_path / "best.ckpt"
    checkpoint.write_bytes(b"")
    with pytest.raises(SystemExit, match=rf"^error: {checkpoint}: not a readable checkpoint"):
        seq2seq_speed.main(["debug=smoke", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "speed.csv")])
