"""benchmarks/gandr_report.py on a hand-made results file: columns, means over seeds, recall table, alpha plot."""
import csv
import json
import importlib.util
import os
import sys
import time
from datetime import datetime, timezone

import pytest

from conftest import REPO
from zoo.results import read_rows

_spec = importlib.util.spec_from_file_location("gandr_report", REPO / "benchmarks" / "gandr_report.py")
gandr_report = sys.modules["gandr_report"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gandr_report)


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_report_tables_and_alpha_plot(tmp_path):
    def run(variant, em, seed=1, data="geo_sql_iid"):
        return {"model": "seq2seq", "variant": variant, "backbone": "t5-mini-scratch", "data": data, "seed": seed,
                "protocol": "gandr_cpu_short", "test_exact_match": em, "train_seconds": 60,
                "train_examples_per_s": 10, "run_dir": str(tmp_path / variant / data / str(seed)), "converged": "True"}

    def prediction(utterance, gold, predicted):
        return {"utterance": utterance, "gold": gold, "prediction": predicted, "correct": predicted == gold}

    predictions = [prediction("q || a & SELECT 1 ; || b & SELECT 2 ;", "SELECT 2 ;", "SELECT 2 ;"),
                   prediction("q || a & SELECT 1 ;", "SELECT 3 ;", "SELECT 3 ;"),
                   prediction("q || a & SELECT 1 ;", "SELECT 4 ;", "SELECT 1 ;")]
    (tmp_path / "input_tfidf-k4" / "geo_sql_iid" / "1").mkdir(parents=True)
    (tmp_path / "input_tfidf-k4" / "geo_sql_iid" / "1" / "predictions.jsonl").write_text(
        "\n".join(json.dumps(p) for p in predictions) + "\n")

    write_csv(tmp_path / "runs.csv", [
        run("baseline", 0.5), run("input_tfidf-k4", 0.6), run("gandr-k4-a0.5", 0.7),
        {**run("gandr-k4-a0.5", 0.8, 2), "converged": "False"},
        run("gandr-k4-a0", 0.65), run("gandr-k4-a1", 0.55), run("rir", 0.9),
        run("gandr-k4-a0.5-sample1000", 0.3, data="atis_sql_iid"),
        {**run("baseline", 0.4, data="scan_simple"), "protocol": "other"},  # no retrieval run under this protocol
        run("baseline", 0.3, data="scan_length")])  # nor on this dataset
    recall = {"data": "geo_sql_iid", "subsample": "", "split": "val", "n": 49, "k": 4, "alpha": 0.5, "seed": 1,
              "protocol": "gandr_cpu_short", "recall_input": 0.6, "recall_output_oracle": 0.8, "recall_hybrid": 0.7}
    # a row of python -m zoo.retrieval recall: no preliminary predictions, so no alpha, seed or hybrid
    cli = {**recall, "data": "cfq_mcd1", "subsample": "sample1000", "alpha": "", "seed": "", "recall_hybrid": "",
           "protocol": ""}
    write_csv(tmp_path / "recall.csv", [recall, cli])
    out, plot = tmp_path / "gandr.md", tmp_path / "alpha.png"
    gandr_report.main(["--runs", str(tmp_path / "runs.csv"), "--recall", str(tmp_path / "recall.csv"),
                       "--out", str(out), "--plot", str(plot), "--copying", str(tmp_path / "copying.csv")])
    text = out.read_text()
    assert "| data | baseline | input_tfidf-k4 | gandr-k4-a0.5 | gandr-k4-a0 | gandr-k4-a1 |" in text
    assert "| geo_sql_iid | **50.0** (n=1) · 1.0 min" in text and "rir" not in text
    assert "**75.0** ± 7.1 (n=2) †1 ·" in text  # mean ± std over seeds; one of the two had not converged
    assert "| atis_sql_iid (sample1000) |  |  | **30.0** (n=1)" in text
    assert "scan_simple" not in text and "protocol other" not in text and "scan_length" not in text
    assert "| geo_sql_iid | gandr_cpu_short | 4 | 0.5 | 1 | 49 | 60.0 | 80.0 | 70.0 |" in text
    assert "| cfq_mcd1 (sample1000) | – | 4 | – | – | 49 | 60.0 | 80.0 | – |" in text
    assert "| geo_sql_iid | input_tfidf-k4 | t5-mini-scratch | 1 | 1 / 3 | 1 / 1 | 1 / 2 |" in text
    assert gandr_report.exemplar_programs("x || a & b c || d & e") == ["b c", "e"]
    assert plot.read_bytes()[:4] == b"\x89PNG" and "alpha.png" in text


def test_run_dirs_relative_to_the_repository_and_a_recall_table_without_hybrid(tmp_path, monkeypatch):
    import zoo.results

    monkeypatch.setattr(zoo.results, "REPO_ROOT", tmp_path)  # as if tmp_path were the checkout
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "predictions.jsonl").write_text(
        json.dumps({"utterance": "q || a & SELECT 1 ;", "gold": "SELECT 1 ;", "prediction": "SELECT 1 ;",
                    "correct": True}) + "\n")
    write_csv(tmp_path / "runs.csv", [{"model": "seq2seq", "variant": "input_tfidf-k4", "backbone": "t5",
                                       "data": "geo_sql_iid", "seed": 1, "test_exact_match": 1.0,
                                       "train_seconds": 60, "train_examples_per_s": 10, "run_dir": "runs/a"}])
    write_csv(tmp_path / "recall.csv", [{"data": "cfq_mcd1", "subsample": "", "split": "val", "n": 49, "k": 4,
                                         "alpha": "", "seed": "", "recall_input": 0.6, "recall_output_oracle": 0.8}])
    out = tmp_path / "gandr.md"
    gandr_report.main(["--runs", str(tmp_path / "runs.csv"), "--recall", str(tmp_path / "recall.csv"),
                       "--out", str(out), "--plot", str(tmp_path / "alpha.png"),
                       "--copying", str(tmp_path / "copying.csv")])
    text = out.read_text()
    assert "| geo_sql_iid | input_tfidf-k4 | t5 | 1 | 1 / 1 | 1 / 1 | 0 / 0 |" in text
    assert "| cfq_mcd1 | – | 4 | – | – | 49 | 60.0 | 80.0 | – |" in text


def test_copying_keeps_the_counts_of_runs_whose_predictions_a_later_run_replaced(tmp_path):
    """Two protocols' runs of one variant and seed share a run directory: the later run's predictions must not be
    counted as the earlier run's, whose counts stay as the copying file had them."""
    run_dir = tmp_path / "runs" / "input_tfidf-k4" / "geo_sql_iid" / "seed1"
    run_dir.mkdir(parents=True)
    (run_dir / "predictions.jsonl").write_text(json.dumps(
        {"utterance": "q || a & SELECT 1 ;", "gold": "SELECT 1 ;", "prediction": "SELECT 1 ;", "correct": True}) + "\n")
    now = time.time()
    os.utime(run_dir / "predictions.jsonl", (now, now))

    def row(backbone, protocol, when):
        return {"time": datetime.fromtimestamp(when, timezone.utc).isoformat(), "model": "seq2seq",
                "variant": "input_tfidf-k4", "backbone": backbone, "data": "geo_sql_iid", "seed": 1,
                "protocol": protocol, "test_exact_match": 0.5, "train_seconds": 60, "train_examples_per_s": 10,
                "run_dir": str(run_dir)}

    write_csv(tmp_path / "runs.csv", [row("t5", "gandr_cpu_short", now - 86400), row("bart", "grid", now + 5)])
    write_csv(tmp_path / "copying.csv", [{"variant": "input_tfidf-k4", "backbone": "t5", "data": "geo_sql_iid",
                                          "seed": 1, "protocol": "gandr_cpu_short", "n_test": 279,
                                          "gold_in_exemplars": 166, "correct": 131,
                                          "correct_with_gold_in_exemplars": 128, "correct_without": 3}])
    gandr_report.main(["--runs", str(tmp_path / "runs.csv"), "--recall", str(tmp_path / "recall.csv"),
                       "--out", str(tmp_path / "gandr.md"), "--plot", str(tmp_path / "alpha.png"),
                       "--copying", str(tmp_path / "copying.csv")])
    counts = {(r["backbone"], r["n_test"], r["correct"]) for r in read_rows(tmp_path / "copying.csv")}
    assert counts == {("t5", "279", "131"), ("bart", "1", "1")}


@pytest.mark.parametrize("script", ["gandr_report", "ir_table"])
def test_a_damaged_runs_table_is_one_line(tmp_path, capsys, script):
    runs = tmp_path / "runs.csv"
    runs.write_text("model,variant,backbone,data,seed,test_exact_match\nseq2seq,baseline,t5,geo_sql_iid,1,0.5,x\n")
    with pytest.raises(SystemExit) as error:
        sys.modules[script].main(["--runs", str(runs), "--out", str(tmp_path / "out.md")])
    assert error.value.code == f"error: {runs}:2: 7 cells for the 6 columns of the header"
    runs.write_text("model,variant,backbone,seed,test_exact_match\nseq2seq,baseline,t5,1,0.5\n")
    with pytest.raises(SystemExit) as error:
        sys.modules[script].main(["--runs", str(runs), "--out", str(tmp_path / "out.md")])
    assert error.value.code.startswith(f"error: {runs}:1: no column 'data'")
    assert not (tmp_path / "out.md").exists()


def test_tables_follow_zoo_results(tmp_path, monkeypatch):
    import zoo.results

    repo = tmp_path / "repo"  # (never the repository's own results/, whichever default the code takes)
    monkeypatch.setattr(zoo.results, "REPO_ROOT", repo)
    monkeypatch.setattr(sys.modules["ir_table"], "ROOT", repo)
    monkeypatch.setattr(gandr_report, "ROOT", repo)
    monkeypatch.setenv("ZOO_RESULTS", str(tmp_path / "runs.csv"))
    rir = {"model": "seq2seq", "variant": "rir", "backbone": "t5", "data": "geo_sql_iid", "seed": 1,
           "test_exact_match": 0.5, "train_seconds": 60, "train_examples_per_s": 10, "run_dir": "runs/a"}
    write_csv(tmp_path / "runs.csv", [rir])
    sys.modules["ir_table"].main([])
    assert "**50.0** (n=1)" in (tmp_path / "ir_table.md").read_text()
    with pytest.raises(SystemExit, match="no retrieval run"):
        gandr_report.main([])
    write_csv(tmp_path / "runs.csv", [rir, {**rir, "variant": "input_tfidf-k4"}])
    gandr_report.main([])
    assert (tmp_path / "gandr_table.md").is_file() and not repo.exists()


@pytest.mark.parametrize("content, where, problem", [
    ('{"utterance": "q", "gold": "g", "prediction": "g", "correct": true}\n{"utterance": "q", "gold\n', ":2:",
     "not JSON"),
    ('{"utterance": "q", "gold": "g", "prediction": "g"}\n', ":1:", "no field 'correct'"),
    ('{"utterance": "q", "gold": "g", "prediction": "g", "correct": "False"}\n', ":1:",
     "field 'correct' is of type string, not boolean"),
    ('["q", "g", "g", true]\n', ":1:", "a JSON array, not an object"),
    ("", ": ", "no predictions"),
])
def test_a_damaged_predictions_file_is_one_line(tmp_path, content, where, problem):
    """Not a traceback, and not a run whose damaged predictions count as fewer or wrong ones."""
    run_dir = tmp_path / "runs" / "a"
    run_dir.mkdir(parents=True)
    (run_dir / "predictions.jsonl").write_text(content)
    write_csv(tmp_path / "runs.csv", [{"model": "seq2seq", "variant": "input_tfidf-k4", "backbone": "t5",
                                       "data": "geo_sql_iid", "seed": 1, "test_exact_match": 1.0,
                                       "train_seconds": 60, "train_examples_per_s": 10, "run_dir": str(run_dir)}])
    out = tmp_path / "gandr.md"
    with pytest.raises(SystemExit) as error:
        gandr_report.main(["--runs", str(tmp_path / "runs.csv"), "--recall", str(tmp_path / "recall.csv"),
                           "--out", str(out), "--plot", str(tmp_path / "alpha.png"),
                           "--copying", str(tmp_path / "copying.csv")])
    message = error.value.code
    assert message.startswith(f"error: {run_dir / 'predictions.jsonl'}{where}") and problem in message
    assert "expected one JSON object per line with utterance, gold, prediction, correct" in message
    assert "\n" not in message and not out.exists()


def test_predictions_with_unicode_line_separators_are_one_row_each(tmp_path):
    """write_jsonl keeps U+2028 unescaped; str.splitlines would cut the row there."""
    from zoo.results import write_jsonl

    write_jsonl(tmp_path / "predictions.jsonl", [{"utterance": "q\u2028 || a & SELECT 1 ;", "gold": "SELECT 1 ;",
                                                   "prediction": "SELECT 1 ;", "correct": True}])
    write_csv(tmp_path / "runs.csv", [{"model": "seq2seq", "variant": "input_tfidf-k4", "backbone": "t5",
                                       "data": "geo_sql_iid", "seed": 1, "test_exact_match": 1.0,
                                       "train_seconds": 60, "train_examples_per_s": 10, "run_dir": str(tmp_path)}])
    out = tmp_path / "gandr.md"
    gandr_report.main(["--runs", str(tmp_path / "runs.csv"), "--recall", str(tmp_path / "recall.csv"),
                       "--out", str(out), "--plot", str(tmp_path / "alpha.png"),
                       "--copying", str(tmp_path / "copying.csv")])
    assert "| geo_sql_iid | input_tfidf-k4 | t5 | 1 | 1 / 1 | 1 / 1 | 0 / 0 |" in out.read_text()
