"""models/span_cky.py: a tiny SpanBasedSP learns trees it was never shown (hard-EM) and parses its training set;
smoke runs through benchmarks/run.py; a dataset whose programs have no span types is refused."""
import pytest
import torch

from conftest import compose_run, needs_mirror
from datamodules import read_splits
from models.span_cky import SpanBasedParser, SpanFeaturizer
from zoo.types import Example
from zoo.formalisms import get_formalism
from zoo.metrics import exact_match_flags
from zoo.parser import UnsupportedFormalismError
from zoo.train import run


def overfit(examples, formalism, steps):
    featurizer = SpanFeaturizer(formalism).fit(examples)
    torch.manual_seed(0)
    model = SpanBasedParser(featurizer, formalism, embedding_dim=32, hidden_size=32, num_layers=1, dropout=0.0,
                            lr=2e-2)
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
@pytest.mark.parametrize("data", ["geo_funql_iid", "scan_sp_simple"])
def test_smoke_run(tmp_path, data):
    cfg = compose_run("model=span_cky", f"data={data}", "debug=smoke", f"results_file={tmp_path / 'runs.csv'}")
    row = run(cfg, tmp_path / "run")
    assert row["model"] == "span_cky" and 0.0 <= row["test_exact_match"] <= 1.0
    assert (tmp_path / "run" / "predictions.jsonl").read_text().count("\n") == row["n_test"]


def test_a_dataset_without_span_types_is_refused_before_training():
    with pytest.raises(UnsupportedFormalismError, match="span_cky.*scan"):
        SpanBasedParser.build([], "scan")


def test_lexicon_holds_entity_names_and_the_manual_phrases():
    examples = [Example("walk right twice", "i_twice ( i_walk ( i_right ) )", {}),
                Example("jump", "i_jump ( )", {})]
    featurizer = SpanFeaturizer("scan_sp").fit(examples)
    categories = featurizer.categories
    assert [categories[c] for c in featurizer.lexicon["right"]] == ["i_right"]
    assert "left" not in featurizer.lexicon  # i_left is not in this training set's Σ
    assert featurizer.encode(examples[0])["matches"] == [(0, 1, categories.index("i_walk")),
                                                          (1, 2, categories.index("i_right")),
                                                          (2, 3, categories.index("i_twice"))]
    assert SpanFeaturizer("scan_sp", manual_lexicon=False).fit(examples).lexicon == {}
    geo = SpanFeaturizer("funql").fit([Example("where is new york ?", "answer ( loc_1 ( stateid ( 'new york' ) ) )",
                                               {})])
    assert [geo.categories[c] for c in geo.lexicon["new york"]] == ["stateid ( 'new york' )"]
