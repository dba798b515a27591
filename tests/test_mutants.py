"""Tests written against plausible bugs in the core logic that the rest of the suite let through (issue 25): each
test fails on one such bug (named in its docstring) and passes on the code as it is."""
import json

import numpy as np
import pytest
import torch
import lightning.pytorch as L

from conftest import DATA_ROOT, compose_run, needs_mirror
from datamodules.text2sql import read_text2sql
from zoo.formalisms import get_formalism
from zoo.ir import IRError, get_ir
from zoo.metrics import DenotationAccuracy, Scorer
from zoo.retrieval import _CHUNK, Retriever
from zoo.types import Example

SQL = get_formalism("sql")


# ----- scoring: the gold denotation depends on the example's variables ---------------------------------------------
CAPITAL = 'SELECT STATEalias0.CAPITAL FROM STATE AS STATEalias0 WHERE STATEalias0.STATE_NAME = "state_name0" ;'


def _capitals_world(tmp_path):
    dump = tmp_path / "capitals.sql"
    dump.write_text("CREATE TABLE `state` (\n  `state_name` text,\n  `capital` text\n);\n"
                    "INSERT INTO `state` VALUES ('texas','austin'),('ohio','columbus');\n")
    return SQL.load_world(dump)


def test_gold_denotations_of_one_anonymised_query_differ_with_its_variables(tmp_path):
    """Text-to-SQL paraphrases and questions of one template share an anonymised gold query and differ in
    ``meta["variables"]``; a gold cache keyed by the program alone would score the second against the first's
    answer."""
    scorer = Scorer(SQL, _capitals_world(tmp_path))
    texas, ohio = ({"variables": {"state_name0": name}} for name in ("texas", "ohio"))
    examples = [Example("capital of state_name0", CAPITAL, texas), Example("capital of state_name0", CAPITAL, ohio)]
    hard_coded_texas = CAPITAL.replace('"state_name0"', '"texas"')
    scores = scorer.score_batch([CAPITAL, CAPITAL, hard_coded_texas, hard_coded_texas], examples + examples)
    assert [s.denotation for s in scores] == [True, True, True, False]
    metric = DenotationAccuracy()
    metric.update(scores)
    assert metric.compute().item() == pytest.approx(0.75)


# ----- text-to-SQL reading: each paraphrase keeps its own variables -----------------------------------------------
def test_each_paraphrase_of_a_text2sql_query_keeps_its_own_variables(tmp_path):
    """The sentences of one query carry different values; giving every paraphrase the first sentence's variables
    would execute the gold query with the wrong state."""
    path = tmp_path / "geography.json"
    path.write_text(json.dumps([{"query-split": "train", "sql": [CAPITAL], "sentences": [
        {"question-split": "train", "text": "capital of state_name0", "variables": {"state_name0": "texas"}},
        {"question-split": "test", "text": "what is state_name0 's capital", "variables": {"state_name0": "ohio"}},
    ]}, {"query-split": "dev", "sql": [CAPITAL], "sentences": [  # every part must hold a sentence
        {"question-split": "dev", "text": "state_name0 's capital", "variables": {"state_name0": "utah"}}]},
        {"query-split": "test", "sql": [CAPITAL], "sentences": [
            {"question-split": "test", "text": "the capital of state_name0", "variables": {"state_name0": "iowa"}}]}]))
    by_query, by_question = read_text2sql(path, "query-split"), read_text2sql(path, "question-split")
    for first, second in (by_query["train"], (by_question["train"][0], by_question["test"][0])):
        assert first.meta["variables"] == {"state_name0": "texas"}
        assert second.meta["variables"] == {"state_name0": "ohio"}
        assert second.utterance == "what is state_name0 's capital" and second.meta["sentence_index"] == 1


# ----- FunQL: a city name with no state names every city of that name ---------------------------------------------
@needs_mirror
def test_count_of_a_city_name_counts_every_city_of_that_name():
    """city/4 has springfield in il, ma, mo and oh: ``count`` counts the four cities, not one name or one value."""
    funql = get_formalism("funql")
    world = funql.load_world(DATA_ROOT / "geoquery_funql" / "geobase.pl")
    assert funql.execute("answer ( count ( cityid ( 'springfield', _ ) ) )", world) == {4.0}
    assert funql.execute("answer ( count ( cityid ( 'springfield', 'il' ) ) )", world) == {1.0}


# ----- IRs: malformed IRs are refused, join conditions dropped wherever they stand ------------------------------
SPARQL_RIR_FITTED_ON = ["SELECT DISTINCT ?x0 WHERE { ?x0 marriage.spouses M2 . ?x0 marriage.spouses M3 . "
                        "FILTER ( ?x0 != M2 ) }"]


@pytest.mark.parametrize("ir, found", [
    ("SELECT DISTINCT ?x0 WHERE { ( ?x0 spouses ( M2 , M3 ) }", "'}'"),  # the conjunct's ')' missing
    ("SELECT DISTINCT ?x0 WHERE { ( ?x0 spouses ( M2 , M3 ) . FILTER ( ?x0 != M2 ) }", "'.'"),
    ("SELECT DISTINCT ?x0 WHERE { ( ?x0 spouses ( M2 , M3 ) ) . FILTER ( ?x0 != M2 }", "'}'"),
])
def test_sparql_rir_with_a_bracket_missing_is_refused(ir, found):
    """A predicted RIR whose conjunct or filter lacks its closing bracket is malformed: the inverse must say so
    rather than read the next token as the bracket."""
    rir = get_ir("rir", "cfq_sparql").fit(SPARQL_RIR_FITTED_ON)
    with pytest.raises(IRError, match=f"expected '\\)' at token \\d+, found {found}"):
        rir.inverse(ir)
    with pytest.raises(IRError, match="expected a body"):
        rir.inverse("SELECT DISTINCT ?x0 WHERE { ( ?x0 spouses ( M2 ) )")


@pytest.mark.parametrize("where, kept", [
    ('A0.K = B0.K AND B0.Y = "v"', 'table.Y = "v"'),  # first: the AND after it goes
    ('B0.Y = "v" AND A0.K = B0.K', 'table.Y = "v"'),  # last: the AND before it goes
    ('A0.K = B0.K AND A0.J = B0.J AND B0.Y = "v"', 'table.Y = "v"'),
    ('B0.Y = "v" AND A0.K = B0.K AND A0.Z > 3', 'table.Y = "v" AND table.Z > 3'),
])
def test_sql_lir_drops_a_join_condition_wherever_it_stands(where, kept):
    lir = get_ir("lir", "sql")
    assert lir.forward(f"SELECT A0.X FROM A AS A0 , B AS B0 WHERE {where} ;") == f"SELECT table.X FROM alias WHERE {kept}"


# ----- retrieval: nobody retrieves itself, in any chunk of queries --------------------------------------------------
def test_self_exclusion_holds_beyond_the_first_chunk_of_queries():
    """Queries are scored ``_CHUNK`` at a time; each query's own index must be left out in every chunk, not only in
    the first (each utterance is most similar to itself, so a miss shows at rank 0)."""
    n = 2 * _CHUNK + 7
    pool = [Example(f"show word{i} and word{(i * 7) % n} please", f"p{i}") for i in range(n)]
    retriever = Retriever(pool)
    ranked = retriever.ranked([e.utterance for e in pool], exclude=range(n), depth=3)
    assert len(ranked) == n
    assert [i for i, ranking in enumerate(ranked) if i in ranking] == []
    assert all(len(ranking) == 3 for ranking in ranked)
    # the exclusion leaves the rest of the ranking as it was
    assert ranked[n - 1] == [j for j in retriever.ranked([pool[n - 1].utterance], depth=4)[0] if j != n - 1][:3]


def test_ties_at_the_depth_cut_go_to_pool_order():
    """``ranked`` breaks ties by pool order, at the depth cut too: a shallower ranking is a prefix of a deeper one
    (with a partial sort alone, which of the tied examples make the cut is arbitrary)."""
    pool = [Example(f"filler{i}", "p") for i in range(1000)] + [Example("largest city", "p")]
    retriever = Retriever(pool)
    assert retriever.ranked(["largest city"], depth=4)[0] == [1000, 0, 1, 2]  # the rest score 0: pool order
    deep = retriever.ranked(["largest city"], depth=50)[0]
    assert all(retriever.ranked(["largest city"], depth=d)[0] == deep[:d] for d in (1, 2, 7, 49))


# ----- training: the best checkpoint is the one tested -------------------------------------------------------------
class PerturbAfterFit(L.Callback):
    """Moves every weight once training ends, so that the final (last.ckpt) weights cannot pass for best.ckpt's."""

    def on_train_end(self, trainer, module):
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.add_(1.0)


class WeightsAtTest(L.Callback):
    """Records the weights the test loop runs with."""

    seen: dict[str, torch.Tensor] = {}

    def on_test_start(self, trainer, module):
        WeightsAtTest.seen = {k: v.detach().clone() for k, v in module.state_dict().items()}


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@needs_mirror
def test_the_best_checkpoint_is_tested_not_the_last_weights(tmp_path):
    """After training and with ``test_only=true``, the test loop runs best.ckpt's weights. Four smoke steps leave
    best and last too close to tell by their scores, so the last weights are moved after training and the weights
    the test loop holds are compared with each checkpoint's."""
    from zoo.launch import run

    def cfg(*overrides):
        return compose_run("debug=smoke", f"results_file={tmp_path / 'runs.csv'}",
                           "+callbacks.seen._target_=test_mutants.WeightsAtTest", *overrides)

    run(cfg("+callbacks.perturb._target_=test_mutants.PerturbAfterFit"), tmp_path / "run")
    checkpoints = tmp_path / "run" / "checkpoints"
    best, last = (torch.load(checkpoints / name, weights_only=False)["state_dict"] for name in ("best.ckpt",
                                                                                             "last.ckpt"))
    assert not _same_weights(best, last)
    assert _same_weights(WeightsAtTest.seen, best)
    WeightsAtTest.seen = {}
    run(cfg("test_only=true"), tmp_path / "run")
    assert _same_weights(WeightsAtTest.seen, best)


# ----- GGD: decoding at a tuned threshold ------------------------------------------------------------------------
@pytest.fixture
def ggd(tmp_path, monkeypatch):
    """A small untrained GGD on test_ggd's three questions, its featurizer, and their batch."""
    from models.ggd import GGDFeaturizer, GroundedGraphDecoder
    from test_ggd import EXAMPLES

    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    torch.manual_seed(0)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=4).eval()
    return model, featurizer, featurizer.collate([featurizer.encode(e) for e in EXAMPLES]), EXAMPLES


def test_types_implied_by_a_triple_chosen_below_one_half_are_left_out(ggd):
    """At a tuned threshold (0.2), a triple chosen with probability 0.3 implies its subject's type as it does at
    0.5: the implied types follow the threshold that chose the triples, not a fixed 0.5, and a triple exactly at
    the threshold is neither chosen nor implies anything."""
    model, featurizer, batch, examples = ggd
    out = model(featurizer.collate([featurizer.encode(examples[0])]))
    places = out["nodes"][0].tolist()
    x0, m0 = (places.index(featurizer.node_names().index(name)) for name in ("?x0", "M0"))
    out["edges"] = torch.full_like(out["edges"], -10.0)
    out["edges"][0, x0, m0, featurizer.relations["film.director.film"]] = float(torch.logit(torch.tensor(0.3)))
    out["attributes"] = torch.full_like(out["attributes"], -10.0)
    director = featurizer.attributes.index(("a", "film.director"))
    out["attributes"][0, x0, director] = 10.0
    out["attribute_candidates"][0, x0, director] = True
    out["count"] = torch.tensor([-10.0])
    assert model.decode(out, 0.2) == ["SELECT DISTINCT ?x0 WHERE { ?x0 film.director.film M0 }"]
    assert model.decode(out, 0.35) == ["SELECT DISTINCT ?x0 WHERE { ?x0 a film.director }"]  # not chosen: kept
    out["edges"][0, x0, m0, featurizer.relations["film.director.film"]] = 0.0  # probability 0.5 exactly
    assert model.decode(out, 0.5) == ["SELECT DISTINCT ?x0 WHERE { ?x0 a film.director }"]  # not above 0.5


def test_threshold_tally_agrees_with_decoding_on_probabilities_at_the_thresholds(ggd, monkeypatch):
    """``decode`` keeps what lies strictly above a threshold and ``exact_by_thresholds`` must count it the same way;
    probabilities drawn from the thresholds themselves make every comparison a tie somewhere (``>`` or ``>=``,
    ``<`` or ``<=``, in either of them, shows)."""
    model, featurizer, batch, examples = ggd
    out, target = model(batch), batch["target"]
    grid = torch.tensor((0.0, *model.THRESHOLDS, 0.9))
    generator = torch.Generator().manual_seed(0)
    sparql = get_formalism("cfq_sparql")
    gold = [sparql.canonical(e.program) for e in examples]
    probabilities = {}
    monkeypatch.setattr(model, "probabilities", lambda out: (probabilities["edges"], probabilities["attributes"]))
    agreed = 0
    for trial in range(30):
        for key, candidates in (("edges", "edge_candidates"), ("attributes", "attribute_candidates")):  # gold in the upper half of the grid, the rest in the lower, mostly
            upper = torch.randint(5, len(grid), out[key].shape, generator=generator)
            lower = torch.randint(0, 8, out[key].shape, generator=generator)
            p = grid[torch.where(target[key] > 0, upper, lower)]
            probabilities[key] = p.masked_fill(~out[candidates], 0.0)
        out["count"] = 2 * target["count"] - 1
        tally = model.exact_by_thresholds(out, target)
        for i, edge in enumerate(model.THRESHOLDS):
            for j, attribute in enumerate(model.THRESHOLDS):
                decoded = [sparql.canonical(p) for p in model.decode(out, edge, attribute)]
                right = sum(d == g for d, g in zip(decoded, gold))
                assert tally[i, j] == right, (trial, edge, attribute)
                agreed += right
    assert agreed > 0


# ----- what a predictions row records --------------------------------------------------------------------------
def test_a_wrong_denotation_and_a_wrong_emr_are_recorded_not_left_out():
    """``denotation_correct`` and ``emr_correct`` are written whenever they apply, False as well as True: a row
    without them reads as "does not apply"."""
    from zoo.metrics import ExampleScore

    assert ExampleScore(False, False, "why", False).fields() == {
        "correct": False, "denotation_correct": False, "emr_correct": False, "error": "why"}
    assert ExampleScore(True, True, None, True).fields() == {
        "correct": True, "denotation_correct": True, "emr_correct": True}
    assert ExampleScore(True).fields() == {"correct": True}


# ----- the results writer ------------------------------------------------------------------------------------------
def test_append_row_keeps_the_order_and_replaces_only_a_row_agreeing_on_every_key(tmp_path):
    from zoo.results import append_row, read_rows

    path = tmp_path / "table.csv"
    for ir, data, value in (("rir", "geo", 1), ("rir", "atis", 2), ("lir", "geo", 3)):
        append_row(path, {"ir": ir, "dataset": data, "value": value}, replacing=("ir", "dataset"))
    append_row(path, {"ir": "rir", "dataset": "geo", "value": 4}, replacing=("ir", "dataset"))
    assert [(r["ir"], r["dataset"], r["value"]) for r in read_rows(path)] == [
        ("rir", "atis", "2"), ("lir", "geo", "3"), ("rir", "geo", "4")]  # the old (rir, geo) went; the new is last


def test_floats_are_written_to_six_significant_digits(tmp_path):
    from zoo.results import append_row, read_rows, write_rows

    append_row(tmp_path / "runs.csv", {"test_exact_match": 0.87654321, "seed": 1, "train_seconds": 2847.25})
    assert read_rows(tmp_path / "runs.csv") == [{"test_exact_match": "0.876543", "seed": "1",
                                                "train_seconds": "2847.25"}]
    write_rows(tmp_path / "table.csv", [{"mean": 1 / 3}])
    assert read_rows(tmp_path / "table.csv") == [{"mean": "0.333333"}]


def test_write_rows_header_is_the_union_of_every_rows_keys(tmp_path):
    from zoo.results import read_rows, write_rows

    write_rows(tmp_path / "table.csv", [{"model": "a", "em": 1}, {"model": "b", "denotation": 2}])
    assert read_rows(tmp_path / "table.csv") == [{"model": "a", "em": "1", "denotation": ""},
                                                {"model": "b", "em": "", "denotation": "2"}]


# ----- length buckets -------------------------------------------------------------------------------------------
def test_length_buckets_change_composition_every_epoch_and_come_in_no_length_order():
    """With distinct lengths, only the shuffle before pooling makes a batch's members differ between epochs (one
    global sort, or pools of fixed index ranges, would give the same batches every epoch), and only the shuffle of
    the batches keeps each pool's batches from coming in length order."""
    from datamodules.datamodule import LengthBucketBatchSampler

    lengths = [(i * 7919) % 1000 for i in range(1000)]  # a permutation: every length once
    sampler = LengthBucketBatchSampler(lengths, batch_size=16, seed=3, pool_batches=10)
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        epochs.append(list(sampler))
    assert {frozenset(b) for b in epochs[0]} != {frozenset(b) for b in epochs[1]}
    firsts = [lengths[b[0]] for b in epochs[0]]
    assert not all(firsts[i:i + 10] == sorted(firsts[i:i + 10]) for i in range(0, len(firsts), 10))


# ----- the convergence rule at its edges ---------------------------------------------------------------------------
def test_a_gain_of_exactly_the_threshold_is_not_converged():
    """Converged means a rise of *less* than ``CONVERGED_GAIN`` (0.01 - 0.0 is 0.01 exactly in floating point)."""
    from zoo.train import CONVERGED_GAIN, convergence_columns

    points = [(1000, 0.0), (10_000, CONVERGED_GAIN)]
    assert convergence_columns(points, 10_000) == {"val_late_gain": CONVERGED_GAIN, "converged": False}


def _trainer(**fields):
    from types import SimpleNamespace

    return SimpleNamespace(**{"sanity_checking": False, "should_stop": False, "global_step": 0,
                              "callback_metrics": {}, "min_steps": None, **fields})


def test_training_may_stop_at_min_steps_itself():
    from zoo.train import ValidationCurve

    curve, trainer = ValidationCurve("val/exact_match", stop_when_converged=True), _trainer(min_steps=2000)
    for step in (500, 1000, 2000):  # flat from the start: converged as soon as stopping is allowed
        trainer.global_step, trainer.callback_metrics = step, {"val/exact_match": torch.tensor(0.5)}
        curve.on_validation_end(trainer, None)
        assert trainer.should_stop == (step == 2000)


def test_the_sanity_check_validation_is_not_a_point_of_the_curve():
    """Lightning's sanity check validates the untrained model at step 0; that value is no measurement of training
    and would make every later gain look large."""
    from zoo.train import ValidationCurve

    curve = ValidationCurve("val/exact_match", stop_when_converged=True)
    trainer = _trainer(sanity_checking=True, callback_metrics={"val/exact_match": torch.tensor(0.0)})
    curve.on_validation_end(trainer, None)
    assert curve.points == [] and not trainer.should_stop
    trainer.sanity_checking, trainer.global_step = False, 100
    curve.on_validation_end(trainer, None)
    assert curve.points == [(100, 0.0)]


# ----- CKY under hard-EM ------------------------------------------------------------------------------------------
def test_hard_em_chart_keeps_k_different_sub_programs_per_span():
    """Two derivations of one sub-program compose alike, so a span's K entries are the best derivations of K
    different sub-programs: f over both words (10) and f with a trailing φ word (9) are one sub-program, and the
    second entry goes to f(a) (4), the only one the gold root can be built from."""
    from models import cky

    composition = cky.Composition(constant=torch.tensor([0, 1]),  # Σ = {f, a}; ids 0 = f, 1 = a, 2 = f(a)
                                  table=torch.tensor([[-1, 2, -1], [2, -1, -1], [-1, -1, -1]]), gold=2)
    constant_scores, join_scores = torch.zeros(3, 3, 2), torch.zeros(3, 3)
    constant_scores[0, 2] = torch.tensor([10.0, 0.0])
    constant_scores[0, 1] = torch.tensor([9.0, 0.0])
    constant_scores[1, 2] = torch.tensor([-5.0, -5.0])
    chart = cky.parse(constant_scores, join_scores, k=2, composition=composition)
    assert chart.scores[0, 2].tolist() == [10.0, 4.0] and chart.programs[0, 2].tolist() == [0, 2]
    assert [(score, program) for score, _, program in chart.trees()] == [(4.0, 2), (-5.0, 2)]
