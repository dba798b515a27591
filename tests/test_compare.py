"""benchmarks/compare.py: McNemar and the paired bootstrap against hand-computed values on a 10-example fixture, the
structural buckets on hand-made predictions, and the command line end to end on run directories written here."""
import csv
import importlib.util
import json
import math
import sys

import numpy as np
import pytest
from scipy import stats

from conftest import REPO

_spec = importlib.util.spec_from_file_location("compare", REPO / "benchmarks" / "compare.py")
compare = sys.modules["compare"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)

# The 10-example fixture: 3 both right, 4 only A, 1 only B, 2 both wrong; A 7/10, B 4/10.
A = np.array([1, 1, 1, 1, 1, 1, 1, 0, 0, 0], dtype=bool)
B = np.array([1, 1, 1, 0, 0, 0, 0, 1, 0, 0], dtype=bool)
COMMANDS = ["walk", "jump twice", "run left", "look right twice", "walk and jump", "turn left",
            "run around left", "jump after walk", "look", "walk left thrice"]


def test_agreement_and_mcnemar_exact_by_hand():
    assert compare.agreement(A, B) == {"both_right": 3, "only_a": 4, "only_b": 1, "both_wrong": 2}
    # 5 discordant examples, 4 favour A: P(X <= 1 | n=5, 1/2) = (1 + 5) / 32, doubled for two sides
    assert compare.mcnemar_exact(4, 1) == pytest.approx(12 / 32)
    assert compare.mcnemar_exact(1, 4) == pytest.approx(12 / 32)
    assert compare.mcnemar_exact(5, 0) == pytest.approx(2 / 32)
    # n=12, 2 favour B: 2 * (1 + 12 + 66) / 4096
    assert compare.mcnemar_exact(10, 2) == pytest.approx(158 / 4096)
    assert compare.mcnemar_exact(0, 0) == 1.0  # no discordant example: nothing tells the runs apart


def test_paired_bootstrap_by_hand():
    # Resampling the 10 examples draws (only A, only B, tied) ~ Multinomial(10; .4, .1, .5) and the difference is
    # (only A - only B) / 10. Its exact cumulative distribution, by enumerating the counts: P(<= -0.2) = 0.0144,
    # P(<= -0.1) = 0.0438, P(<= 0.6) = 0.9634, P(<= 0.7) = 0.9909; so the 2.5% and 97.5% percentiles are -0.1 and
    # 0.7, far enough from the steps for 10,000 resamples to find them.
    diff, low, high = compare.paired_bootstrap(A, B, resamples=10_000, seed=0)
    assert diff == pytest.approx(0.3)
    assert (low, high) == (pytest.approx(-0.1), pytest.approx(0.7))
    assert low <= diff <= high
    # 90%: P(<= 0.0) = 0.1092 > 0.05 and P(<= 0.5) = 0.8946 < 0.95 -> [0.0, 0.6]
    assert compare.paired_bootstrap(A, B, confidence=0.9, seed=0)[1:] == (pytest.approx(0.0), pytest.approx(0.6))
    # a fixed seed gives the same interval; the examples are paired, so identical runs differ by exactly 0
    assert compare.paired_bootstrap(A, B, seed=3) == compare.paired_bootstrap(A, B, seed=3)
    assert compare.paired_bootstrap(A, A) == (0.0, 0.0, 0.0)


def test_paired_bootstrap_is_paired():
    """A run that is B plus three more right answers: no resample has A below B; an unpaired bootstrap (each side
    resampled alone: 60% against 50% of 30) would reach about 15 points below 0."""
    b = np.array([1, 0, 1, 0, 1, 0, 1, 0, 1, 0] * 3, dtype=bool)
    a = b.copy()
    a[[1, 3, 5]] = True
    diff, low, high = compare.paired_bootstrap(a, b, seed=1)
    assert diff == pytest.approx(0.1) and low == 0.0 and high > diff


def test_welch_over_seeds_by_hand():
    a, b = [0.5, 0.6, 0.7], [0.4, 0.5]
    diff, low, high, p = compare.welch(a, b)
    var_a, var_b = 0.01 / 3, 0.005 / 2  # sample variances over the group sizes
    se = math.sqrt(var_a + var_b)
    df = (var_a + var_b) ** 2 / (var_a ** 2 / 2 + var_b ** 2 / 1)  # Welch-Satterthwaite
    half = stats.t.ppf(0.975, df) * se
    assert diff == pytest.approx(0.15)
    assert (low, high) == (pytest.approx(0.15 - half), pytest.approx(0.15 + half))
    assert p == pytest.approx(2 * stats.t.sf(0.15 / se, df))
    assert all(math.isnan(x) for x in compare.welch([0.5], b)[1:])  # one seed: no spread to compare with


def test_bucket_measures_on_hand_made_programs():
    from zoo.formalisms import get_formalism

    funql, sparql, sql = get_formalism("funql"), get_formalism("cfq_sparql"), get_formalism("sql")
    assert compare.program_depth("answer ( state ( all ) )", funql) == 2
    assert compare.program_depth("answer ( population_1 ( stateid ( 'new york' ) ) )", funql) == 3
    assert compare.program_depth("answer ( count ( state ( next_to_2 ( cityid ( 'austin', 'tx' ) ) ) ) )",
                                 funql) == 5
    assert compare.program_length("answer ( population_1 ( stateid ( 'new york' ) ) )", funql) == 10
    assert compare.program_length('SELECT CITYalias0.CITY_NAME FROM CITY AS CITYalias0 WHERE '
                                  'CITYalias0.STATE_NAME = "state_name0" ;', sql) == 11
    select = ("SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . ?x0 people.person.nationality m_03rjj . "
              "?x0 people.person.nationality m_03rjj . FILTER ( ?x0 != M1 ) }")
    count = "SELECT count ( * ) WHERE { M0 film.director.film M1 . M0 film.editor.film M1 }"
    chain = ("SELECT DISTINCT ?x0 WHERE { ?x0 film.film.directed_by ?x1 . ?x1 film.actor.film/ns:film.performance"
             ".film ?x2 . ?x2 a film.film }")
    assert [compare.cfq_triples(q, sparql) for q in (select, count, chain)] == [2, 2, 3]  # the repeat counts once
    assert [compare.cfq_variables(q, sparql) for q in (select, count, chain)] == [1, 0, 3]
    assert compare.command_length("look around right thrice || walk & I_WALK") == 4  # exemplars left out


def test_numeric_and_template_buckets():
    labels, order = compare.numeric_buckets([3, 1, 2, 3, 1])
    assert labels == ["3", "1", "2", "3", "1"] and order == ["1", "2", "3"]
    # 20 distinct values: quartiles 5.75, 10.5 and 15.25 cut them into four ranges
    labels, order = compare.numeric_buckets(list(range(20, 0, -1)), bins=4, exact_up_to=10)
    assert order == ["1-5", "6-10", "11-15", "16-20"]
    assert labels[0] == "16-20" and labels[-1] == "1-5" and labels[14] == "6-10"
    # 11 values: the median 6 closes the first range
    assert compare.numeric_buckets(list(range(1, 12)), bins=2)[1] == ["1-6", "7-11"]
    labels, order, legend = compare.template_buckets(["x", "y", "x", "z", "x", "y", "w"], top=2)
    assert order == ["T1", "T2", "other (2 templates)"] and legend == {"T1": "x", "T2": "y"}
    assert labels == ["T1", "T2", "T1", "other (2 templates)", "T1", "T2", "other (2 templates)"]


def prediction(utterance, gold, right):
    return {"utterance": utterance, "gold": gold, "prediction": gold if right else "I_WALK", "correct": bool(right)}


def scan_runs(a_runs, b_runs):
    from zoo.formalisms import get_formalism

    scan = get_formalism("scan")
    gold = [scan.interpret(c) for c in COMMANDS]

    def run(label, right):
        return compare.Run(label, f"{label}.jsonl", "scan_simple",
                           [prediction(c, g, r) for c, g, r in zip(COMMANDS, gold, right)])
    return ([run(f"a/scan_simple/seed{k}", r) for k, r in enumerate(a_runs, 1)],
            [run(f"b/scan_simple/seed{k}", r) for k, r in enumerate(b_runs, 1)])


def test_buckets_of_a_comparison_on_hand_made_predictions():
    runs_a, runs_b = scan_runs([A], [B])
    result = compare.compare(runs_a, runs_b, examples=2)
    by_words = next(b for b in result["buckets"] if b["name"] == "command length (words)")
    # words:      1  2  2  3  3  2  3  3  1  3
    # A right:    1  1  1  1  1  1  1  0  0  0    B right: 1 1 1 0 0 0 0 1 0 0
    assert [s["bucket"] for s in by_words["a"]] == ["1", "2", "3"]
    assert [(s["n"], s["correct"]) for s in by_words["a"]] == [(2, 1), (3, 3), (5, 3)]
    assert [(s["n"], s["correct"]) for s in by_words["b"]] == [(2, 1), (3, 2), (5, 1)]
    assert by_words["b"][2]["accuracy"] == pytest.approx(0.2)
    assert result["metric"] == "exact_match" and result["n_only_a"] == 4 and result["n_only_b"] == 1
    assert [e["line"] for e in result["only_a"]] == [4, 5] and result["only_b"][0]["utterance"] == "jump after walk"


def test_seeds_a_side_average_their_buckets():
    second = A.copy()
    second[0] = False  # the second A seed misses "walk"
    runs_a, runs_b = scan_runs([A, second], [B, B])
    result = compare.compare(runs_a, runs_b)
    one_word = next(b for b in result["buckets"] if b["name"] == "command length (words)")["a"][0]
    assert (one_word["runs"], one_word["n"], one_word["correct"]) == (2, 2, 1)
    assert one_word["accuracy"] == pytest.approx(0.25) and one_word["std"] == pytest.approx(math.sqrt(0.125))
    # two pairs of (A, B): 3, 4, 1, 2; two pairs of (second, B): 2, 4, 2, 2
    assert result["pooled"] == {"both_right": 10, "only_a": 16, "only_b": 6, "both_wrong": 8}
    assert len(result["pairs"]) == 4
    assert [p[3] for p in result["pairs"]] == pytest.approx([0.375, 0.375, 0.6875, 0.6875])  # 2 * (1 + 6 + 15) / 64
    assert result["n_only_a"] == 4 and result["n_only_b"] == 1  # right in every seed of one side, none of the other
    nothing_right = np.zeros(10, dtype=bool)
    against_nothing = compare.compare(*scan_runs([A, second], [nothing_right]))
    assert against_nothing["n_only_a"] == 6  # "walk", right in one A seed of two, is not among them


def test_denotation_is_the_metric_where_every_run_has_it():
    runs_a, runs_b = scan_runs([A], [B])
    for run, right in ((runs_a[0], ~A), (runs_b[0], B)):  # A's denotations are the opposite of its exact matches
        for row, r in zip(run.rows, right):
            row["denotation_correct"] = bool(r)
    result = compare.compare(runs_a, runs_b)
    assert result["metric"] == "denotation" and list(result["acc_a"]) == [0.3]
    assert compare.compare(runs_a, runs_b, metric="exact_match")["acc_a"][0] == 0.7
    del runs_b[0].rows[9]["denotation_correct"]  # one row without: exact match for all
    assert compare.compare(runs_a, runs_b)["metric"] == "exact_match"


def write_run(root, name, rows):
    run = root / name / "scan_simple" / "seed1"
    run.mkdir(parents=True)
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return run


def test_command_line_end_to_end(tmp_path, capsys):
    runs_a, runs_b = scan_runs([A], [B])
    dir_a = write_run(tmp_path, "seq2seq-baseline", runs_a[0].rows)
    dir_b = write_run(tmp_path, "seq2seq-rir", runs_b[0].rows)
    out = tmp_path / "out"
    assert compare.main([str(dir_a), str(dir_b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    text = (out / "compare.md").read_text()
    assert printed.strip() == text.strip()
    assert "| seq2seq-baseline/scan_simple/seed1 | seq2seq-rir/scan_simple/seed1 | 4 | 1 | 0.375 |" in text
    assert "**Difference A − B: +30.0 points**, paired bootstrap 95% interval [-10.0, +70.0]" in text
    assert "| **A right** | 3 | 4 |" in text and "| **A wrong** | 1 | 2 |" in text
    assert "## Accuracy by command length (words)" in text and "| 3 | 5 | 60.0 | 20.0 | +40.0 |" in text
    with open(out / "compare.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    overall = {r["side"]: r for r in rows if r["section"] == "overall"}
    assert overall["A"]["accuracy"] == "0.7" and overall["B"]["correct"] == "4"
    assert any(r["section"] == "mcnemar" and r["p_value"] == "0.375" for r in rows)
    from matplotlib.image import imread
    height, width = imread(out / "compare.png").shape[:2]
    assert 0 < width <= 1600 and height > 0

    # the same runs named as the runs table records them, and every seed of a folder
    table = tmp_path / "runs.csv"
    table.write_text("model,variant,backbone,data,seed,run_dir\n"
                     f"seq2seq,baseline,x,scan_simple,1,{dir_a}\nseq2seq,rir,x,scan_simple,1,{dir_b}\n")
    assert compare.main(["--runs", str(table), "seq2seq-baseline/scan_simple/seed1", "seq2seq-rir/scan_simple",
                         "--out", str(tmp_path / "named")]) == 0
    assert (tmp_path / "named" / "compare.md").read_text() == text
    assert compare.main(["--a", str(dir_a.parent), "--b", str(dir_b), "--out", str(tmp_path / "folder")]) == 0


def test_command_line_errors(tmp_path, capsys):
    runs_a, runs_b = scan_runs([A], [B])
    dir_a = write_run(tmp_path, "seq2seq-baseline", runs_a[0].rows)
    other = [dict(r) for r in runs_b[0].rows]
    other[2]["gold"] = "I_JUMP"
    dir_b = write_run(tmp_path, "seq2seq-rir", other)
    assert compare.main([str(dir_a), str(dir_b), "--out", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("compare: different test sets: line 3 of ") and str(dir_a) in error \
        and str(dir_b) in error and "gold" in error and "Traceback" not in error
    assert not (tmp_path / "out").exists()

    shorter = write_run(tmp_path, "seq2seq-lir", runs_b[0].rows[:9])
    assert compare.main([str(dir_a), str(shorter)]) == 1
    assert "has 10 examples" in capsys.readouterr().err

    broken = (dir_b / "predictions.jsonl").read_text().splitlines()
    broken[4] = broken[4][:20]
    (dir_b / "predictions.jsonl").write_text("\n".join(broken) + "\n")
    assert compare.main([str(dir_a), str(dir_b)]) == 1
    assert f"{dir_b / 'predictions.jsonl'}:5:" in capsys.readouterr().err

    assert compare.main([str(dir_a), str(tmp_path / "nowhere"), "--runs", str(tmp_path / "none.csv")]) == 1
    assert "no such run directory" in capsys.readouterr().err
    assert compare.main([str(dir_a), str(dir_a), "--metric", "denotation"]) == 1
    assert "no 'denotation_correct'" in capsys.readouterr().err
    assert compare.main([str(dir_a), str(dir_a), "--data", "cfq_mcd1"]) == 1
    assert f"{dir_a / 'predictions.jsonl'}:1: CFQ triples: the gold program is not cfq_sparql" in \
        capsys.readouterr().err
