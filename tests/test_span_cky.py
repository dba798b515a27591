"""models/span_cky.py: a tiny SpanBasedSP learns trees it was never shown (hard-EM) and parses its training set;
smoke runs through benchmarks/run.py; a dataset whose programs have no span types is refused."""
import itertools
import json

import pytest
import torch

from conftest import MIRROR_PRESENT, compose_run, needs_mirror
from datamodules import read_splits
from models import cky
from models.span_cky import SpanBasedParser, SpanFeaturizer, foreign_constants
from zoo.types import Example
from zoo.formalisms import get_formalism
from zoo.formalisms.geobase import GeoBase, read_prolog_facts
from zoo.metrics import exact_match_flags
from zoo.parser import UnsupportedFormalismError
from zoo.launch import run


def overfit(examples, formalism, steps, **hparams):
    featurizer = SpanFeaturizer(formalism).fit(examples)
    torch.manual_seed(0)
    model = SpanBasedParser(featurizer, formalism, embedding_dim=32, hidden_size=32, num_layers=1, dropout=0.0,
                            lr=2e-2, **hparams)
    batch = featurizer.collate([featurizer.encode(e) for e in examples])
    optimizer = model.configure_optimizers()
    for _ in range(steps):
        model.train()
        loss, skipped = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return exact_match_flags(model.eval().parse(batch), [e.program for e in examples], get_formalism(formalism))


@needs_mirror
def test_tiny_span_parser_overfits_16_geoquery_examples():
    examples = read_splits("geo_funql_iid")["train"][:16]
    assert all(overfit(examples, "funql", steps=60))


@needs_mirror
def test_tiny_span_parser_learns_from_the_authors_gold_trees():
    examples = [e for e in read_splits("geo_funql_iid")["train"] if "gold_spans" in e.meta][:16]
    assert all(overfit(examples, "funql", steps=60, gold_trees=True))


@needs_mirror
@pytest.mark.parametrize("data,encoder", [("geo_funql_iid", "lstm"), ("geo_funql_iid", "minilm"),
                                          ("scan_sp_simple", "lstm")])
def test_smoke_run(tmp_path, data, encoder):
    cfg = compose_run("model=span_cky", f"model.params.encoder={encoder}", f"data={data}", "debug=smoke",
                      f"results_file={tmp_path / 'runs.csv'}")
    row = run(cfg, tmp_path / "run")
    assert row["model"] == "span_cky" and row["variant"] == "spanbasedsp-train32-eval8" and 0.0 <= row["test_exact_match"] <= 1.0
    assert row["backbone"].startswith({"lstm": "bilstm", "minilm": "minilm"}[encoder])
    predictions = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == row["n_test"]
    for prediction in predictions:  # the tree of every non-empty prediction: [first word, last word, label]
        assert (prediction["span_tree"] is None) == (prediction["prediction"] == "")
    if data.startswith("geo"):  # tree F1 against the authors' annotated test trees (§4.4)
        assert 0.0 <= row["test_span_f1"] <= 1.0


def test_a_dataset_without_span_types_is_refused_before_training():
    with pytest.raises(UnsupportedFormalismError, match="span_cky.*scan"):
        SpanBasedParser.build([], "scan")


def test_lexicon_holds_entity_names_and_the_manual_phrases():
    examples = [Example("walk right twice", "i_twice ( i_walk ( i_right ) )", {}),
                Example("jump", "i_jump ( )", {})]
    featurizer = SpanFeaturizer("scan_sp").fit(examples)
    categories = featurizer.categories
    assert [categories[c] for c in featurizer.phrases["right"]] == ["i_right"]
    assert "left" not in featurizer.phrases  # i_left is not in this training set's Σ
    assert featurizer.encode(examples[0])["matches"] == [(0, 1, categories.index("i_walk")),
                                                          (1, 2, categories.index("i_right")),
                                                          (2, 3, categories.index("i_twice"))]
    assert SpanFeaturizer("scan_sp", manual_lexicon=False).fit(examples).phrases == {}
    geo = SpanFeaturizer("funql").fit([Example("where is new york ?", "answer ( loc_1 ( stateid ( 'new york' ) ) )",
                                               {})])
    assert [geo.categories[c] for c in geo.phrases["new york"]] == ["stateid ( 'new york' )"]


@needs_mirror
def test_sigma_holds_every_geobase_entity_and_funql_predicate():
    from datamodules.datamodule import load_world

    train = [Example("where is new york ?", "answer ( loc_1 ( stateid ( 'new york' ) ) )", {})]
    featurizer = SpanFeaturizer("funql").fit(train, load_world("geo_funql_iid"))
    for unseen in ("stateid ( 'new jersey' )", "cityid ( 'austin', _ )", "cityid ( 'austin', 'tx' )", "longer"):
        assert unseen in featurizer.categories
    named = {featurizer.categories[c] for c in featurizer.phrases["austin"]}
    assert named == {"cityid ( 'austin', _ )", "cityid ( 'austin', 'tx' )"}  # the copying mechanism of §3.3


def test_minilm_spans_run_from_a_words_first_piece_to_its_last():
    featurizer = SpanFeaturizer("scan_sp", encoder="minilm").fit([Example("jump", "i_jump ( )", {})])
    item = featurizer.encode(Example("jump unaffordably", "i_jump ( )", {}))
    pieces = featurizer.tokenizer.convert_ids_to_tokens(item["ids"])
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]" and len(pieces) > 4  # the second word is split
    assert item["first"] == [1, 2] and item["last"] == [1, len(pieces) - 2]


def test_longer_sentences_parse_and_no_valid_tree_gives_an_empty_prediction():
    train = [Example("walk left", "i_walk ( i_left )", {}), Example("jump", "i_jump ( )", {})]
    featurizer = SpanFeaturizer("scan_sp").fit(train)
    torch.manual_seed(0)
    model = SpanBasedParser(featurizer, "scan_sp", embedding_dim=8, hidden_size=8, num_layers=1).eval()
    longer = Example("jump and walk left after walk left twice and jump thrice", "i_jump ( )", {})
    programs, details = model.parse_with_details(featurizer.collate([featurizer.encode(longer)]))
    assert isinstance(programs[0], str) and (details[0]["span_tree"] is None) == (programs[0] == "")
    # "left" when the scores allow only i_left: a direction is no command, so no tree composes
    scores = torch.full((2, 2, len(featurizer.categories) + 2), float("-inf"))
    scores[0, 1, featurizer.categories.index("i_left")] = scores[0, 1, featurizer.phi] = 0.0
    assert model.decode(scores, 1) == ("", None)
    assert exact_match_flags([""], ["i_walk ( )"], get_formalism("scan_sp")) == [False]


@needs_mirror
def test_entities_of_one_kind_share_a_score_and_the_lexicon_picks_the_one_named():
    from datamodules.datamodule import load_world

    train = [Example("how many people live in austin ?", "answer ( population_1 ( cityid ( 'austin', _ ) ) )", {})]
    featurizer = SpanFeaturizer("funql").fit(train, load_world("geo_funql_iid"))
    torch.manual_seed(0)
    model = SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1).eval()
    batch = featurizer.collate([featurizer.encode(Example("how many people live in houston ?", "", {}))])
    scores = model(batch)[0, 5, 6]  # the span "houston"
    houston, austin = (featurizer.categories.index(f"cityid ( '{city}', _ )") for city in ("houston", "austin"))
    assert torch.isclose(scores[houston] - scores[austin], torch.tensor(model.hparams.lexicon_weight))
    untied = SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1,
                             share_entity_scores=False)
    assert untied.span_scorer[-1].out_features == len(featurizer.categories) + 2
    assert model.span_scorer[-1].out_features < 100  # predicates, a row per entity kind, join and φ
    # the loss's softmax sees the kind once, scored as its best entity (houston, named by the lexicon)
    rows = model.row_scores(scores)
    assert rows.shape == (model.span_scorer[-1].out_features,)
    assert rows[model.score_rows[houston]] == scores[houston]
    assert torch.equal(untied.row_scores(scores), scores)


def speed_benchmark():
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("span_cky_speed", REPO / "benchmarks" / "span_cky_speed.py")
    span_cky_speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(span_cky_speed)
    return span_cky_speed


def test_speed_benchmark_says_a_wrong_dataset_before_loading_the_checkpoint(tmp_path, monkeypatch):
    span_cky_speed = speed_benchmark()
    checkpoint = tmp_path / "runs" / "span_cky-default" / "no_such_dataset" / "seed1" / "checkpoints" / "best.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"")  # loading it would fail
    with pytest.raises(SystemExit, match=r"^error: unknown dataset 'no_such_dataset'; .* \(the dataset named by "
                                         r"the checkpoint's path; --data gives another\)$"):
        span_cky_speed.main([str(checkpoint)])
    with pytest.raises(SystemExit, match=r"^error: unknown dataset 'no_such'; registered datasets: [^(]*$"):
        span_cky_speed.main([str(checkpoint), "--data", "no_such"])
    if MIRROR_PRESENT:  # the data read, the checkpoint is named
        with pytest.raises(SystemExit, match=rf"^error: {checkpoint}: not a readable checkpoint"):
            span_cky_speed.main([str(checkpoint), "--data", "scan_simple"])
    monkeypatch.setenv("ZOO_DATA", str(tmp_path))
    with pytest.raises(SystemExit, match=r"^error: dataset 'scan_simple' is missing"):
        span_cky_speed.main([str(checkpoint), "--data", "scan_simple"])


@needs_mirror
def test_speed_benchmark_times_models_cky_of_a_git_revision_against_the_checkouts(tmp_path, capsys):
    import csv

    from conftest import REPO

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: --against reads models/cky.py from git")
    span_cky_speed = speed_benchmark()
    examples = read_splits("geo_funql_iid")["train"][:16]
    featurizer = SpanFeaturizer("funql").fit(examples)
    torch.manual_seed(0)
    model = SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1).eval()
    checkpoint = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, tmp_path / "best.ckpt")
    out, threads = tmp_path / "speed.csv", torch.get_num_threads()
    try:
        span_cky_speed.main([str(tmp_path / "best.ckpt"), "--data", "geo_funql_iid", "--sentences", "6",
                             "--lengths", "3", "13", "--repeats", "2", "--against", "HEAD", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)  # --against runs one thread
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [row["length"] for row in rows if row["source"] == "synthetic"] == ["3", "13", "all"]
    for row in rows:  # the old version's times beside the new's, and the same best trees
        assert row["against"] == "HEAD" and float(row["old_chart_ms_mean"]) > 0 and float(row["chart_speedup"]) > 0
        assert row["best_score_mismatches"] == "0"
    assert rows[-1]["sentences"] == "4" and int(next(r for r in rows if r["length"] == "all")["sentences"]) == 6
    assert "every best tree scores the same with models/cky.py at HEAD and now" in capsys.readouterr().out


def test_the_lexicon_switch_loads_the_authors_lexicon_or_ours():
    train = [Example("what states have a river with a lake in them",
                     "answer ( state ( loc_1 ( river ( loc_1 ( lake ( all ) ) ) ) ) )", {})]
    ours, authors = (SpanFeaturizer("funql", lexicon=name).fit(train) for name in ("ours", "authors"))
    assert [ours.categories[c] for c in ours.phrases["have"]] == ["loc_1"] and "with" not in ours.phrases
    assert [authors.categories[c] for c in authors.phrases["with"]] == ["loc_1"] and "have" not in authors.phrases
    restored = SpanFeaturizer.from_state_dict(authors.state_dict())
    assert restored.lexicon == "authors" and restored.phrases == authors.phrases
    with pytest.raises(ValueError, match="model.featurizer.lexicon must be one of ours, authors, not 'theirs'"):
        SpanFeaturizer("funql", lexicon="theirs")
    with pytest.raises(ValueError, match=r"lexicon=authors: there is no scan_sp.authors.json"):
        SpanFeaturizer("scan_sp", lexicon="authors").fit([Example("jump", "i_jump ( )", {})])


def test_no_constant_sits_on_a_function_word_when_the_constraint_is_on():
    train = [Example("what is the capital of texas ?", "answer ( capital_1 ( stateid ( 'texas' ) ) )", {})]
    featurizer = SpanFeaturizer("funql", function_words=True).fit(train)
    item = featurizer.encode(train[0])
    assert item["constraints"]["function_words"] == [1, 2, 6]  # is, the, ?
    assert SpanFeaturizer("funql").fit(train).encode(train[0])["constraints"]["function_words"] == []
    assert SpanFeaturizer.from_state_dict(featurizer.state_dict()).function_words
    torch.manual_seed(0)
    model = SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1).eval()
    n = item["n"]
    scores = torch.zeros(n + 1, n + 1, len(featurizer.categories) + 2)
    scores[1, 3, featurizer.categories.index("capital_1")] = 50.0  # "is the" would name the capital without it
    chart = model._chart(scores, n, item["constraints"])
    for _, tree, _ in itertools.islice(chart.trees(), 20):
        for node in tree.nodes():
            assert node.label < 0 or not set(range(node.start, node.end)) & {1, 2, 6}
    assert any(node.label >= 0 and (node.start, node.end) == (1, 3)
               for node in next(model._chart(scores, n).trees())[1].nodes())


def test_a_learned_lexicon_weight_starts_at_lambda_and_receives_a_gradient():
    examples = [Example("walk right twice", "i_twice ( i_walk ( i_right ) )", {}), Example("jump", "i_jump ( )", {})]
    featurizer = SpanFeaturizer("scan_sp").fit(examples)
    torch.manual_seed(0)
    model = SpanBasedParser(featurizer, "scan_sp", embedding_dim=8, hidden_size=8, num_layers=1, dropout=0.0,
                            lexicon_weight=10.0, learn_lexicon_weight=True)
    batch = featurizer.collate([featurizer.encode(e) for e in examples])
    without = SpanBasedParser(featurizer, "scan_sp", embedding_dim=8, hidden_size=8, num_layers=1, dropout=0.0,
                              lexicon_weight=0.0)
    without.load_state_dict({k: v for k, v in model.state_dict().items() if k != "lexicon_scale"})
    walk = featurizer.categories.index("i_walk")
    with torch.no_grad():
        assert float(model(batch)[0, 0, 1, walk] - without(batch)[0, 0, 1, walk]) == pytest.approx(10.0)
    loss, _ = model.loss(batch)
    loss.backward()
    assert model.lexicon_scale.grad is not None and float(model.lexicon_scale.grad) != 0.0
    assert "lexicon_scale" in dict(model.named_parameters())
    assert SpanBasedParser(featurizer, "scan_sp").lexicon_scale is None


def test_a_checkpoint_resumes_under_the_options_it_was_trained_with():
    # resuming compares each model.featurizer option with the checkpoint featurizer's attribute of that name
    from omegaconf import OmegaConf
    from zoo.options import RunConfigError
    from zoo.train import _load_weights

    options = OmegaConf.to_container(compose_run("model=span_cky").model.featurizer)
    examples = [Example("walk right twice", "i_twice ( i_walk ( i_right ) )", {}), Example("jump", "i_jump ( )", {})]
    featurizer = SpanFeaturizer("scan_sp", **options).fit(examples)
    restored = SpanFeaturizer.from_state_dict(featurizer.state_dict())
    model = SpanBasedParser(restored, "scan_sp", embedding_dim=8, hidden_size=8, num_layers=1)
    checkpoint = {"state_dict": model.state_dict()}
    _load_weights(model, checkpoint, "last.ckpt", options)
    with pytest.raises(RunConfigError, match="last.ckpt was trained with model.featurizer.function_words=False"):
        _load_weights(model, checkpoint, "last.ckpt", {**options, "function_words": True})


def test_words_the_lexicon_names_are_never_phi_when_asked():
    train = [Example("what is the longest river in the us ?",
                     "answer ( longest ( river ( loc_2 ( countryid ( 'usa' ) ) ) ) )", {})]
    featurizer = SpanFeaturizer("funql", cover_named_words=True).fit(train)
    item = featurizer.encode(train[0])
    tokens = featurizer.tokens(train[0].utterance)
    assert [tokens[i] for i in item["constraints"]["named_words"]] == ["longest", "river", "in"]  # ours lacks "us"
    torch.manual_seed(0)
    model = SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1).eval()
    n = item["n"]
    scores = torch.full((n + 1, n + 1, len(featurizer.categories) + 2), -1.0)
    scores[..., featurizer.phi] = 0.0  # every node costs 1 but "us" as the country: the rest is best left φ,
    scores[7, 8, featurizer.categories.index("countryid ( 'usa' )")] = 50.0  # as in LENGTH's too-short programs
    unconstrained = next(model._chart(scores, n).trees())[1]
    assert [(node.start, node.end) for node in unconstrained.nodes() if node.label == cky.PHI] == [(0, 7), (8, 9)]
    for _, tree, _ in itertools.islice(model._chart(scores, n, item["constraints"]).trees(), 20):
        covered = {w for node in tree.nodes() if node.label >= 0 for w in range(node.start, node.end)}
        assert set(item["constraints"]["named_words"]) <= covered


def test_a_word_is_named_when_the_training_programs_mostly_hold_its_constant():
    train = [Example("what city has the most people", "answer ( largest_one ( population_1 ( city ( all ) ) ) )", {}),
             Example("what river has the most length", "answer ( longest ( river ( all ) ) )", {}),
             Example("which state has a river", "answer ( state ( loc_1 ( river ( all ) ) ) )", {})]
    every = SpanFeaturizer("funql", cover_named_words=True).fit(train)
    assert {"has", "city", "river", "state", "most"} <= every.named_words
    reliable = SpanFeaturizer("funql", cover_named_words=True, named_word_share=0.9).fit(train)
    assert "has" not in reliable.named_words and {"city", "river", "state"} <= reliable.named_words
    assert "most" not in reliable.named_words  # largest_one in one of its two examples
    tokens = "which state has a river".split()
    assert reliable.constraints(tokens)["named_words"] == [1, 4]
    restored = SpanFeaturizer.from_state_dict(reliable.state_dict())
    assert restored.named_words == reliable.named_words and restored.named_word_share == 0.9
    assert SpanFeaturizer("funql").fit(train).named_words == set()
    assert "rivers" in reliable.named_words  # named by the lexicon, in no training question


def test_a_constant_bonus_at_inference_favours_trees_with_more_constants_and_leaves_training_alone():
    program = "answer ( longest ( river ( loc_2 ( countryid ( 'usa' ) ) ) ) )"
    train = [Example("what is the longest river in the us ?", program, {})]
    featurizer = SpanFeaturizer("funql").fit(train)
    n = featurizer.encode(train[0])["n"]
    scores = torch.full((n + 1, n + 1, len(featurizer.categories) + 2), -1.0)
    scores[..., featurizer.phi] = 0.0  # every node costs 1 but "us" as the country, as in LENGTH's short programs
    scores[7, 8, featurizer.categories.index("countryid ( 'usa' )")] = 50.0

    def parser(bonus):
        torch.manual_seed(0)
        return SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1,
                               constant_bonus=bonus).eval()

    def constants(tree):
        return sum(node.label >= 0 for node in tree.nodes())

    plain, bonus = parser(0.0), parser(3.0)
    best_plain, best_bonus = next(plain._chart(scores, n).trees()), next(bonus._chart(scores, n).trees())
    assert constants(best_plain[1]) == 1 and constants(best_bonus[1]) > 1
    composition = featurizer.composition(program)  # hard-EM's search: the same best tree and score
    trained = [next(model._chart(scores, n, composition=composition, k=len(composition.table)).trees())
               for model in (plain, bonus)]
    assert float(trained[0][0]) == float(trained[1][0]) and constants(trained[0][1]) == 4  # answer is implicit


def test_constraints_that_leave_no_valid_tree_give_way_to_the_unconstrained_chart():
    train = [Example("how many rivers does alaska have ?",
                     "answer ( count ( river ( loc_2 ( stateid ( 'alaska' ) ) ) ) )", {})]
    featurizer = SpanFeaturizer("funql").fit(train)
    n = featurizer.encode(train[0])["n"]
    torch.manual_seed(0)
    model = SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1).eval()
    scores = torch.full((n + 1, n + 1, len(featurizer.categories) + 2), float("-inf"))
    scores[..., featurizer.phi] = scores[..., featurizer.join] = 0.0
    scores[4, 5, featurizer.categories.index("stateid ( 'alaska' )")] = 5.0
    scores[5, 6, featurizer.categories.index("exclude")] = 1.0  # "have" can only be a function of two arguments
    constraints = {"named_words": [5]}  # and must stand under a constant: no program composes
    assert not any(program for _, program, _ in itertools.islice(
        model._chart(scores, n, constraints).meanings(
            lambda c: featurizer.language.leaf(featurizer.categories[c]), featurizer.language.compose), 100)
        if program is not None and featurizer.language.program(program) is not None)
    assert model.decode(scores, n, constraints)[0] == model.decode(scores, n)[0] == "answer ( stateid ( 'alaska' ) )"


def test_execution_guided_decoding_takes_the_best_tree_that_answers():
    train = [Example("what borders alaska ?", "answer ( next_to_2 ( stateid ( 'alaska' ) ) )", {}),
             Example("what borders texas ?", "answer ( next_to_2 ( stateid ( 'texas' ) ) )", {})]
    featurizer = SpanFeaturizer("funql").fit(train)
    n = featurizer.encode(train[1])["n"]
    scores = torch.full((n + 1, n + 1, len(featurizer.categories) + 2), float("-inf"))
    scores[..., featurizer.phi] = scores[..., featurizer.join] = 0.0
    scores[1, 2, featurizer.categories.index("next_to_2")] = 3.0  # "borders" is next_to_2 in every leading tree
    scores[2, 3, featurizer.categories.index("stateid ( 'alaska' )")] = 5.0  # best, but alaska borders no state
    scores[2, 3, featurizer.categories.index("stateid ( 'texas' )")] = 4.0
    world = GeoBase(read_prolog_facts("border('alaska','ak',[]).\nborder('new mexico','nm',['texas']).\n"
                                      "state('texas','tx','austin',1,1,1,'a','b','c','d').\n"
                                      "state('alaska','ak','juneau',1,1,1,'a','b','c','d').\n"
                                      "state('new mexico','nm','santa fe',1,1,1,'a','b','c','d')."))

    def decoded(guided, world=world, max_trees=1000):
        torch.manual_seed(0)
        model = SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1,
                                execution_guided=guided, max_trees=max_trees).eval()
        model.attach_world(world)
        return model.decode(scores, n)[0]

    assert decoded(False) == "answer ( next_to_2 ( stateid ( 'alaska' ) ) )"
    assert decoded(True) == "answer ( next_to_2 ( stateid ( 'texas' ) ) )"
    assert decoded(True, max_trees=1) == "answer ( next_to_2 ( stateid ( 'alaska' ) ) )"  # none answers: the best
    with pytest.raises(ValueError, match="execution_guided.*funql has none here"):
        decoded(True, world=None)


def test_the_fallback_can_drop_the_function_word_bar_before_the_named_words():
    train = [Example("how many rivers does alaska have ?",
                     "answer ( count ( river ( loc_2 ( stateid ( 'alaska' ) ) ) ) )", {})]
    featurizer = SpanFeaturizer("funql").fit(train)
    n = featurizer.encode(train[0])["n"]
    scores = torch.full((n + 1, n + 1, len(featurizer.categories) + 2), float("-inf"))
    scores[..., featurizer.phi] = scores[..., featurizer.join] = 0.0
    scores[4, 5, featurizer.categories.index("stateid ( 'alaska' )")] = 5.0
    scores[5, 6, featurizer.categories.index("exclude")] = 1.0  # "have" alone can only be a function of two
    scores[5, 7, featurizer.categories.index("loc_1")] = -1.0  # "have ?" is loc_1, but "?" is a function word
    constraints = {"function_words": [3, 6], "named_words": [5]}  # "does", "?"; "have" stands under a constant

    def decoded(keeps_named_words):
        torch.manual_seed(0)
        model = SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1,
                                fallback_keeps_named_words=keeps_named_words).eval()
        return model.decode(scores, n, constraints)[0]

    assert decoded(False) == "answer ( stateid ( 'alaska' ) )"  # every constraint dropped: "have ?" left φ
    assert decoded(True) == "answer ( loc_1 ( stateid ( 'alaska' ) ) )"


def test_the_lexicon_can_bar_a_constant_that_swallows_words_naming_others():
    program = "answer ( highest ( place ( loc_2 ( stateid ( 'delaware' ) ) ) ) )"
    train = [Example("what is the highest point in delaware ?", program, {})]
    featurizer = SpanFeaturizer("funql", cover_named_words=True).fit(train)
    item = featurizer.encode(train[0])
    n, constraints, index = item["n"], item["constraints"], featurizer.categories.index
    assert constraints["named_words"] == [3, 4, 5, 6]  # highest, point, in, delaware
    assert index("highest") in constraints["named_constants"][0]
    assert index("population_1") not in {c for named in constraints["named_constants"] for c in named}
    scores = torch.full((n + 1, n + 1, len(featurizer.categories) + 2), float("-inf"))
    scores[..., featurizer.phi] = scores[..., featurizer.join] = 0.0
    scores[3, 6, index("population_1")] = 6.0  # "highest point in" as one constant, as a LENGTH model did
    for start, constant in ((3, "highest"), (4, "place"), (5, "loc_2")):
        scores[start, start + 1, index(constant)] = 1.0
    scores[6, 7, index("stateid ( 'delaware' )")] = 5.0
    for start in (3, 4, 5):  # the program's bracketing, ahead of the others that score the same constants
        scores[start, 8, featurizer.join] = 0.1

    def parser(bounds):
        torch.manual_seed(0)
        return SpanBasedParser(featurizer, "funql", embedding_dim=8, hidden_size=8, num_layers=1,
                               lexicon_bounds_constants=bounds).eval()

    with pytest.raises(ValueError, match="lexicon_bounds_constants=true bounds .*cover_named_words=true"):
        SpanBasedParser(SpanFeaturizer("funql").fit(train), "funql", lexicon_bounds_constants=True)
    assert parser(False).decode(scores, n, constraints)[0] == "answer ( population_1 ( stateid ( 'delaware' ) ) )"
    assert parser(True).decode(scores, n, constraints)[0] == program
    # hard-EM's search (training) is left as it was
    composition = featurizer.composition("answer ( population_1 ( stateid ( 'delaware' ) ) )")
    trained = [next(model._chart(scores, n, constraints, composition=composition, k=len(composition.table)).trees())
               for model in (parser(False), parser(True))]
    assert float(trained[0][0]) == float(trained[1][0]) == pytest.approx(11.1)


def test_foreign_constants_bar_only_spans_of_several_words_over_a_named_word():
    barred = foreign_constants([2], [[0, 3]], 4, 5)  # the word at 2 is named, by constants 0 and 3
    assert barred.shape == (5, 5, 5)
    assert not barred[2, 3].any()  # the word alone: the network decides
    assert barred[1, 3].tolist() == [False, True, True, False, True] == barred[2, 4].tolist()
    assert not barred[0, 2].any() and not barred[3, 4].any()  # spans without the word


def test_averaged_parsers_score_spans_with_the_mean_outside_training_only():
    """augment.ensemble: the second parser decodes with the mean of both parsers' span scores, and trains as before;
    a parser whose featurizer reads batches otherwise is refused."""
    examples = [Example("walk right twice", "i_twice ( i_walk ( i_right ) )", {}), Example("jump", "i_jump ( )", {})]
    featurizer = SpanFeaturizer("scan_sp").fit(examples)
    torch.manual_seed(0)
    first, second = (SpanBasedParser(featurizer, "scan_sp", embedding_dim=8, hidden_size=8, num_layers=1,
                                     dropout=0.0) for _ in range(2))
    batch = featurizer.collate([featurizer.encode(e) for e in examples])
    with torch.no_grad():
        alone = second(batch)
        second.average_with([first])
        assert torch.allclose(second.eval()(batch), (alone + first(batch)) / 2)
        assert torch.equal(second.train()(batch), alone)
    assert "averaged_with" not in "".join(second.state_dict())  # the other parser is not saved with it
    other = SpanFeaturizer("scan_sp").fit(examples[:1])
    with pytest.raises(ValueError, match="other categories"):
        SpanBasedParser(other, "scan_sp", embedding_dim=8, hidden_size=8, num_layers=1).average_with([first])
