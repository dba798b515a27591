"""GandR (zoo/retrieval.py): TF-IDF relevance, self-exclusion, the rank sampler, template recall, the structure of
programs, low-resource subsamples, bad settings, and the two-stage pipeline end to end on debug=smoke."""
import json
from collections import Counter

import numpy as np
import pytest

from conftest import compose_run, needs_mirror
from datamodules import ParsingDataModule
from zoo import split_variant
from zoo.formalisms import FormalismError, get_formalism
from zoo.results import read_rows
from zoo.retrieval import (Exemplars, Retriever, RetrievalError, SampledExemplars, check_settings, fold_parts,
                           gandr_stage_directory, record_template_recall, sample_ranks, template_recall,
                           with_exemplars)
from zoo.launch import run
from zoo.train import RunConfigError
from zoo.types import Example

SQL = get_formalism("sql")

# A hand-made pool: utterances share words in known ways, programs share tables and columns in known ways.
POOL = [
    Example("largest city in texas", 'SELECT CITY.NAME FROM CITY WHERE CITY.STATE = "texas" ;'),
    Example("largest river in texas", 'SELECT RIVER.NAME FROM RIVER WHERE RIVER.STATE = "texas" ;'),
    Example("population of ohio", 'SELECT STATE.POPULATION FROM STATE WHERE STATE.NAME = "ohio" ;'),
    Example("rivers crossing ohio", 'SELECT RIVER.NAME FROM RIVER WHERE RIVER.STATE = "ohio" ;'),
]


def test_input_relevance_ranks_by_shared_rare_words():
    retriever = Retriever(POOL)
    # "largest city" is shared with example 0 only (two words, "largest" also in 1); "in" and "texas" with 0 and 1
    assert retriever.ranked(["largest city in texas today"], depth=4)[0][:2] == [0, 1]
    # "ohio" is in examples 2 and 3; "population" (rare) only in 2; examples 0 and 1 share nothing: tie, pool order
    assert retriever.ranked(["population of ohio"])[0] == [2, 3, 0, 1]
    scores = retriever.relevance(["population of ohio"])[0]
    assert scores[2] == pytest.approx(1.0) and scores[0] == scores[1] == 0.0


def test_output_relevance_compares_structure_and_alpha_mixes_the_two():
    retriever = Retriever(POOL, SQL)
    prediction = 'SELECT RIVER.NAME FROM RIVER WHERE RIVER.STATE = "somewhere" ;'  # values do not count
    query = ["what flows through ohio"]
    # input: only "ohio" matches, in 2 and 3 (a tie, pool order); output: 1 and 3 have the river query's structure
    assert retriever.ranked(query)[0][:2] == [2, 3]
    assert retriever.ranked(query, [prediction], alpha=1.0)[0][:2] == [1, 3]
    outputs = retriever.relevance(query, [prediction], alpha=1.0)[0]
    assert outputs[1] == pytest.approx(1.0) and outputs[0] == pytest.approx(outputs[2]) and outputs[0] < 0.5
    mixed = retriever.relevance(query, [prediction], alpha=0.5)[0]
    np.testing.assert_allclose(mixed, 0.5 * retriever.relevance(query)[0] + 0.5 * outputs)
    # the hybrid puts 3 first: the only one with both a similar input and a similar output
    assert retriever.ranked(query, [prediction], alpha=0.5)[0] == [3, 1, 2, 0]


def test_training_examples_never_retrieve_themselves():
    pool = POOL + [Example(e.utterance, e.program) for e in POOL]  # duplicates may be retrieved, never oneself
    sampled = Exemplars(pool, None, k=3, p=0.5, seed=0)("train", pool)
    assert isinstance(sampled, SampledExemplars) and len(sampled) == len(pool)
    for index in range(len(pool)):
        assert index not in sampled.ranked[index] and len(sampled.ranked[index]) == len(pool) - 1
        assert sampled.ranked[index][0] == (index + 4) % 8  # its duplicate is the most relevant
    augmented = sampled[0]
    assert augmented.program == pool[0].program and augmented.utterance.startswith("largest city in texas || ")
    assert augmented.utterance.count(" || ") == 3 and augmented.utterance.count(" & ") == 3


def test_augmented_input_follows_the_paper():
    example = with_exemplars(Example("x", "y"), [Example("a", "b"), Example("c", "d")])
    assert example.utterance == "x || a & b || c & d" and example.program == "y"


def test_rank_sampler_follows_the_geometric_distribution():
    rng, p, n = np.random.default_rng(0), 0.3, 12
    draws = Counter(sample_ranks(rng, n, 1, p)[0] for _ in range(20000))
    expected = p * (1 - p) ** np.arange(n)
    expected /= expected.sum()
    observed = np.array([draws[r] for r in range(n)]) / 20000
    np.testing.assert_allclose(observed, expected, atol=0.01)
    for _ in range(200):  # k distinct ranks, in increasing order
        ranks = sample_ranks(rng, 5, 4, 0.5)
        assert ranks == sorted(set(ranks)) and len(ranks) == 4 and max(ranks) < 5
    assert sample_ranks(rng, 2, 4, 0.5) == [0, 1]  # fewer candidates than k: all of them


def test_template_recall_on_a_tiny_fixture():
    queries = [Example("q0", 'SELECT CITY.NAME FROM CITY WHERE CITY.STATE = "utah" ;'),  # template of 0
               Example("q1", 'SELECT LAKE.NAME FROM LAKE ;')]  # no template in the pool
    ranked = [[1, 0], [0, 1]]
    assert template_recall(ranked, queries, POOL, SQL, k=1) == 0.0  # q0's top-1 is example 1 (a river)
    assert template_recall(ranked, queries, POOL, SQL, k=2) == 0.5  # within the top 2: example 0


def test_program_structure_and_templates_per_formalism():
    sql = 'SELECT CITYalias0.CITY_NAME FROM CITY AS CITYalias0 WHERE CITYalias0.STATE_NAME = "state_name0" AND x > year0 ;'
    assert SQL.structure(sql) == ["SELECT", "CITY.CITY_NAME", "FROM", "CITY", "AS", "CITY", "WHERE",
                                  "CITY.STATE_NAME", "=", "AND", "x", ">"]
    assert SQL.template(sql).endswith("= VALUE AND x > VALUE ;")
    funql = get_formalism("funql")
    assert funql.structure("answer ( population_1 ( stateid ( 'texas' ) ) )") == ["answer", "population_1", "stateid"]
    assert funql.template("answer ( cityid ( 'austin' , tx ) )") == "answer ( cityid ( VALUE , VALUE ) )"
    cfq = get_formalism("cfq_sparql")
    query = "SELECT DISTINCT ?x0 WHERE { ?x0 a film.actor . ?x0 film.actor.film/ns:film.performance.film M0 }"
    assert cfq.structure(query) == ["DISTINCT", "a", "film.actor", "film.actor.film/ns:film.performance.film"]
    assert cfq.template(query) == cfq.template(query.replace("M0", "M3"))
    assert "?x0" in cfq.template(query) and "M0" not in cfq.template(query)
    assert get_formalism("scan").structure("I_JUMP I_WALK") == ["I_JUMP", "I_WALK"]
    cogs = get_formalism("cogs")
    logical_form = "* girl ( x _ 3 ) ; roll . agent ( x _ 1 , Evelyn ) AND roll . theme ( x _ 1 , x _ 3 )"
    assert cogs.structure(logical_form) == ["girl", "roll.agent", "roll.theme"]
    assert "Evelyn" not in cogs.template(logical_form)
    # malformed predictions still have a structure (GandR retrieves with them)
    assert SQL.structure('SELECT CITY.NAME FROM ( "unclosed') == ["SELECT", "CITY.NAME", "FROM", "unclosed"]
    assert funql.structure("answer ( state (") == ["answer", "state"]
    with pytest.raises(FormalismError, match="gives no structure"):
        get_formalism("tokens").structure("a b")


def _settings(**changes):
    settings = compose_run("retrieval=gandr").retrieval
    for key, value in changes.items():
        settings[key] = value
    return settings


def test_bad_settings_fail_with_the_option_named():
    train = POOL * 3  # 12 examples
    check_settings(_settings(), train, SQL, "d")
    with pytest.raises(RetrievalError, match=r"retrieval.k=12, but d has 12 training examples .* at most 11"):
        check_settings(_settings(k=12), train, SQL, "d")
    with pytest.raises(RetrievalError, match=r"retrieval.alpha=1.5: .* in \[0, 1\]"):
        check_settings(_settings(alpha=1.5), train, SQL, "d")
    with pytest.raises(RetrievalError, match=r"retrieval.alpha=-0.1"):
        check_settings(_settings(alpha=-0.1), train, SQL, "d")
    with pytest.raises(RetrievalError, match="retrieval=gandr on d: formalism 'tokens' gives no structure"):
        check_settings(_settings(), train, get_formalism("tokens"), "d")
    check_settings(_settings(name="input"), train, get_formalism("tokens"), "d")  # input similarity needs none
    with pytest.raises(RetrievalError, match="retrieval.folds=2: a fold model of d would train on 6 examples"):
        check_settings(_settings(k=6, folds=2), train, SQL, "d")
    check_settings(_settings(k=6), train, SQL, "d")  # without fold models (§2.1, the default) k=6 fits
    with pytest.raises(RetrievalError, match="retrieval='bm25': choose one of none, input, gandr"):
        check_settings(_settings(name="bm25"), train, SQL, "d")


def test_fold_parts_cover_the_training_set_once():
    parts = fold_parts(11, 3, seed=1)
    assert sorted(i for part in parts for i in part) == list(range(11))
    assert [len(p) for p in parts] == [4, 4, 3] and parts == fold_parts(11, 3, seed=1)


def test_an_alpha_names_one_stage_directory_however_it_is_written(tmp_path):
    def directory(alpha):
        cfg = compose_run("retrieval=gandr", f"retrieval.alpha={alpha}")
        return gandr_stage_directory(cfg, tmp_path, cfg.retrieval)

    assert directory("1") == directory("1.0") != directory("0.5")
    assert directory("0") == directory("0.0")


def test_subsample_variants_and_their_inverse():
    cfg = compose_run("retrieval=gandr", "retrieval.alpha=0.25", "data.train_limit=1000", "data.limit_eval=200")
    assert cfg.model.variant == "gandr-k4-a0.25" and cfg.subsample == "-sample1000-eval200"
    assert split_variant("gandr-k4-a0.25-sample1000-eval200") == ("gandr-k4-a0.25", "sample1000-eval200")
    assert split_variant("lir_d+rir-train20000-eval2000") == ("lir_d+rir", "train20000-eval2000")
    assert compose_run("retrieval=input").model.variant == "input_tfidf-k4"
    assert compose_run("data.train_limit=5", "data.train_limit_seed=2").subsample == "-sample5s2"


@needs_mirror
def test_train_limit_is_a_seeded_subsample_in_source_order():
    full = ParsingDataModule("geo_funql_iid")
    full.setup()
    one, again, other = (ParsingDataModule("geo_funql_iid", train_limit=50, train_limit_seed=seed) for seed in (0, 0, 1))
    for datamodule in (one, again, other):
        datamodule.setup()
    assert len(one.train) == 50 and one.train == again.train and one.train != other.train
    where = {id(e): i for i, e in enumerate(full.train)}  # the data has duplicate examples: find them by identity
    positions = [where[id(e)] for e in one.train]
    assert positions == sorted(positions) and positions != list(range(50))
    assert one.test == full.test
    with pytest.raises(ValueError, match=r"data.train_limit=100000, but geo_funql_iid has only 540"):
        ParsingDataModule("geo_funql_iid", train_limit=100000).setup()
    with pytest.raises(ValueError, match="do not combine"):
        ParsingDataModule("geo_funql_iid", train_limit=10, limit_train=10)


def smoke(tmp_path, *overrides):
    return compose_run("debug=smoke", f"results_file={tmp_path / 'results' / 'runs.csv'}",
                       f"retrieval.stages_dir={tmp_path / 'stages'}", *overrides)


@needs_mirror
def test_bad_settings_fail_before_training(tmp_path):
    with pytest.raises(RetrievalError, match="retrieval.k=40, but geo_sql_iid has 32 training examples"):
        run(smoke(tmp_path, "data=geo_sql_iid", "retrieval=gandr", "retrieval.k=40"), tmp_path / "run")
    with pytest.raises(RetrievalError, match=r"retrieval.alpha=2.0"):
        run(smoke(tmp_path, "data=geo_sql_iid", "retrieval=gandr", "retrieval.alpha=2.0"), tmp_path / "run")
    with pytest.raises(RunConfigError, match="do not combine"):
        run(smoke(tmp_path, "data=geo_sql_iid", "retrieval=input", "ir=rir"), tmp_path / "run")
    with pytest.raises(RunConfigError, match="use model=seq2seq"):
        run(smoke(tmp_path, "model=span_cky", "data=scan_sp_simple", "retrieval=input"), tmp_path / "run")
    recall = tmp_path / "results" / "template_recall.csv"  # GandR appends to it between its stages
    recall.parent.mkdir(exist_ok=True)
    recall.write_text("data,k\ngeo_sql_iid,4,extra\n")
    with pytest.raises(RunConfigError, match=r"template_recall.csv:2: 3 cells .*before training"):
        run(smoke(tmp_path, "data=geo_sql_iid", "retrieval=gandr"), tmp_path / "run")
    assert not (tmp_path / "stages").exists()


@needs_mirror
def test_two_stage_gandr_end_to_end_shares_stage_one(tmp_path):
    cfg = smoke(tmp_path, "data=geo_sql_iid", "retrieval=gandr", "retrieval.folds=2")
    row = run(cfg, tmp_path / "gandr")
    assert row["variant"] == "gandr-k4-a0.5-train32-eval8" and row["n_train"] == 32 and row["n_test"] == 8
    assert 0.0 <= row["test_exact_match"] <= 1.0 and "test_stage1_exact_match" in row and "test_denotation" in row
    names = [d.split("/")[-1].rsplit("-", 1)[0] for d in row["stage_dirs"].split()]
    assert names == ["input", "input-fold1of2", "input-fold2of2", "gandr"]
    stage_rows = {name: read_rows(f"{d}/runs.csv")[-1] for name, d in zip(names, row["stage_dirs"].split())}
    assert [int(stage_rows[n]["n_train"]) for n in names] == [32, 16, 16, 32]  # fold models hold their part out
    assert row["global_steps"] == "4+2+2+4"  # debug=smoke: one epoch of at most 4 batches of 8

    predictions = [json.loads(line) for line in (tmp_path / "gandr" / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 8 and all(" || " in p["utterance"] and "preliminary" in p for p in predictions)
    details = json.loads((tmp_path / "gandr" / "retrieval.json").read_text())
    recall = details["template_recall"]
    assert recall["n"] == 8 and all(0 <= recall[f"recall_{r}"] <= 1 for r in ("input", "output_oracle", "hybrid"))
    assert read_rows(tmp_path / "results" / "template_recall.csv")[-1]["data"] == "geo_sql_iid"
    stage1, stage2 = (stage_rows[n]["run_dir"] for n in ("input", "gandr"))
    assert json.loads(open(f"{stage1}/cache-test.json").read())["outputs"] == [p["preliminary"] for p in predictions]

    # stage 2 continues stage 1: it starts from stage 1's featurizer (its vocabulary) and weights
    import torch
    vocabulary = [torch.load(f"{d}/checkpoints/last.ckpt", weights_only=False)["featurizer"]["tokenizer"]
                  for d in (stage1, stage2)]
    assert vocabulary[0] == vocabulary[1]

    # retrieval=input is stage 1 alone, and another alpha trains stage 2 only
    before = sorted(str(p) for p in (tmp_path / "stages").rglob("*.ckpt"))
    inputs = run(smoke(tmp_path, "data=geo_sql_iid", "retrieval=input"), tmp_path / "input")
    assert inputs["stage_dirs"] == stage1 and inputs["variant"] == "input_tfidf-k4-train32-eval8"
    assert inputs["test_exact_match"] == row["test_stage1_exact_match"]
    assert sorted(str(p) for p in (tmp_path / "stages").rglob("*.ckpt")) == before
    other = run(smoke(tmp_path, "data=geo_sql_iid", "retrieval=gandr", "retrieval.alpha=1", "retrieval.folds=2"),
                tmp_path / "alpha1")
    assert other["stage_dirs"].split()[:3] == row["stage_dirs"].split()[:3]
    assert other["stage_dirs"].split()[3] != row["stage_dirs"].split()[3]

    # by default (§2.1) stage 1 predicts its own training examples: no fold models, stage 1 shared again
    paper = run(smoke(tmp_path, "data=geo_sql_iid", "retrieval=gandr"), tmp_path / "paper")
    paper_dirs = paper["stage_dirs"].split()
    assert len(paper_dirs) == 2 and paper_dirs[0] == stage1 and paper_dirs[1] not in row["stage_dirs"].split()
    assert paper["global_steps"] == "4+4"
    assert [r["variant"] for r in read_rows(tmp_path / "results" / "runs.csv")] == [
        "gandr-k4-a0.5-train32-eval8", "input_tfidf-k4-train32-eval8", "gandr-k4-a1-train32-eval8",
        "gandr-k4-a0.5-train32-eval8"]


@needs_mirror
def test_recall_command_records_input_and_oracle_recall(tmp_path, capsys):
    from zoo.retrieval import main

    main(["recall", "--data", "geo_sql_iid:train_limit=100", "--k", "2", "--results", str(tmp_path / "runs.csv")])
    row = read_rows(tmp_path / "template_recall.csv")[-1]
    assert row["data"] == "geo_sql_iid" and row["subsample"] == "sample100" and row["k"] == "2"
    assert 0 <= float(row["recall_input"]) <= float(row["recall_output_oracle"]) <= 1
    assert not row.get("recall_hybrid") and "recall_input" in capsys.readouterr().out


def test_recall_command_says_a_damaged_recall_table_first(tmp_path):
    from zoo.retrieval import main

    (tmp_path / "template_recall.csv").write_text("data,k\n\"geo_sql_iid,4\n")
    with pytest.raises(SystemExit, match=r"template_recall.csv:2: column 1 \(data\): the quote that opens"):
        main(["recall", "--data", "no_such_dataset", "--results", str(tmp_path / "runs.csv")])



@pytest.mark.parametrize("entry, message", [
    ("no_such_dataset", "unknown dataset 'no_such_dataset'; registered datasets: "),
    ("geo_sql_iid:train_limit=abc", "--data geo_sql_iid:train_limit=abc: expected option=integer after the dataset's "
                                    "name, e.g. geo_sql_iid:train_limit=1000"),
    ("geo_sql_iid:train_limit", "--data geo_sql_iid:train_limit: expected option=integer"),
    ("geo_sql_iid:no_such_option=3", "data.no_such_option: not an option of ParsingDataModule (its options: "),
    ("geo_sql_iid:train_limit=0", "data.train_limit=0: expected a whole number of at least 1"),
])
def test_recall_command_names_a_bad_data_entry_before_any_work(tmp_path, entry, message):
    from zoo.retrieval import main

    with pytest.raises(SystemExit) as error:
        main(["recall", "--data", "geo_sql_iid", entry, "--results", str(tmp_path / "runs.csv")])
    assert error.value.code.startswith(f"error: {message}") and "\n" not in error.value.code
    assert not (tmp_path / "template_recall.csv").exists()  # geo_sql_iid, the first, was not measured


def test_recall_command_says_which_data_files_are_missing(tmp_path, monkeypatch):
    from zoo.retrieval import main

    monkeypatch.setenv("ZOO_DATA", str(tmp_path))
    with pytest.raises(SystemExit, match="^error: dataset 'geo_sql_iid' is missing"):
        main(["recall", "--data", "geo_sql_iid", "--results", ""])


def test_template_recall_rows_of_two_protocols_are_kept_apart(tmp_path):
    """Hybrid recall depends on the stage-1 model a protocol trains: a row replaces only its own protocol's."""
    results = tmp_path / "runs.csv"
    row = {"data": "geo_sql_iid", "subsample": "", "split": "val", "n": 49, "k": 4, "alpha": 0.5, "seed": 1,
           "recall_input": 0.6, "recall_output_oracle": 0.8}
    for protocol, hybrid in (("gandr_cpu_short", 0.63), ("seq2seq_grid_cpu", 0.67), ("seq2seq_grid_cpu", 0.69)):
        record_template_recall(str(results), {**row, "protocol": protocol, "recall_hybrid": hybrid})
    assert [(r["protocol"], r["recall_hybrid"]) for r in read_rows(tmp_path / "template_recall.csv")] == [
        ("gandr_cpu_short", "0.63"), ("seq2seq_grid_cpu", "0.69")]
