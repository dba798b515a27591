"""benchmarks/ensemble.py: finished runs of one setting tested as one model (the mean of their scores)."""
import importlib.util
from pathlib import Path

import pytest

from conftest import compose_run, needs_mirror
from datamodules import ParsingDataModule
from zoo.launch import run
from zoo.parser import Parser, load_checkpoint
from zoo.results import read_rows
from zoo.stages import averaged_test, stage_checkpoint

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ensemble", REPO / "benchmarks" / "ensemble.py")
ensemble = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ensemble)

pytestmark = needs_mirror


@pytest.fixture(scope="module")
def ggd_runs(tmp_path_factory):
    """Two smoke runs of GGD on MCD1 with seeds 1 and 2, their rows in ``runs.csv`` beside them."""
    root = tmp_path_factory.mktemp("ensemble")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_CACHE", str(root / "cache"))  # GGD's spaCy analyses, away from ~/.cache
        patch.setenv("ZOO_RESULTS", str(root / "runs.csv"))  # where results_row finds the runs' rows
        dirs = []
        for seed in (1, 2):
            dirs.append(root / "runs" / "ggd-smoke" / "cfq_mcd1" / f"seed{seed}")
            run(compose_run("debug=smoke", "model=ggd", "data=cfq_mcd1", f"seed={seed}",
                            f"results_file={root / 'runs.csv'}"), dirs[-1])
        yield root, dirs


def test_a_run_averaged_with_itself_tests_as_the_run_did(ggd_runs):
    root, (seed1, _) = ggd_runs
    checkpoint = load_checkpoint(stage_checkpoint(seed1))
    datamodule = ParsingDataModule(**checkpoint["datamodule_hyper_parameters"])
    datamodule.prepare_data()
    datamodule.setup()
    models = [Parser.from_checkpoint(checkpoint) for _ in range(2)]
    metrics, seconds = averaged_test(models, datamodule, root / "itself")
    recorded = read_rows(root / "runs.csv")[0]
    # the same logits twice: the same dev thresholds, so the same test predictions and scores
    for key in ("test_exact_match", "test_emr", "test_threshold", "test_attribute_threshold"):
        assert metrics[key] == pytest.approx(float(recorded[key])), key
    assert seconds > 0
    predicted = (root / "itself" / "predictions.jsonl").read_text().splitlines()
    assert predicted == (seed1 / "predictions.jsonl").read_text().splitlines()
    assert len(predicted) == int(recorded["n_test"])


def test_two_runs_give_one_row_with_each_run_alone_beside_it(ggd_runs, monkeypatch):
    root, dirs = ggd_runs
    monkeypatch.setenv("ZOO_RESULTS", str(root / "runs.csv"))
    out = root / "pair"
    assert ensemble.main([*map(str, dirs), "--run-dir", str(out)]) == 0
    alone = read_rows(root / "runs.csv")[:2]
    row = read_rows(root / "runs.csv")[-1]
    assert row["variant"] == alone[0]["variant"] + "+ensemble2"
    assert (row["seed"], row["member_seeds"], row["data"]) == ("1", "1+2", "cfq_mcd1")
    assert [row["test_stage1_exact_match"], row["test_stage2_exact_match"]] == [a["test_exact_match"] for a in alone]
    assert 0.0 <= float(row["test_exact_match"]) <= 1.0 and 0.0 <= float(row["best_val"]) <= 1.0
    assert float(row["train_seconds"]) == pytest.approx(sum(float(a["train_seconds"]) for a in alone), abs=0.2)
    assert len((out / "predictions.jsonl").read_text().splitlines()) == int(row["n_test"])
    (breakdown,) = read_rows(root / "cfq_edge_match.csv")[-1:]
    assert breakdown["variant"] == row["variant"]


def test_runs_that_are_not_distinct_finished_runs_are_refused(ggd_runs, monkeypatch, tmp_path):
    root, (seed1, seed2) = ggd_runs
    monkeypatch.setenv("ZOO_RESULTS", str(root / "runs.csv"))
    with pytest.raises(SystemExit, match="share a seed"):
        ensemble.main([str(seed1), str(seed1)])
    with pytest.raises(SystemExit, match="no results row"):
        ensemble.main([str(seed1), str(tmp_path)])
    with pytest.raises(SystemExit):  # argparse: one run is no ensemble
        ensemble.main([str(seed2)])


def test_the_predictions_go_beside_the_runs_setting_by_default(ggd_runs, monkeypatch):
    root, (seed1, seed2) = ggd_runs
    monkeypatch.setenv("ZOO_RESULTS", str(root / "runs.csv"))
    assert ensemble.main([str(seed2), str(seed1)]) == 0
    assert (root / "runs" / "ggd-smoke+ensemble2" / "cfq_mcd1" / "seed2_1" / "predictions.jsonl").is_file()
    assert read_rows(root / "runs.csv")[-1]["seed"] == "2"
