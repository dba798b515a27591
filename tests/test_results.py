"""zoo.results: concurrent appends, damaged tables named by file, line and column, rows never lost, run directories."""
import subprocess
import sys
from pathlib import Path

import pytest

import zoo.results as results
from zoo.results import ResultsFileError, append_row, path_for_row, path_from_row, read_rows

REPO = Path(__file__).resolve().parents[1]

HEADER = "model,variant,backbone,data,seed,test_exact_match,run_dir\n"
GOOD = "seq2seq,baseline,bart,scan_simple,1,0.5,runs/a\n"

# Each process appends its rows one at a time, all processes at once: a lock that lets two of them read the file
# together (shared, or none) loses the row of whichever replaces the file first.
APPENDER = """
import sys, time
from zoo.results import append_row
path, worker, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
time.sleep(max(0.0, start - time.time()))
for i in range(20):
    append_row(path, {"worker": worker, "i": i, "note": "x" * 200})
"""


def test_concurrent_appends_keep_every_row(tmp_path):
    import time

    path, start = tmp_path / "runs.csv", time.time() + 0.5
    workers = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(w), str(start)], cwd=REPO)
               for w in range(6)]
    assert all(worker.wait(timeout=120) == 0 for worker in workers)
    rows = read_rows(path)  # (a half-written row would be an error here)
    assert sorted((int(r["worker"]), int(r["i"])) for r in rows) == [(w, i) for w in range(6) for i in range(20)]
    assert all(r["note"] == "x" * 200 for r in rows)


@pytest.mark.parametrize("content, where", [
    (HEADER + GOOD + "seq2seq,baseline,bart,scan_simple,2,0.5,runs/b,extra\n", ":3: 8 cells"),
    (HEADER + "seq2seq,baseline,bart,scan_simple,2\n" + GOOD, ":2: 5 cells"),
    (HEADER + GOOD + "seq2seq,baseline,bart,scan_sim", ":3: 4 cells for 7 columns: the file ends in the middle"),
    (HEADER + 'seq2seq,"baseline,bart,scan_simple,1,0.5,runs/a\n' + GOOD, ":2: column 2 (variant): the quote that"),
    (HEADER + 'seq2seq,"baseline,bart,scan_simple,1,0.5,runs/a\n' + GOOD + 'a,"b",c,d,e,f,g\n',
     ":2: column 2 (variant): the quote that opens this cell does not close at a cell's end; it runs on to line 4"),
    (HEADER + 'seq2seq,baseline,"bart"x,scan_simple,1,0.5,runs/a\n', ":2: column 3 (backbone): the quote that"),
    (HEADER + GOOD.replace("bart", "b\xe4rt"), ":2:19: byte 0xe4 is not UTF-8"),
    (HEADER + GOOD + "\0" * 30, ":3:1: a NUL byte"),  # blocks a crash left unwritten
    ("model,data,,seed\n", ":1: column 3 has no name"),
    ("model,data,seed,data\n", ":1: column 4 repeats the name 'data' of column 2"),
])
def test_damaged_tables_are_named_by_file_line_and_column(tmp_path, content, where):
    path = tmp_path / "runs.csv"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(ResultsFileError) as error:
        read_rows(path)
    assert f"{path}{where}" in str(error.value) and "\n" not in str(error.value)


def test_required_columns_and_cells(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(HEADER.replace("data,", "") + GOOD.replace("scan_simple,", ""))
    with pytest.raises(ResultsFileError, match=r"runs.csv:1: no column 'data'"):
        read_rows(path, required=("model", "data"))
    path.write_text(HEADER + GOOD.replace("scan_simple", ""))
    with pytest.raises(ResultsFileError, match=r"runs.csv:2: column 4 \(data\) is empty"):
        read_rows(path, required=("model", "data"))


def test_sound_tables_read_as_before(tmp_path):
    """A byte-order mark, CRLF line ends, blank lines and a quoted cell that holds a line break are all fine."""
    path = tmp_path / "runs.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + "\n" + GOOD + 'ggd,"a ""b""\nc",lstm,cfq_mcd1,1,0.25,x\n')
                     .replace("\n", "\r\n").encode())
    rows = read_rows(path, required=("model",))
    assert [r["model"] for r in rows] == ["seq2seq", "ggd"] and rows[1]["variant"] == 'a "b"\r\nc'
    assert [r.line for r in rows] == [3, 4]
    assert read_rows(tmp_path / "none.csv") == []


def test_append_to_a_damaged_table_keeps_the_row_beside_it(tmp_path):
    path = tmp_path / "runs.csv"
    damaged = HEADER + GOOD + "seq2seq,baseline,bart,scan_simple,2,0.5,runs/b,extra\n"
    path.write_text(damaged)
    row = {"model": "ggd", "variant": "ggd", "backbone": "lstm", "data": "cfq_mcd1", "seed": 3, "test_exact_match": 0.9}
    with pytest.raises(ResultsFileError) as error:
        append_row(path, row)
    message = str(error.value)
    assert message.startswith(f"{path}:3: 8 cells") and "\n" not in message
    [aside] = [p for p in tmp_path.iterdir() if p.name not in ("runs.csv", "runs.csv.lock")]
    assert str(aside) in message
    assert path.read_text() == damaged  # untouched
    assert read_rows(aside) == [{k: str(v) for k, v in row.items()}]


def test_run_directories_are_recorded_relative_to_the_repository(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)
    assert path_for_row(tmp_path / "runs" / "ggd-ggd" / "seed1") == "runs/ggd-ggd/seed1"
    assert path_for_row("/elsewhere/runs/x") == "/elsewhere/runs/x"  # $ZOO_RUNS outside the repository
    assert path_from_row("runs/ggd-ggd/seed1") == tmp_path / "runs" / "ggd-ggd" / "seed1"
    assert path_from_row("/work/main/runs/x") == Path("/work/main/runs/x")  # rows written before: absolute


def test_results_tables_follow_zoo_results(tmp_path, monkeypatch):
    monkeypatch.delenv("ZOO_RESULTS", raising=False)
    assert results.runs_file() == results.REPO_ROOT / "results" / "runs.csv"
    monkeypatch.setenv("ZOO_RESULTS", str(tmp_path / "scratch" / "runs.csv"))
    assert results.runs_file() == tmp_path / "scratch" / "runs.csv"
    assert results.results_table("formalisms.csv") == tmp_path / "scratch" / "formalisms.csv"


def test_a_seed_has_one_spelling(tmp_path):
    """"1.0" (a seed column that pandas read as floats, for a blank among it) is seed "1": a row appended for seed 1
    replaces it, as the rows of a re-run do."""
    table = tmp_path / "recall.csv"
    table.write_text("data,seed,recall\ngeo,1.0,0.5\ngeo,2,0.6\ngeo,,0.7\ngeo, 3.5,0.8\n")
    assert [row["seed"] for row in read_rows(table)] == ["1", "2", "", " 3.5"]
    append_row(table, {"data": "geo", "seed": 1, "recall": 0.9}, replacing=("data", "seed"))
    assert [(row["seed"], row["recall"]) for row in read_rows(table)] == [("2", "0.6"), ("", "0.7"), (" 3.5", "0.8"),
                                                                          ("1", "0.9")]



def test_a_variable_set_but_empty_is_unset_for_runs_and_readers_alike(tmp_path, monkeypatch):
    """``ZOO_RESULTS= python benchmarks/run.py ...`` appended its row inside the run directory while every reader
    (leaderboard, ir_table, python -m zoo.*) read results/runs.csv; ``ZOO_RUNS=`` put run directories under /."""
    from hydra import compose, initialize_config_dir

    from conftest import REPO
    from zoo.train import results_path

    def composed():
        with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
            return compose("run", overrides=["model=seq2seq", "data=scan_simple", "retrieval=gandr"],
                           return_hydra_config=True)

    monkeypatch.setenv("ZOO_RESULTS", "")
    monkeypatch.setenv("ZOO_RUNS", "")
    cfg = composed()
    assert results_path(cfg, tmp_path / "run") == results.runs_file() == results.REPO_ROOT / "results" / "runs.csv"
    assert (cfg.hydra.run.dir, cfg.hydra.sweep.dir, cfg.ir_stages_dir, cfg.retrieval.stages_dir) == (
        "runs/seq2seq-gandr-k4-a0.5/scan_simple/seed1", "runs", "runs/ir-stages", "runs/retrieval-stages")
    monkeypatch.setenv("ZOO_RESULTS", str(tmp_path / "runs.csv"))
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    cfg = composed()
    assert results_path(cfg, tmp_path / "run") == results.runs_file() == tmp_path / "runs.csv"
    assert cfg.ir_stages_dir == str(tmp_path / "runs" / "ir-stages")


def test_merge_of_a_table_without_run_columns_compares_whole_rows(tmp_path):
    """A GPU machine's ggd_speed.csv row joins the speed table once."""
    target, source = tmp_path / "ggd_speed.csv", tmp_path / "device.csv"
    append_row(target, {"backbone": "bilstm", "hardware": "AMD EPYC", "examples_per_s": "1192.5"})
    append_row(source, {"backbone": "bilstm", "hardware": "1x NVIDIA H200", "examples_per_s": "16468.5"})
    assert results.merge_rows(source, target) == 1
    assert results.merge_rows(source, target) == 0
    assert [r["hardware"] for r in read_rows(target)] == ["AMD EPYC", "1x NVIDIA H200"]


def test_merge_appends_the_rows_a_table_lacks_once(tmp_path):
    """A GPU machine's results file, copied back, joins the runs table: new runs once, known runs never again."""
    run = {"time": "2026-12-02T10:00:00+00:00", "git_commit": "abc", "model": "ggd", "variant": "ggd",
           "backbone": "bilstm", "data": "cfq_mcd1", "seed": "1", "run_dir": "/tmp/zoo-runs/ggd/seed1"}
    target, source = tmp_path / "runs.csv", tmp_path / "device.csv"
    append_row(target, {**run, "note": "measured here"})
    append_row(source, {**run, "hardware": "NVIDIA H200"})  # the same run: not appended again
    append_row(source, {**run, "seed": "2", "run_dir": "/tmp/zoo-runs/ggd/seed2", "hardware": "NVIDIA H200"})
    assert results.merge_rows(source, target) == 1
    assert results.merge_rows(source, target) == 0
    rows = read_rows(target)
    assert [(r["seed"], r["note"], r["hardware"]) for r in rows] == [("1", "measured here", ""),
                                                                   ("2", "", "NVIDIA H200")]
    command = [sys.executable, str(REPO / "benchmarks" / "merge_results.py"), str(source), str(target)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and done.stdout.startswith("0 rows of")
    source.write_text("time,model\n2026,ggd,extra\n")
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 1 and done.stderr.startswith(f"error: {source}:1: no column 'variant'")
