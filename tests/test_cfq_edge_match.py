"""zoo/cfq_breakdown.py and benchmarks/cfq_edge_match.py: the reference implementation's view of a CFQ prediction
(edges between entities and variables only), checked on hand-written queries and a synthetic run."""
import csv
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("cfq_edge_match", ROOT / "benchmarks" / "cfq_edge_match.py")
cfq_edge_match = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cfq_edge_match)
from zoo import cfq_breakdown  # noqa: E402

GOLD = ("SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . ?x0 people.person.gender m_05zppz . "
        "?x0 film.director.film M1 . FILTER ( ?x0 != M2 ) . ?x0 people.person.spouse_s/ns:people.marriage.spouse M2 }")


def test_edges_keep_only_triples_between_entities_and_variables():
    assert cfq_breakdown.edges(GOLD) == {("?x0", "film.director.film", "M1"),
                                         ("?x0", "people.person.spouse_s/ns:people.marriage.spouse", "M2")}
    assert cfq_breakdown.edges("SELECT DISTINCT ?x0 WHERE { ?x0 a") is None


def write_predictions(path, pairs):
    with open(path, "w") as f:
        for gold, prediction in pairs:
            f.write(json.dumps({"utterance": "q", "gold": gold, "prediction": prediction,
                                "correct": prediction == gold}) + "\n")


def test_rescore_counts_by_hand(tmp_path):
    # 1: exact; 2: type, gender, FILTER and query type wrong but the edges right; 3: an edge missing; 4: unparsable
    wrong_but_same_edges = ("SELECT count ( * ) WHERE { ?x0 film.director.film M1 . "
                            "?x0 people.person.spouse_s/ns:people.marriage.spouse M2 }")
    missing_edge = "SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . ?x0 film.director.film M1 }"
    predictions = tmp_path / "predictions.jsonl"
    write_predictions(predictions, [(GOLD, GOLD), (GOLD, wrong_but_same_edges), (GOLD, missing_edge),
                                    (GOLD, "<unprintable>")])
    scores = cfq_breakdown.rescore(predictions)
    assert {k: v for k, v in scores.items() if not k.startswith("wrong_")} == {
        "n_test": 4, "test_exact_match": 0.25, "test_edge_exact_match": 0.5, "test_emr": 0.5}
    # 2 differs in query type, type, gender and filter; 3 in gender, filter and an edge
    assert {k: v for k, v in scores.items() if k.startswith("wrong_")} == {
        "wrong_unparsable": 0.25, "wrong_query_type": 0.25, "wrong_variables": 0.0, "wrong_types": 0.25,
        "wrong_attributes": 0.5, "wrong_filters": 0.5, "wrong_relations": 0.25}


def test_rescore_names_the_bad_line(tmp_path):
    predictions = tmp_path / "predictions.jsonl"
    good = {"utterance": "q", "gold": GOLD, "prediction": GOLD, "correct": True}
    predictions.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"predictions.jsonl:2"):
        cfq_breakdown.rescore(predictions)


def test_main_writes_one_row_per_run_and_skips_reused_directories(tmp_path, capsys):
    good, reused = tmp_path / "good", tmp_path / "reused"
    for run_dir in (good, reused):
        run_dir.mkdir()
        write_predictions(run_dir / "predictions.jsonl", [(GOLD, GOLD), (GOLD, "<unprintable>")])
    runs = tmp_path / "runs.csv"
    header = ["model", "variant", "backbone", "data", "seed", "git_commit", "run_dir", "test_exact_match"]
    with open(runs, "w", newline="") as f:
        csv.writer(f).writerows([header, ["ggd", "ggd", "b", "cfq_mcd1", "1", "abc", str(good), "0.5"],
                                 ["ggd", "ggd", "b", "cfq_mcd1", "2", "abc", str(reused), "0.9"],
                                 ["seq2seq", "none", "b", "scan_length", "1", "abc", str(good), "0.5"]])
    out = tmp_path / "edges.csv"
    assert cfq_edge_match.main(["--runs", str(runs), "--out", str(out)]) == 0
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [(r["seed"], r["test_edge_exact_match"]) for r in rows] == [("1", "0.5")]
    assert "reused" in capsys.readouterr().err
    # rescored again once seed 1's predictions are gone and seed 2's directory holds its own again: seed 1's row stays
    (good / "predictions.jsonl").rename(reused / "predictions.jsonl")
    with open(runs, "a", newline="") as f:
        csv.writer(f).writerow(["ggd", "ggd", "b", "cfq_mcd1", "2", "abc", str(reused), "0.5"])
    assert cfq_edge_match.main(["--runs", str(runs), "--out", str(out)]) == 0
    with open(out) as f:
        assert [r["seed"] for r in csv.DictReader(f)] == ["1", "2"]


def test_main_finds_run_dirs_relative_to_the_repository_and_names_a_damaged_table(tmp_path, monkeypatch, capsys):
    import zoo.results

    monkeypatch.setattr(zoo.results, "REPO_ROOT", tmp_path)  # as if tmp_path were the checkout
    (tmp_path / "runs" / "a").mkdir(parents=True)
    write_predictions(tmp_path / "runs" / "a" / "predictions.jsonl", [(GOLD, GOLD), (GOLD, "<unprintable>")])
    runs, out = tmp_path / "runs.csv", tmp_path / "edges.csv"
    header = "model,variant,backbone,data,seed,git_commit,run_dir,test_exact_match\n"
    runs.write_text(header + "ggd,ggd,b,cfq_mcd1,1,abc,runs/a,0.5\n")
    assert cfq_edge_match.main(["--runs", str(runs), "--out", str(out)]) == 0
    with open(out) as f:
        assert [r["run_dir"] for r in csv.DictReader(f)] == ["runs/a"]
    runs.write_text(header + "ggd,ggd,b,cfq_mcd1,1,abc,runs/a,50.0\n")  # percent: the check would skip it as reused
    assert cfq_edge_match.main(["--runs", str(runs), "--out", str(out)]) == 1
    assert capsys.readouterr().err.endswith(f"{runs}:2: column 8 (test_exact_match) is '50.0', not a fraction "
                                            "in [0, 1]\n")
    runs.write_text(header + "ggd,ggd,b,cfq_mcd1,1,abc\n")
    assert cfq_edge_match.main(["--runs", str(runs), "--out", str(out)]) == 1
    assert capsys.readouterr().err == f"{runs}:2: 6 cells for the 8 columns of the header\n"


def test_main_names_a_damaged_predictions_file_in_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    good = json.dumps({"utterance": "q", "gold": GOLD, "prediction": GOLD, "correct": True})
    runs = tmp_path / "runs.csv"
    runs.write_text("model,variant,backbone,data,seed,git_commit,run_dir,test_exact_match\n"
                    f"ggd,ggd,b,cfq_mcd1,1,abc,{run_dir},1.0\n")
    for content, problem in ((good + "\n{not json\n", ":2:2: not JSON"),
                             (good + '\n{"utterance": "q", "gold": "x"}\n', ":2: no field 'prediction'"),
                             ("", ": no predictions")):
        (run_dir / "predictions.jsonl").write_text(content)
        assert cfq_edge_match.main(["--runs", str(runs), "--out", str(tmp_path / "edges.csv")]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"{run_dir / 'predictions.jsonl'}{problem}") and err.count("\n") == 1
    assert not (tmp_path / "edges.csv").exists()


def test_main_says_a_missing_results_file_is_missing(tmp_path, capsys):
    runs = tmp_path / "nowhere.csv"
    assert cfq_edge_match.main(["--runs", str(runs), "--out", str(tmp_path / "edges.csv")]) == 1
    assert capsys.readouterr().err == f"no results file at {runs}: give --runs, or run benchmarks/run.py first\n"
