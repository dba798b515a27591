"""zoo.load and python -m zoo.parse (zoo/inference.py, zoo/parse.py) on debug=smoke runs: a loaded run parses its own
test utterances into the predictions its test saved, executes them as scoring did, and refuses what it cannot load
or encode, naming it."""
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

import zoo
import zoo.inference
from conftest import REPO, compose_run, needs_mirror
from datamodules import load_world, read_splits
from zoo.formalisms import FormalismError, get_formalism
from zoo.inference import (LoadError, NotExecutableError, UnencodableUtteranceError, normalize, chosen_thresholds)
from zoo.parse import jsonable, main, span_tree_lines
from zoo.registry import get_dataset
from zoo.results import read_rows
from zoo.retrieval import Retriever, with_exemplars
from zoo.launch import run

_spec = importlib.util.spec_from_file_location("dev_slice", REPO / "benchmarks" / "dev_slice.py")
dev_slice = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dev_slice)


def test_normalize_splits_end_punctuation_and_lower_cases_on_request():
    assert normalize("  How many rivers are in Texas?  ", lowercase=True) == "how many rivers are in texas ?"
    assert normalize("Who directed M0, M1 and M2") == "Who directed M0 , M1 and M2"  # CFQ keeps its capitals
    # a point inside a word or number, and apostrophes, stay: the datasets disagree on them (state's / ' s)
    assert normalize("is 3.5 in the u.s. state's list.") == "is 3.5 in the u.s . state's list ."


def test_span_tree_lines_nest_by_span():
    words = "how many rivers in texas".split()
    spans = [[0, 4, "join"], [0, 1, "count"], [2, 4, "join"], [2, 2, "river"], [4, 4, "stateid ( 'texas' )"]]
    assert span_tree_lines(spans, words) == ["join  [how many rivers in texas]", "  count  [how many]",
                                             "  join  [rivers in texas]", "    river  [rivers]",
                                             "    stateid ( 'texas' )  [texas]"]


def test_import_zoo_stays_light():
    done = subprocess.run([sys.executable, "-c", "import sys, zoo; print('torch' in sys.modules, callable(zoo.load))"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.stdout.split() == ["False", "True"], done.stderr


# ----- smoke runs, one per kind, trained once for the module ---------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def syntax_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:  # GGD's spaCy analyses, away from ~/.cache
        patch.setenv("ZOO_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


def smoke_run(root, name, *overrides):
    run_dir = root / name
    run(compose_run("debug=smoke", f"results_file={root / 'runs.csv'}", f"ir_stages_dir={root / 'ir-stages'}",
                    f"retrieval.stages_dir={root / 'retrieval-stages'}", *overrides), run_dir)
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def span_run(runs):
    return smoke_run(runs, "span", "model=span_cky", "data=geo_funql_iid")


@pytest.fixture(scope="module")
def seq2seq_run(runs):
    return smoke_run(runs, "seq2seq", "model=seq2seq", "data=geo_funql_iid")


@pytest.fixture(scope="module")
def ggd_run(runs):
    return smoke_run(runs, "ggd", "model=ggd", "data=cfq_mcd1")


def predictions(run_dir):
    return [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]


@needs_mirror
def test_lowercase_hint_holds_for_the_data():
    for name in ("scan_simple", "scan_sp_simple", "geo_funql_iid", "geo_sql_iid", "atis_sql_iid"):
        assert get_dataset(name).extra["lowercase"], name
    for name in ("scan_simple", "geo_funql_iid", "geo_sql_iid"):  # (the small ones read here)
        assert all(e.utterance == e.utterance.lower() for e in read_splits(name)["train"]), name
    for name in ("scholar_sql_iid", "cfq_mcd1", "cogs"):
        assert not get_dataset(name).extra.get("lowercase"), name
    assert any(e.utterance != e.utterance.lower() for e in read_splits("scholar_sql_iid")["train"])


@needs_mirror
def test_span_cky_run_parses_and_executes_its_test_set_as_its_test_did(span_run):
    rows = predictions(span_run)
    parser = zoo.load(span_run)
    assert parser.kind == "span_cky" and parser.data == "geo_funql_iid" and parser.executable
    parses = parser.parse_with_details([row["utterance"] for row in rows])
    assert [p.program for p in parses] == [row["prediction"] for row in rows]
    assert len({row["prediction"] for row in rows}) > 1  # (the check means something: outputs differ)
    assert [p.details["span_tree"] for p in parses] == [row["span_tree"] for row in rows]
    # denotations as scoring computed them: a prediction runs to its gold's denotation exactly where it was scored so
    funql, world = get_formalism("funql"), load_world("geo_funql_iid")
    for row, denotation in zip(rows, parser.execute([p.program for p in parses])):
        same = not isinstance(denotation, FormalismError) and funql.same_denotation(
            denotation, funql.execute(row["gold"], world))
        assert same == row["denotation_correct"]
    texas_rivers = "answer ( count ( river ( loc_2 ( stateid ( 'texas' ) ) ) ) )"
    assert parser.execute([texas_rivers, ""])[0] == frozenset({5.0})  # geobase: canadian, pecos, red, rio grande,
    assert "empty program" in str(parser.execute([texas_rivers, ""])[1])  # washita; a bad program: its error


@needs_mirror
def test_seq2seq_run_loads_from_its_directory_or_its_checkpoint(seq2seq_run, tmp_path):
    rows = predictions(seq2seq_run)
    utterances = [row["utterance"] for row in rows]
    assert zoo.load(seq2seq_run).parse(utterances) == [row["prediction"] for row in rows]
    checkpoint = seq2seq_run / "checkpoints" / "best.ckpt"
    assert zoo.load(checkpoint).parse(utterances[:2]) == [row["prediction"] for row in rows[:2]]
    # a checkpoint that does not record its dataset parses; it executes once data= names it
    bare = torch.load(checkpoint, weights_only=False)
    del bare["datamodule_hyper_parameters"]
    torch.save(bare, tmp_path / "bare.ckpt")
    with pytest.raises(NotExecutableError, match="pass data=<name>"):
        zoo.load(tmp_path / "bare.ckpt").execute(["answer ( stateid ( 'texas' ) )"])
    named = zoo.load(tmp_path / "bare.ckpt", data="geo_funql_iid")
    assert named.execute(["answer ( capital_1 ( stateid ( 'texas' ) ) )"]) == [frozenset({("city", "austin", "tx")})]
    with pytest.raises(LoadError, match="trained on data=geo_funql_iid, not data=scan_simple"):
        zoo.load(checkpoint, data="scan_simple")


@needs_mirror
def test_unencodable_utterances_are_refused_by_name_before_any_is_parsed(seq2seq_run, span_run):
    parser = zoo.load(seq2seq_run)
    with pytest.raises(UnencodableUtteranceError, match="cannot parse '   ': it is empty"):
        parser.parse(["what is the capital of texas ?", "   "])
    too_long = " ".join(["texas"] * 600)
    with pytest.raises(UnencodableUtteranceError, match="601 tokens, more than the model's max_source_length of 512"):
        parser.parse([too_long])
    with pytest.raises(UnencodableUtteranceError, match="cannot parse '3': not a string but int"):
        parser.parse([3])
    with pytest.raises(TypeError, match="not one string"):
        parser.parse("what is the capital of texas ?")
    assert isinstance(UnencodableUtteranceError("x", "y"), ValueError)
    assert zoo.load(span_run).parse([]) == []


@needs_mirror
def test_ggd_run_parses_as_its_test_did_with_its_query_graphs(ggd_run, tmp_path):
    rows = predictions(ggd_run)
    parser = zoo.load(ggd_run)
    parses = parser.parse_with_details([row["utterance"] for row in rows])
    assert [p.program for p in parses] == [row["prediction"] for row in rows]
    sparql = get_formalism("cfq_sparql")
    for parse in parses:  # the graph is the query's: its edges and attributes are the query's triples
        graph, query = parse.details["query_graph"], sparql.parse(parse.program)
        assert {tuple(edge[:3]) for edge in graph["edges"]} | {tuple(a[:3]) for a in graph["attributes"]} == {
            (t.subject, t.relation, t.object) for t in query.triples}
        assert graph["count"] == (query.query_type == "count")
        assert all(0.0 <= item[-1] <= 1.0 for item in graph["edges"] + graph["attributes"])
    assert not parser.executable
    with pytest.raises(NotExecutableError, match="cfq_mcd1: its cfq_sparql programs do not execute"):
        parser.execute([rows[0]["prediction"]])
    with pytest.raises(UnencodableUtteranceError, match=r"'Who directed M99'.*M99 is beyond the M0..M9"):
        parser.parse(["Who directed M0", "Who directed M99"])

    # the thresholds its test chose on dev, which the checkpoint does not keep: the latest logs', else the row's
    assert chosen_thresholds(ggd_run) == (0.5, 0.5)
    copy = tmp_path / "ggd"
    shutil.copytree(ggd_run, copy)
    (copy / "logs" / "version_1").mkdir()
    (copy / "logs" / "version_1" / "metrics.csv").write_text(
        "epoch,step,test/attribute_threshold,test/threshold\n0,4,0.25,0.35\n")
    assert chosen_thresholds(copy) == (0.35, 0.25) and zoo.load(copy).model.thresholds == (0.35, 0.25)
    shutil.rmtree(copy / "logs")
    (copy / "runs.csv").write_text(f"run_dir,test_threshold,test_attribute_threshold\n{copy},0.1,0.2\n")
    assert chosen_thresholds(copy) == (0.1, 0.2)


@needs_mirror
def test_ir_pipeline_run_chains_its_stages_as_its_test_did(runs, monkeypatch):
    run_dir = smoke_run(runs, "pipeline", "model=seq2seq", "data=scan_length", "ir=lir_ind+rir")
    rows = predictions(run_dir)
    parser = zoo.load(run_dir)
    assert parser.kind == "ir=lir_ind+rir" and parser.data == "scan_length"
    parses = parser.parse_with_details([row["utterance"] for row in rows])
    assert [p.program for p in parses] == [row["prediction"] for row in rows]
    for parse, row in zip(parses, rows):
        assert parse.details == {k: v for k, v in row.items()
                                 if k.startswith("stage") or k == "error"}  # each stage's output, and why no program

    # a run from before ir.json named its stages: they come from its results row
    recorded = json.loads((run_dir / "ir.json").read_text())
    stage_dirs = [runs / "ir-stages" / "scan_length" / "seed1" / d.rsplit("/", 1)[-1] for d in recorded["stage_dirs"]]
    (run_dir / "ir.json").write_text(json.dumps({"formalism": "scan", "rir_short_names": None}))
    with pytest.raises(LoadError, match="does not name the pipeline's stages"):
        zoo.load(run_dir)
    monkeypatch.setenv("ZOO_RESULTS", str(runs / "runs.csv"))
    assert zoo.load(run_dir).parse([rows[0]["utterance"]]) == [rows[0]["prediction"]]

    # a stage alone is refused, as a directory and as a checkpoint
    for stage in (stage_dirs[0], stage_dirs[0] / "checkpoints" / "best.ckpt"):
        with pytest.raises(LoadError, match="is the stage 'x_to_rir' of a multi-stage run"):
            zoo.load(stage)


@needs_mirror
def test_retrieval_runs_retrieve_exemplars_as_their_test_did(runs, monkeypatch):
    gandr = smoke_run(runs, "gandr", "model=seq2seq", "data=geo_sql_iid", "retrieval=gandr")
    inputs = smoke_run(runs, "input", "model=seq2seq", "data=geo_sql_iid", "retrieval=input")  # (stage 1: shared)
    test = read_splits("geo_sql_iid")["test"][:8]  # (debug=smoke: the first 8)
    for run_dir, kind in ((gandr, "retrieval=gandr"), (inputs, "retrieval=input")):
        rows = predictions(run_dir)
        parser = zoo.load(run_dir)
        assert parser.kind == kind
        parses = parser.parse_with_details([e.utterance for e in test])
        assert [p.program for p in parses] == [row["prediction"] for row in rows]
        # what the last stage read: the utterance and its exemplars, as in the test
        assert [p.details["input"] for p in parses] == [row["utterance"] for row in rows]
        if kind == "retrieval=gandr":
            assert [p.details["preliminary"] for p in parses] == [row["preliminary"] for row in rows]

    # GandR's second stage ranks exemplars by the first stage's prediction too: given an oracle one, the exemplars
    # are those of hybrid relevance, not of the utterance alone (the smoke model's own predictions are all alike)
    parser, train = zoo.load(gandr), read_splits("geo_sql_iid")["train"][:32]
    first_stage, real_predict = parser.models[0], zoo.inference.predict
    monkeypatch.setattr(zoo.inference, "predict", lambda model, sources, batch_size: (
        [oracle] * len(sources) if model is first_stage else real_predict(model, sources, batch_size)))
    retriever = Retriever(train, get_formalism("sql"))
    differ = 0
    for example in test:
        oracle = example.program
        [parse] = parser.parse_with_details([example.utterance])
        hybrid = retriever.ranked([example.utterance], [oracle], 0.5, depth=4)[0]
        differ += hybrid != retriever.ranked([example.utterance], depth=4)[0]
        assert parse.details["preliminary"] == oracle
        assert parse.details["input"] == with_exemplars(example, [train[j] for j in hybrid]).utterance
    assert differ  # (the check means something: the two relevances disagree somewhere)


@needs_mirror
def test_paths_that_are_no_run_are_refused_by_name(tmp_path):
    with pytest.raises(LoadError, match=f"{tmp_path / 'nothing'}: no such run directory or checkpoint"):
        zoo.load(tmp_path / "nothing")
    with pytest.raises(LoadError, match="not a run directory of the zoo"):
        zoo.load(tmp_path)
    (tmp_path / "random.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="random.ckpt: not a readable checkpoint"):
        zoo.load(tmp_path / "random.ckpt")


# ----- the command line ----------------------------------------------------------------------------------------
@needs_mirror
def test_cli_prints_program_denotation_and_span_tree(span_run, capsys, monkeypatch):
    utterance = "how many rivers are in Texas?"
    [expected] = zoo.load(span_run).parse_with_details([utterance])
    main([str(span_run), utterance])
    out = capsys.readouterr().out
    assert out.startswith(f"{utterance}\n  read as:    how many rivers are in texas ?\n"
                          f"  program:    {expected.program or '(none)'}\n  denotation: ")
    assert "  span tree:\n" in out

    monkeypatch.setattr(sys, "stdin", io.StringIO("what is the capital of texas ?\n\nhow many rivers are in texas ?\n"))
    main([str(span_run), "--json", "-"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["utterance"] for line in lines] == ["what is the capital of texas ?", "how many rivers are in texas ?"]
    parser = zoo.load(span_run)
    for line in lines:
        assert {"input", "program", "span_tree"} <= set(line) and ("denotation" in line or "execution_error" in line)
        if "denotation" in line:
            [denotation] = parser.execute([line["program"]])
            assert line["denotation"] == sorted((list(x) if isinstance(x, tuple) else x for x in denotation), key=repr)


def test_denotations_as_json():
    from zoo.formalisms.sql import RowMultiset

    assert jsonable(frozenset({("river", "red"), ("river", "pecos")})) == [["river", "pecos"], ["river", "red"]]
    assert jsonable(frozenset({5.0})) == [5.0]
    assert jsonable(RowMultiset([("austin",), ("dallas",), ("austin",)])) == [["austin"], ["austin"], ["dallas"]]
    assert jsonable(("I_JUMP", "I_WALK")) == ["I_JUMP", "I_WALK"]


@needs_mirror
def test_cli_says_what_is_wrong_in_one_line(span_run, tmp_path):
    with pytest.raises(SystemExit, match=f"error: {tmp_path / 'none'}: no such run directory or checkpoint"):
        main([str(tmp_path / "none"), "how many rivers are in texas ?"])
    with pytest.raises(SystemExit, match="error: cannot parse '': it is empty"):
        main([str(span_run), "how many rivers are in texas ?", ""])


def test_dev_slice_counts_what_wrong_answers_miss_and_add():
    gold = "SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . ?x0 film.editor.film M1 . ?x0 film.writer.film M1 }"
    predictions = [gold,  # right: counts nowhere
                   "SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . ?x0 film.editor.film M1 }",
                   "SELECT DISTINCT ?x0 WHERE { ?x0 film.editor.film M1 . ?x0 film.producer.film M1 }",
                   "no query here"]  # unparsable: wrong, and it lacks everything
    rights = [True, False, False, False]
    missed, added = dev_slice.structure_differences(predictions, [gold] * 4, rights, get_formalism("cfq_sparql"))
    assert missed == {"film.writer.film": 3, "people.person": 2, "a": 2, "DISTINCT": 1, "film.editor.film": 1}
    assert added == {"film.producer.film": 1, "no": 1, "query": 1, "here": 1}
    assert dev_slice.most_common(missed, 1) == "film.writer.film 3"


@needs_mirror
def test_dev_slice_scores_a_run_on_the_dev_questions_a_pattern_matches(ggd_run, runs, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_RESULTS", str(runs / "runs.csv"))  # where the smoke run's row is
    pattern, out = "^Who was M[0-9] ' s cinematographer", tmp_path / "dev_slices.csv"
    splits = read_splits("cfq_mcd1")
    dev = [e for e in splits["dev"] if re.match(pattern, e.utterance)]
    sparql = get_formalism("cfq_sparql")
    right = sum(sparql.canonical(p) == sparql.canonical(e.program)
                for p, e in zip(zoo.load(ggd_run).parse([e.utterance for e in dev]), dev))
    for _ in range(2):  # a second measurement of the same run and pattern replaces the first
        assert dev_slice.main([pattern, str(ggd_run), "--out", str(out)]) == 0
    (row,) = read_rows(out)
    assert (row["pattern"], int(row["n_dev"]), int(row["n_train"])) == (pattern, len(dev), 0)  # withheld in training
    assert float(row["dev_exact_match"]) == pytest.approx(right / len(dev), abs=1e-6)
    assert row["model"] == "ggd" and row["data"] == "cfq_mcd1"
    # --ensemble: the run averaged with itself is one more row, with the run's own exact match
    assert dev_slice.main(["--ensemble", pattern, str(ggd_run), str(ggd_run), "--out", str(out)]) == 0
    alone, averaged = read_rows(out)
    assert averaged["variant"] == alone["variant"] + "+ensemble"
    assert averaged["seed"] == f"{alone['seed']}+{alone['seed']}"
    assert averaged["run_dir"] == f"{alone['run_dir']} {alone['run_dir']}"
    assert averaged["dev_exact_match"] == alone["dev_exact_match"]
    with pytest.raises(SystemExit, match="no dev question"):
        dev_slice.main(["^no such question$", str(ggd_run), "--out", str(out)])
