"""benchmarks/leaderboard.py on a synthetic runs.csv: aggregation, published join, Markdown, plot, bad input.

Expected numbers: seq2seq/baseline on scan_length with seeds 1, 2, 3 at 0.10/0.20/0.30 exact match gives a mean of
20.0 and a *sample* standard deviation (ddof=1) of 10.0 percent points; published is herzig2021 table 1's 14.5.
"""
import csv
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

import zoo.results as results

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("leaderboard", ROOT / "benchmarks" / "leaderboard.py")
leaderboard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(leaderboard)

HEADER = ["time", "git_commit", "model", "variant", "backbone", "data", "seed", "test_exact_match",
          "best_val_metric", "best_val", "params", "train_seconds", "epochs", "test_examples_per_s", "hardware",
          "run_dir"]


def run(model, variant, backbone, data, seed, em, params=1000, secs=60, hw="cpu"):
    return ["2025-01-01T00:00:00", "abc", model, variant, backbone, data, seed, em, "val_exact_match", "0.5",
            params, secs, 1, 250.0, hw, f"runs/{seed}"]


def write_runs(path, rows, header=HEADER):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    return path


@pytest.fixture
def built(tmp_path):
    runs = write_runs(tmp_path / "runs.csv", [
        run("seq2seq", "baseline", "t5-mini-scratch", "scan_length", 1, "0.10", params=1000, secs=60, hw="cpu"),
        run("seq2seq", "baseline", "t5-mini-scratch", "scan_length", 2, "0.20", params=1000, secs=120, hw="H100"),
        run("seq2seq", "baseline", "t5-mini-scratch", "scan_length", 3, "0.30", params=1000, secs=180, hw="cpu"),
        run("ggd", "ggd", "lstm", "cfq_mcd2_partial", 1, "0.42"),
        run("ggd", "ggd", "lstm", "cfq_mcd1", 1, "0.5"),
        run("seq2seq", "rir", "t5-mini-scratch", "scan_length", 1, "oops"),  # line 7: malformed, skipped
    ])
    out = tmp_path / "results"
    board = leaderboard.build_leaderboard(runs, ROOT / "benchmarks" / "published.csv", out)
    return board, out


def row(df, **keys):
    sel = df[(df[list(keys)] == pd.Series(keys)).all(axis=1)]
    assert len(sel) == 1, sel
    return sel.iloc[0]


def test_csv_values_and_published_join(built):
    _, out = built
    df = pd.read_csv(out / "leaderboard.csv")
    assert list(df.columns)[:15] == ["model", "variant", "backbone", "data", "metric", "protocol", "ir_definition",
                                     "mean", "std", "seeds", "published", "published_source", "params",
                                     "train_minutes", "hardware"]
    r = row(df, model="seq2seq", variant="baseline", data="scan_length", metric="exact_match")
    assert (r["mean"], r["std"], r["seeds"], r["params"], r["train_minutes"]) == (20.0, 10.0, 3, 1000, 2.0)
    assert r["hardware"] == "H100; cpu"
    assert r["published"] == 14.5
    assert r["published_source"] == "herzig2021 table 1 (t5-base, pretrained)"
    # Two ggd rows exist for cfq_mcd1 with the same backbone: the first in file order wins (table 1, no dev tuning).
    g = row(df, model="ggd", data="cfq_mcd1")
    assert (g["mean"], g["published"]) == (50.0, 97.9) and pd.isna(g["std"])
    assert g["published_source"].startswith("gai2021 table 1")


def test_partial_never_gets_published(built):
    board, out = built
    r = row(pd.read_csv(out / "leaderboard.csv"), data="cfq_mcd2_partial")
    assert r["mean"] == 42.0 and pd.isna(r["published"]) and pd.isna(r["published_source"])
    assert "_partial" in (out / "LEADERBOARD.md").read_text() and "no published number" in (out / "LEADERBOARD.md").read_text()
    assert "rir" not in set(board["variant"])  # the malformed row was skipped
    assert set(board["metric"]) == {"exact_match"}  # test_examples_per_s is a speed, not a metric


def test_markdown_and_plot(built):
    _, out = built
    md = (out / "LEADERBOARD.md").read_text()
    assert "## SCAN" in md and "## CFQ" in md and "## COGS" not in md
    assert "benchmarks/run.py" in md and "results/runs.csv" in md
    assert "| scan_length | seq2seq | baseline | t5-mini-scratch | exact_match | 20.0 ± 10.0 | 3 | 14.5 |" in md
    for png in (out / "zoo.png", out / "zoo_heatmap.png"):
        assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_malformed_row_reported_with_line_number_and_rerun_replaces_seed(tmp_path, capsys):
    runs = write_runs(tmp_path / "runs.csv", [run("seq2seq", "baseline", "lstm", "scan_length", 1, "0.5"),
                                              run("seq2seq", "baseline", "lstm", "scan_length", 2, "55.0"),
                                              run("seq2seq", "baseline", "lstm", "scan_length", 1, "0.7")])
    board = leaderboard.build_leaderboard(runs, ROOT / "benchmarks" / "published.csv", tmp_path / "out")
    err = capsys.readouterr().err  # percent, not a fraction: the row is named and skipped
    assert f"{runs}:3: column 8 (test_exact_match) is '55.0', not a fraction in [0, 1]; row skipped" in err
    assert (board["seeds"].tolist(), board["mean"].tolist()) == ([1], [70.0])  # the later seed-1 row wins



def test_a_seed_written_as_a_float_is_the_same_seed(tmp_path):
    """A table saved by pandas, whose seed column had a blank, spells seed 1 "1.0": a re-run is still a re-run."""
    runs = write_runs(tmp_path / "runs.csv", [run("seq2seq", "baseline", "lstm", "scan_length", "1.0", "0.5"),
                                              run("seq2seq", "baseline", "lstm", "scan_length", "1", "0.7")])
    board = leaderboard.build_leaderboard(runs, ROOT / "benchmarks" / "published.csv", tmp_path / "out")
    assert (board["seeds"].tolist(), board["mean"].tolist()) == ([1], [70.0])

def one_line_error(runs, capsys, tmp_path):
    """leaderboard.main on ``runs``: exit 1, nothing written, and the message on stderr, one line."""
    out = tmp_path / "out"
    assert leaderboard.main(["--runs", str(runs), "--out", str(out)]) == 1
    assert not out.exists()
    [message] = capsys.readouterr().err.splitlines()
    return message


@pytest.mark.parametrize("missing", ["data", "seed", "model"])
def test_a_runs_table_without_a_key_column_is_an_error(tmp_path, capsys, missing):
    """Without data or seed every dataset's runs would fall into one cell; without model, a blank model."""
    keep = [i for i, name in enumerate(HEADER) if name != missing]
    rows = [run("seq2seq", "baseline", "lstm", data, seed, "0.5") for data in ("scan_simple", "scan_length")
            for seed in (1, 2)]
    runs = write_runs(tmp_path / "runs.csv", [[r[i] for i in keep] for r in rows], header=[HEADER[i] for i in keep])
    assert one_line_error(runs, capsys, tmp_path).startswith(f"leaderboard: {runs}:1: no column '{missing}'")


GOOD = ",".join(map(str, run("seq2seq", "baseline", "lstm", "scan_length", 1, "0.5"))) + "\n"


@pytest.mark.parametrize("text, where", [
    (GOOD + ",".join(map(str, run("span_cky", "sp", "bert", "geo_funql_iid", 1, "0.8")[:8])) + "\n" + GOOD,
     ":3: 8 cells for the 16 columns"),  # a short row
    (GOOD + GOOD[:40], ":3: 4 cells for 16 columns: the file ends in the middle of this row"),  # cut off
    (GOOD.replace("lstm", '"lstm') + GOOD + GOOD, ":2: column 5 (backbone): the quote that opens this cell"),
    (GOOD.replace(",abc,", ",a\udcffc,"), ":2:22: byte 0xff is not UTF-8"),
    (GOOD.replace(",scan_length,", ",,"), ":2: column 6 (data) is empty"),
])
def test_a_damaged_runs_table_is_one_line_naming_file_line_and_column(tmp_path, capsys, text, where):
    runs = tmp_path / "runs.csv"
    runs.write_bytes((",".join(HEADER) + "\n" + text).encode("utf-8", "surrogateescape"))
    assert one_line_error(runs, capsys, tmp_path).startswith(f"leaderboard: {runs}{where}")


def test_a_table_without_test_metrics_says_so(tmp_path, capsys):
    header = [name if name != "test_exact_match" else "exact_match" for name in HEADER]
    runs = write_runs(tmp_path / "runs.csv", [run("seq2seq", "baseline", "lstm", "scan_length", 1, "0.5")], header)
    message = one_line_error(runs, capsys, tmp_path)
    assert message == f"leaderboard: {runs}:1: no test_<metric> column: not a runs table?"


def test_rows_without_a_metric_are_reported(tmp_path, capsys):
    runs = write_runs(tmp_path / "runs.csv", [run("seq2seq", "baseline", "lstm", "scan_length", 1, "")])
    assert leaderboard.main(["--runs", str(runs), "--out", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.splitlines() == [  # "see above": there is something above
        f"{runs}:2: no test metric has a value; row skipped",
        f"leaderboard: no usable runs in {runs}: all 1 rows were skipped (see above)"]
    runs = write_runs(tmp_path / "runs.csv", [run("seq2seq", "baseline", "lstm", "scan_length", 1, ""),
                                              run("seq2seq", "baseline", "lstm", "scan_length", 2, "0.5")])
    leaderboard.build_leaderboard(runs, ROOT / "benchmarks" / "published.csv", tmp_path / "out")
    assert capsys.readouterr().err == f"{runs}:2: no test metric has a value; row skipped\n"


def test_zoo_results_moves_the_runs_table_and_the_leaderboard(tmp_path, monkeypatch):
    """$ZOO_RESULTS, which benchmarks/run.py appends to, is what the leaderboard reads, and it writes beside it."""
    repo = tmp_path / "repo"  # (never the repository's own results/, whichever default the code takes)
    monkeypatch.setattr(leaderboard, "ROOT", repo)
    monkeypatch.setattr(results, "REPO_ROOT", repo)
    runs = write_runs(tmp_path / "scratch.csv", [run("seq2seq", "baseline", "lstm", "scan_length", 1, "0.5")])
    monkeypatch.setenv("ZOO_RESULTS", str(runs))
    assert leaderboard.main(["--published", str(ROOT / "benchmarks" / "published.csv")]) == 0
    assert (tmp_path / "leaderboard.csv").is_file() and (tmp_path / "LEADERBOARD.md").is_file()
    assert not repo.exists()


@pytest.mark.parametrize("content", [None, "", ",".join(HEADER) + "\n"])
def test_missing_or_empty_runs_is_a_clear_error(tmp_path, capsys, content):
    """Missing file, empty file, header only: exit 1, a message pointing at benchmarks/run.py, nothing written."""
    runs = tmp_path / "runs.csv"
    if content is not None:
        runs.write_text(content)
    out = tmp_path / "out"
    assert leaderboard.main(["--runs", str(runs), "--out", str(out)]) == 1
    assert "run benchmarks/run.py first" in capsys.readouterr().err
    assert not out.exists()


def test_runs_of_another_protocol_stay_apart(tmp_path):
    """The same seed under another experiment's budget is a different group, not a re-run replacing the first."""
    header = HEADER + ["protocol"]
    runs = write_runs(tmp_path / "runs.csv", [
        run("seq2seq", "rir", "t5-mini-scratch", "scan_length", 1, "0.10") + [""],
        run("seq2seq", "rir", "t5-mini-scratch", "scan_length", 1, "0.30") + ["seq2seq_ir_gpu"],
    ], header=header)
    board = leaderboard.build_leaderboard(runs, ROOT / "benchmarks" / "published.csv", tmp_path / "out")
    em = board[board["metric"] == "exact_match"].set_index("protocol")["mean"]
    assert em.to_dict() == {"": 10.0, "seq2seq_ir_gpu": 30.0}
    assert "rir (seq2seq_ir_gpu, zoo IRs)" in (tmp_path / "out" / "LEADERBOARD.md").read_text()


def test_runs_of_the_two_ir_definitions_stay_apart(tmp_path):
    """A paper-definition run of the same seed is not a re-run of the zoo's (a row without the column is the zoo's);
    a baseline has no definition."""
    header = HEADER + ["ir_definition"]
    runs = write_runs(tmp_path / "runs.csv", [
        run("seq2seq", "rir", "t5-mini-scratch", "scan_length", 1, "0.10") + [""],
        run("seq2seq", "rir", "t5-mini-scratch", "scan_length", 1, "0.30") + ["paper"],
        run("seq2seq", "rir", "t5-mini-scratch", "scan_length", 1, "0.20") + ["zoo"],
        run("seq2seq", "baseline", "t5-mini-scratch", "scan_length", 1, "0.40") + [""],
    ], header=header)
    board = leaderboard.build_leaderboard(runs, ROOT / "benchmarks" / "published.csv", tmp_path / "out")
    em = board[board["metric"] == "exact_match"].set_index(["variant", "ir_definition"])
    assert em["mean"].to_dict() == {("baseline", ""): 40.0, ("rir", "paper"): 30.0, ("rir", "zoo"): 20.0}
    assert em["seeds"].tolist() == [1, 1, 1]  # the zoo's re-run replaced its first row
    assert "rir (paper IRs)" in (tmp_path / "out" / "LEADERBOARD.md").read_text()


def test_a_damaged_published_table_is_one_line(tmp_path, capsys):
    runs = write_runs(tmp_path / "runs.csv", [run("seq2seq", "baseline", "lstm", "scan_length", 1, "0.5")])
    published = tmp_path / "published.csv"
    published.write_text((ROOT / "benchmarks" / "published.csv").read_text().replace(",58.5,", ",58.5%,", 1))
    out = tmp_path / "out"
    assert leaderboard.main(["--runs", str(runs), "--published", str(published), "--out", str(out)]) == 1
    assert capsys.readouterr().err == (f"leaderboard: {published}:2: column 8 (value) is '58.5%', not a "
                                       "percentage\n")
