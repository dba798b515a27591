"""``python -m zoo.formalisms verify``: counts on the mirror, and failures named on a fixture with broken programs."""
import json

from conftest import needs_mirror
from zoo.formalisms.verify import main
from zoo.results import read_rows

N_SCAN_SP_RIGHT = 12180 + 3045 + 4476  # train + dev + test lines of scan_sp/dsl/*_right.json


@needs_mirror
def test_verify_scan_sp_checks_every_program_against_answers_and_grammar(tmp_path, capsys):
    assert main(["verify", "scan_sp_right", "--results", str(tmp_path / "checks.csv")]) == 0
    out = capsys.readouterr().out
    n = N_SCAN_SP_RIGHT
    assert (f"all    parsed {n}/{n}  round-trip {n}/{n}  executed {n}/{n}  matches given answers {n}/{n}  "
            f"interpreted {n}/{n}") in out
    rows = read_rows(tmp_path / "checks.csv")
    assert [r["split"] for r in rows] == ["train", "dev", "test"]
    for row in rows:
        assert row["parsed"] == row["round_trip"] == row["executed"] == row["matches_given_answers"] == row["programs"]
        assert float(row["execute_programs_per_s"]) > 0


def test_verify_names_each_broken_program_and_fails(tmp_path, capsys):
    good = {"question": "jump twice", "program": "i_twice ( i_jump ( ) )", "answer": "I_JUMP I_JUMP"}
    records = {
        "train": [good, {**good, "answer": "I_JUMP"}],  # wrong shipped answer
        "dev": [good, {**good, "program": "i_twice ( i_jump ( )"}],  # unbalanced
        "test": [good, {**good, "program": "i_thrice ( i_jump ( ) )", "answer": "I_JUMP I_JUMP I_JUMP"}],  # not
    }                                                                           # what "jump twice" means
    for part, lines in records.items():
        path = tmp_path / "scan_sp" / "dsl" / f"{part}_simple.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main(["verify", "scan_sp_simple", "--root", str(tmp_path), "--results", ""]) == 1
    out = capsys.readouterr().out
    assert "train  parsed 2/2  round-trip 2/2  executed 2/2  matches given answers 1/2  interpreted 2/2" in out
    assert "dev    parsed 1/2" in out and "expected ')' or ','" in out
    assert "test   parsed 2/2  round-trip 2/2  executed 2/2  matches given answers 2/2  interpreted 1/2" in out
    assert out.count("FAIL ") == 3


def test_verify_unknown_dataset_is_reported_not_raised(capsys):
    assert main(["verify", "no_such_dataset", "--results", ""]) == 1
    assert "unknown dataset 'no_such_dataset'" in capsys.readouterr().err


def test_verify_writes_beside_zoo_results_else_into_the_repository(tmp_path, monkeypatch):
    """Not into ./results of whatever directory it runs in, and not into the repository's under $ZOO_RESULTS."""
    import zoo.results

    good = {"question": "jump twice", "program": "i_twice ( i_jump ( ) )", "answer": "I_JUMP I_JUMP"}
    for part in ("train", "dev", "test"):
        path = tmp_path / "data" / "scan_sp" / "dsl" / f"{part}_simple.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(good) + "\n")
    monkeypatch.setattr(zoo.results, "REPO_ROOT", tmp_path / "repo")  # (never the real repository's results/)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("ZOO_RESULTS", str(tmp_path / "scratch" / "runs.csv"))
    assert main(["verify", "scan_sp_simple", "--root", str(tmp_path / "data")]) == 0
    assert [r["split"] for r in read_rows(tmp_path / "scratch" / "formalisms.csv")] == ["train", "dev", "test"]
    monkeypatch.delenv("ZOO_RESULTS")
    assert main(["verify", "scan_sp_simple", "--root", str(tmp_path / "data")]) == 0
    assert len(read_rows(tmp_path / "repo" / "results" / "formalisms.csv")) == 3
    assert not (tmp_path / "cwd" / "results").exists()


def test_a_damaged_results_table_is_said_before_verifying(tmp_path, capsys):
    results = tmp_path / "formalisms.csv"
    results.write_text("dataset,split,programs\nscan_sp_simple,train\n")
    assert main(["verify", "no_such_dataset", "--results", str(results)]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"{results}:2: 2 cells for the 3 columns of the header\n" and captured.out == ""


def test_verify_an_unreadable_data_file_is_reported_not_raised(capsys, monkeypatch):
    """A data file without read permission is a DataConfigError (datamodules.base.open_text); tests run as root,
    whom permissions do not stop, so the reader raises it here."""
    import zoo.formalisms.verify
    from datamodules import DataConfigError

    def unreadable(name, *args, **kwargs):
        raise DataConfigError(f"/data/{name}.json: cannot read it (Permission denied)")

    monkeypatch.setattr(zoo.formalisms.verify, "verify_dataset", unreadable)
    assert main(["verify", "scan_simple", "--results", ""]) == 1
    assert capsys.readouterr().err == "scan_simple: /data/scan_simple.json: cannot read it (Permission denied)\n"
