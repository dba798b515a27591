"""Grounded Graph Decoding: featurizer round trips, grouping in the input, bad input, overfitting, CLI smoke."""
from types import SimpleNamespace

import pytest
import torch

from conftest import compose_run, needs_mirror
from datamodules import read_splits
from models.ggd import FeaturizationError, GGDFeaturizer, GroundedGraphDecoder
from zoo.cfq_breakdown import PARTS
from zoo.formalisms import get_formalism
from zoo.metrics import exact_match_flags
from zoo.launch import run
from zoo.results import read_rows
from zoo.types import Example

SPARQL = get_formalism("cfq_sparql")
QUESTIONS = [  # (question, query): hand-written in CFQ's preprocessed form
    ("Who directed and produced M0 and M1",
     "SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . ?x0 film.director.film M0 . ?x0 film.director.film M1 . "
     "?x0 film.producer.film|ns:film.production_company.films M0 . "
     "?x0 film.producer.film|ns:film.production_company.films M1 }"),
    ("Did M0 marry M1", "SELECT count ( * ) WHERE { M0 people.person.spouse_s/ns:people.marriage.spouse M1 . "
                        "FILTER ( M0 != M1 ) }"),
    ("Was M2 a male film director", "SELECT count ( * ) WHERE { M2 a film.director . "
                                    "M2 people.person.gender m_05zppz }"),
]
EXAMPLES = [Example(q, p, {"index": i}) for i, (q, p) in enumerate(QUESTIONS)]


@pytest.fixture(autouse=True)
def syntax_cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))


def _round_trip(featurizer, example) -> str:
    graph = featurizer.target_graph(example)
    edges = [(s, int(r), o) for (s, o), r in zip(graph.edge_index.t().tolist(), graph.edge_type)]
    return SPARQL.unparse(featurizer.query(edges, graph.node_attributes.nonzero().tolist(), count=bool(graph.count)))


def test_target_graph_round_trips_and_counts():
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    # constants are attributes of nodes, not nodes: one per (relation, constant) of training
    assert featurizer.attributes == [("a", "film.director"), ("a", "people.person"),
                                     ("people.person.gender", "m_05zppz")]
    assert featurizer.node_names() == ["M0", "M1", "M2", "?x0"]
    for example in EXAMPLES:
        assert SPARQL.canonical(_round_trip(featurizer, example)) == SPARQL.canonical(example.program)


def test_grouping_merges_a_and_b_into_one_input_position():
    featurizer = GGDFeaturizer(grouping=True).fit(EXAMPLES)
    item = featurizer.encode(EXAMPLES[0])  # Who | directed+produced | M0+M1 | NIL ...
    assert item["n_question"] == 4
    assert (item["words"][:3] > 0).sum(1).tolist() == [1, 2, 2]  # word ids, 0-padded to the widest group
    entity_positions = {node: position for node, position in item["mentions"] if node < featurizer.n_entities}
    assert entity_positions == {0: 2, 1: 2}  # M0 and M1 share their group's contextual embedding
    ungrouped = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES).encode(EXAMPLES[0])
    assert ungrouped["n_question"] == 8  # seven words and NIL


def test_questions_tagged_one_at_a_time_read_the_cache_file_once(monkeypatch):
    from models.syntax import SyntaxCache

    loads = []
    original = SyntaxCache._load
    monkeypatch.setattr(SyntaxCache, "_load", lambda self: loads.append(1) or original(self))
    featurizer = GGDFeaturizer(grouping=True).fit(EXAMPLES)
    for question in ("Did M0 edit M1", "Did M1 direct M0", "Was M2 a film director"):  # outside fit's bulk tagging
        featurizer.encode(Example(question, EXAMPLES[1].program, {}))
    assert len(loads) == 1


def test_encoder_reads_parts_of_speech_and_closed_class_words():
    featurizer = GGDFeaturizer(grouping=True).fit(EXAMPLES)
    names = {i: tag for tag, i in featurizer.tags.items()}
    item = featurizer.encode(EXAMPLES[0])
    assert [names[i] for i in item["tags"]] == ["Who", "[VERB]", "[entity]", "<nil>", "<sep>", "<x0>"]
    assert "directed" not in featurizer.tags  # the words themselves only reach the grounding attention
    with pytest.raises(ValueError, match="encoder_input must be 'tags' or 'words'"):
        GGDFeaturizer(encoder_input="chars")


def test_bad_questions_fail_at_featurisation_with_the_example_named():
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    with pytest.raises(FeaturizationError, match="example 7 .*empty question"):
        featurizer.encode(Example("", EXAMPLES[0].program, {"index": 7}))
    with pytest.raises(FeaturizationError, match="entity M5 is beyond the M0..M2 seen in training"):
        featurizer.encode(Example("Did M5 marry M1", EXAMPLES[1].program, {"index": 3}))
    long_question = " ".join(["Did M0 marry M1 and"] * 30) + " M1"  # longer than anything in training: fine
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", hidden_size=8, embedding_dim=8, attention_dim=4)
    batch = featurizer.collate([featurizer.encode(Example(long_question, EXAMPLES[1].program, {}))])
    [program] = model.eval().parse(batch)
    SPARQL.parse(program)  # always a query the formalism can read


def test_untrained_model_always_decodes_a_readable_query():
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", hidden_size=8, embedding_dim=8, attention_dim=4,
                                 threshold=1.1)  # nothing passes: the most probable triple is kept
    programs = model.eval().parse(featurizer.collate([featurizer.encode(e) for e in EXAMPLES]))
    for program in programs:
        kept = [c for c in SPARQL.parse(program).conjuncts if type(c).__name__ != "Filter"]  # (a spouse's is derived)
        assert len(kept) == 1


def test_decoding_leaves_out_the_types_a_chosen_triple_implies():
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    implied = {(relation, featurizer.attributes[a]) for relation, r in featurizer.relations.items()
               for a in featurizer.implied_types[r].nonzero().flatten().tolist()}
    # director.film is film.director's own property and never beside that type in training; the producer relation
    # has two domains (film.producer, film.production_company), so it implies neither
    assert implied == {("film.director.film", ("a", "film.director")),
                       ("people.person.spouse_s/ns:people.marriage.spouse", ("a", "people.person"))}
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=8)
    out = model(featurizer.collate([featurizer.encode(EXAMPLES[0])]))
    places = out["nodes"][0].tolist()  # the node axis holds the question's nodes: their places, not their slots
    x0, m0 = (places.index(featurizer.node_names().index(name)) for name in ("?x0", "M0"))
    out["edges"] = torch.full_like(out["edges"], -10.0)
    out["edges"][0, x0, m0, featurizer.relations["film.director.film"]] = 10.0
    out["attributes"] = torch.full_like(out["attributes"], -10.0)
    out["attributes"][0, x0] = 10.0  # every attribute of ?x0 passes the threshold ...
    out["attribute_candidates"][0, x0] = True  # ... and may be decoded, film.director too
    out["count"] = torch.tensor([-10.0])
    [program] = model.decode(out, threshold=0.5)
    assert program == ("SELECT DISTINCT ?x0 WHERE { ?x0 film.director.film M0 . ?x0 a people.person . "
                       "?x0 people.person.gender m_05zppz }")


def test_a_questions_scores_do_not_depend_on_its_batch():
    """The node axis holds each question's own nodes, padded to the batch's most: a question's loss, candidates and
    decoded query are the same alone as beside questions with more nodes, and padding is never a candidate."""
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    torch.manual_seed(0)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=4).eval()
    items = [featurizer.encode(e) for e in EXAMPLES]
    batch = featurizer.collate(items)
    assert batch["node_mask"].sum(1).tolist() == [3, 3, 2]  # ?x0 and the entities each question mentions
    out = model(batch)
    padding = ~batch["node_mask"]
    assert not out["edge_candidates"][padding].any() and not out["edge_candidates"][:, :, None][padding].any()
    assert not out["attribute_candidates"][padding].any()
    alone = [featurizer.collate([item]) for item in items]
    assert torch.allclose(model.loss(batch)[0] * 3, sum(model.loss(one)[0] for one in alone), atol=1e-5)
    assert model.parse(batch) == [program for one in alone for program in model.parse(one)]


@pytest.mark.parametrize("heads,group_scores,attention", [(1, "sum", "softmax"), (2, "sum", "softmax"),
                                                         (2, "max", "softmax"), (2, "max", "sigmoid")])
def test_grounded_edge_score_matches_the_attention_written_out(heads, group_scores, attention):
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    torch.manual_seed(0)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=4,
                                 attention_heads=heads, group_scores=group_scores, grounding_attention=attention)
    batch = featurizer.collate([featurizer.encode(e) for e in EXAMPLES])
    second = torch.zeros_like(batch["words"])  # make the first question's second group two words
    second[0, 1] = batch["words"][0, 3, 0]
    batch["words"] = torch.cat([batch["words"], second], dim=2)
    words = model.word_embedding(batch["words"])
    groups = words.sum(dim=2)
    states = model.encoder(groups, batch["lengths"])
    nodes = torch.bmm(batch["incidence"], states)
    edges, _ = model._grounding(nodes, states, groups, words, batch)
    b, s, o, r = 0, 0, 1, 2  # one (question, subject, object, relation), by hand: a sum over heads
    length, n_relations = int(batch["question_mask"][b].sum()), len(featurizer.relations)
    expected = 0.0
    for h in range(heads):
        q, k = slice(4 * h, 4 * h + 4), model.key.weight[4 * h: 4 * h + 4]
        query = model.query_subject(nodes[b, s])[q] + model.query_object(nodes[b, o])[q]
        logits = (states[b, :length] @ k.T) @ query / 2.0  # temperature sqrt(attention_dim)
        weights = logits.softmax(0) if attention == "softmax" else logits.sigmoid()  # sigmoid: each on its own
        w_r = model.grounded_score.weight[h * n_relations + r]
        if group_scores == "sum":
            values = groups[b, :length] @ w_r
        else:  # each group's best word (every group here has one word but the second, which has two)
            values = words[b, :length, 0] @ w_r
            values[1] = torch.maximum(words[b, 1, 0] @ w_r, words[b, 1, 1] @ w_r)
        expected = expected + (weights * values).sum()
    assert torch.allclose(edges[b, s, o, r], expected, atol=1e-5)
    assert ("-groupmax" in model.backbone) == (group_scores == "max")  # rows keep the variants apart
    assert model.backbone.endswith("-sigmoid") == (attention == "sigmoid")
    with pytest.raises(ValueError, match="attention_heads"):
        GroundedGraphDecoder(featurizer, "cfq_sparql", attention_heads=0)
    with pytest.raises(ValueError, match="group_scores"):
        GroundedGraphDecoder(featurizer, "cfq_sparql", group_scores="mean")
    with pytest.raises(ValueError, match="grounding_attention"):
        GroundedGraphDecoder(featurizer, "cfq_sparql", grounding_attention="relu")


def test_shared_node_terms_leave_telling_relations_apart_to_grounding():
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    torch.manual_seed(0)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=4,
                                 node_terms="shared")
    with torch.no_grad():
        model.relation_bias.normal_()
        batch = featurizer.collate([featurizer.encode(e) for e in EXAMPLES])
        edges = model(batch)["edges"]
        words = model.word_embedding(batch["words"])
        states = model.encoder(words.sum(dim=2), batch["lengths"])
        nodes = torch.bmm(batch["incidence"], states)
        grounded, _ = model._grounding(nodes, states, words.sum(dim=2), words, batch)
    node_terms = edges - grounded - model.relation_bias  # what the node states add: one number for all relations
    assert torch.allclose(node_terms, node_terms[..., :1].expand_as(node_terms), atol=1e-5)
    assert model.backbone.endswith("-sharednodes")
    with pytest.raises(ValueError, match="needs grounding"):
        GroundedGraphDecoder(featurizer, "cfq_sparql", node_terms="shared", grounding=False)
    with pytest.raises(ValueError, match="node_terms"):
        GroundedGraphDecoder(featurizer, "cfq_sparql", node_terms="none")


@pytest.mark.parametrize("encoder_input", ["tags", "words"])
def test_input_dropout_hides_question_inputs_from_the_encoder_in_training_only(encoder_input):
    """Word dropout replaces a question position's encoder input by the unknown one, in training and never outside
    it, and never a padding or tail position; grounding still reads every word."""
    featurizer = GGDFeaturizer(grouping=False, encoder_input=encoder_input).fit(EXAMPLES)
    torch.manual_seed(0)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=4,
                                 input_dropout=0.5)
    batch = featurizer.collate([featurizer.encode(e) for e in EXAMPLES])
    seen = []
    model.encoder.register_forward_hook(lambda module, args, output: seen.append(args[0].detach().clone()))
    model.eval()
    model.logits(batch)
    model.train()
    model.logits(batch)
    clean, dropped = seen
    changed = (clean != dropped).any(-1)
    assert changed.any() and not changed[~batch["question_mask"]].any()
    unknown = (model.tag_embedding.weight[featurizer.tags["<unk>"]] if encoder_input == "tags"
               else model.word_embedding.weight[featurizer.words["<unk>"]])
    assert torch.equal(dropped[changed], unknown.detach().expand(int(changed.sum()), -1))
    with pytest.raises(ValueError, match="input_dropout"):
        GroundedGraphDecoder(featurizer, "cfq_sparql", input_dropout=1.0)


def _model_with_dev():
    """A tiny GGD whose (mock) trainer hands it EXAMPLES as dev, and the index of each threshold."""
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, num_layers=1,
                                 attention_dim=8)
    batch = {**featurizer.collate([featurizer.encode(e) for e in EXAMPLES]), "examples": EXAMPLES}
    model.trainer = SimpleNamespace(datamodule=SimpleNamespace(
        val=EXAMPLES, val_dataloader=lambda: [batch], transfer_batch_to_device=lambda b, device, index: b))
    index = {t: i for i, t in enumerate(model.THRESHOLDS)}
    return model, index


def test_decision_thresholds_are_chosen_on_dev(monkeypatch):
    model, index = _model_with_dev()
    tally = torch.zeros(len(index), len(index), dtype=torch.long)
    tally[index[0.3], index[0.1]] = tally[index[0.2], index[0.45]] = 3  # exact questions at (edge, attribute)
    monkeypatch.setattr(model, "exact_by_thresholds", lambda out, target: tally)
    model.on_test_start()
    assert model.thresholds == (0.3, 0.1)  # chosen together; a tie goes to the higher edge threshold
    model.hparams.selection_metric = model.primary_metric = "emr"  # the authors' protocol: one threshold, by emr
    wrong = "SELECT count ( * ) WHERE { M0 film.director.film M1 }"  # wrong under emr too (a relation)
    right_at = {0.3: 3, 0.35: 2, 0.5: 2}  # dev questions decoded right at each threshold
    monkeypatch.setattr(model, "decode", lambda out, threshold: [
        e.program if i < right_at.get(threshold, 0) else wrong for i, e in enumerate(EXAMPLES)])
    model.on_test_start()
    assert model.thresholds == (0.3, 0.3)
    model.hparams.tune_threshold, model.hparams.threshold, model.hparams.attribute_threshold = False, 0.5, None
    model.on_test_start()
    assert model.thresholds == (0.5, 0.5)


def test_decision_thresholds_count_the_dev_questions_of_every_process(monkeypatch):
    """Under DDP each process tallies its shard of dev; the thresholds come from the sum over processes."""
    import models.ggd

    model, index = _model_with_dev()
    here, other = (torch.zeros(len(index), len(index), dtype=torch.long) for _ in range(2))
    here[index[0.3], index[0.1]] = 2  # this process's best pair
    other[index[0.2], index[0.45]] = 3  # the other process's: together (0.2, 0.45) has 3, (0.3, 0.1) 2
    monkeypatch.setattr(model, "exact_by_thresholds", lambda out, target: here.clone())
    monkeypatch.setattr(models.ggd, "distributed", lambda: True)
    monkeypatch.setattr(models.ggd.dist, "all_reduce", lambda tally: tally.add_(other))
    model.on_test_start()
    assert model.thresholds == (0.2, 0.45)


def test_exact_match_by_threshold_pair_agrees_with_decoding():
    """``exact_by_thresholds`` counts, without decoding, the questions ``decode`` gets right at each (edge,
    attribute) threshold pair, the fallback of a query where nothing passes included."""
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=4).eval()
    batch = featurizer.collate([featurizer.encode(e) for e in EXAMPLES])
    out, target = model(batch), batch["target"]
    generator = torch.Generator().manual_seed(0)
    gold = [SPARQL.canonical(e.program) for e in EXAMPLES]
    agreed = 0
    for trial in range(24):  # gold scores above wrong ones on average, each scaled and shifted at random
        scale, shift = 1 + 6 * torch.rand(2, generator=generator), -4 * torch.rand(1, generator=generator)
        for key, s in (("edges", scale[0]), ("attributes", scale[1])):
            noise = torch.randn(out[key].shape, generator=generator)
            out[key] = (2 * target[key] - 1) * s + noise + shift
        out["count"] = (2 * target["count"] - 1) * (1 if trial % 6 else -1)  # some with the query type wrong
        tally = model.exact_by_thresholds(out, target)
        for i, edge in enumerate(model.THRESHOLDS):
            for j, attribute in enumerate(model.THRESHOLDS):
                decoded = [SPARQL.canonical(p) for p in model.decode(out, edge, attribute)]
                right = sum(d == g for d, g in zip(decoded, gold))
                assert tally[i, j] == right, (trial, edge, attribute)
                agreed += right
    assert agreed > 0  # the trials reach thresholds where questions are right
    assert model.best_thresholds(tally)[2] == tally.max()


def _overfit(examples, seed, steps=600, check_every=50):
    """The exact-match flags of a tiny GGD trained on ``examples`` from ``seed``, once all are right or after
    ``steps`` full-batch steps."""
    featurizer = GGDFeaturizer().fit(examples)
    torch.manual_seed(seed)
    # Two layers: CFQ questions that read as the same tag sequence ("What was founded by M0 and founded by a actor",
    # "What was edited by M0 and edited by a person") only come apart through grounding, and one layer's states
    # leave it too little to attend with.
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=32, hidden_size=64, num_layers=2,
                                 attention_dim=32, dropout=0.0, lr=1e-2)
    batch = featurizer.collate([featurizer.encode(e) for e in examples])
    optimizer = model.configure_optimizers()
    for step in range(1, steps + 1):
        model.train()
        loss, uncoverable = model.loss(batch)
        assert uncoverable == 0
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % check_every == 0:
            flags = exact_match_flags(model.eval().parse(batch), [e.program for e in examples], SPARQL)
            if all(flags):
                break
    return flags


@needs_mirror
def test_tiny_ggd_overfits_16_cfq_examples():
    examples = read_splits("cfq_mcd1")["train"][:16]
    # Here seeds 0, 1 and 2 fit all 16 after 150, 300 and 300 steps. Which initialisations settle in a local minimum
    # differs between CPUs (with 32 questions, 1,200 steps from seed 2 fit all here and left one wrong on CI), so a
    # model that can fit them is asked to do so from one of three.
    wrong = {}
    for seed in (0, 1, 2):
        flags = _overfit(examples, seed)
        if all(flags):
            return
        wrong[seed] = flags.count(False)
    raise AssertionError(f"no initialisation overfit the 16 questions; wrong per seed: {wrong}")


@needs_mirror
def test_featurizer_round_trip_on_every_mcd1_dev_query():
    splits = read_splits("cfq_mcd1")
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(splits["train"])
    for example in splits["dev"]:
        assert SPARQL.canonical(_round_trip(featurizer, example)) == SPARQL.canonical(example.program), example.meta


def test_gold_variables_hand_the_model_exactly_the_gold_querys_variables():
    """The GGD authors' protocol: with variables="gold" the candidate nodes are the question's entities and the
    gold query's variables, no other variable slot."""
    two_variables = Example("Who directed a film edited by M0",
                            "SELECT DISTINCT ?x0 WHERE { ?x0 film.director.film ?x1 . ?x1 film.film.edited_by M0 }",
                            {"index": 3})
    examples = [*EXAMPLES, two_variables]
    every, gold = (GGDFeaturizer(grouping=False, encoder_input="words", variables=v).fit(examples)
                   for v in ("all", "gold"))
    assert every.n_variables == gold.n_variables == 2
    model = GroundedGraphDecoder(gold, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=8)
    for example, expected in zip(examples, (["?x0"], [], [], ["?x0", "?x1"])):
        batch = gold.collate([gold.encode(example)])
        names = [gold.node_names()[slot] for slot in batch["nodes"][0].tolist()]
        assert [n for n in names if n.startswith("?x")] == expected
        assert batch["incidence"][0].sum(-1).gt(0).all()  # each node on the axis is in the sequence
        everyone = every.collate([every.encode(example)])["nodes"][0].tolist()
        assert everyone[-every.n_variables:] == list(range(every.n_entities, every.n_nodes))  # the default: all
    assert GGDFeaturizer.from_state_dict(gold.state_dict()).variables == "gold"
    with pytest.raises(ValueError, match="variables"):
        GGDFeaturizer(variables="predicted")


def test_predicted_variables_limit_the_candidate_variables_to_the_predicted_number():
    """predict_variables: the target holds the gold query's number of variables; training conditions the candidates
    on it, evaluation on the head's prediction; the head is trained, and a model fits the numbers of a few queries."""
    two_variables = Example("Who directed a film edited by M0",
                            "SELECT DISTINCT ?x0 WHERE { ?x0 film.director.film ?x1 . ?x1 film.film.edited_by M0 }",
                            {"index": 3})
    examples = [*EXAMPLES, two_variables]
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(examples)
    batch = featurizer.collate([featurizer.encode(e) for e in examples])
    assert batch["target"]["variables"].tolist() == [1, 0, 0, 2]
    torch.manual_seed(0)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=8,
                                 predict_variables=True, lr=1e-2)
    assert model.backbone == "bilstm3x8-varcount"  # results rows keep it apart from the model without the head
    variable_slot = model.kinds[batch["nodes"]] == 1  # [B, P]

    def candidate_variables(out) -> list[int]:  # per question, the variable slots that are candidate nodes
        return (out["attribute_candidates"].any(-1) & variable_slot).sum(1).tolist()

    assert candidate_variables(model.train()(batch)) == [1, 0, 0, 2]
    optimizer = model.configure_optimizers()
    for _ in range(100):
        loss, _ = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    out = model.eval()(batch)
    assert out["variables"].argmax(-1).tolist() == [1, 0, 0, 2]
    assert candidate_variables(out) == [1, 0, 0, 2]
    with torch.no_grad():
        model.variables_score.bias.copy_(torch.tensor([0.0, 0.0, 100.0]))  # predict 2 for every question
    assert candidate_variables(model(batch)) == [2, 2, 2, 2]
    assert candidate_variables(model.train()(batch)) == [1, 0, 0, 2]  # training still reads the gold numbers


def test_averaged_models_score_with_the_mean_of_their_logits():
    """average_with: outside training the logits are the models' mean, the candidates follow the averaged number of
    variables, a model averaged with itself decodes as alone, training ignores the others, and a model whose
    featurizer reads other labels is refused."""
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    batch = featurizer.collate([featurizer.encode(e) for e in EXAMPLES])
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=4,
                                           predict_variables=True).eval())
    first, second = models
    with torch.no_grad():
        alone = [model(batch) for model in models]
        averaged = first.average_with([second])(batch)
    for key in ("edges", "attributes", "count", "variables"):
        assert torch.allclose(averaged[key], (alone[0][key] + alone[1][key]) / 2)
    assert torch.equal(averaged["edge_candidates"], first._candidates(batch, averaged["variables"].argmax(-1))[0])
    assert torch.equal(first.train()(batch)["edges"], first.logits(batch)["edges"])  # training: this model alone
    first.eval()
    itself = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8, attention_dim=4,
                                  predict_variables=True).eval()
    plain = itself.parse(batch)
    assert itself.average_with([itself]).parse(batch) == plain
    other = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES[:2])
    with pytest.raises(ValueError, match="other words"):
        first.average_with([GroundedGraphDecoder(other, "cfq_sparql", embedding_dim=8, hidden_size=8)])
    with pytest.raises(ValueError, match="predict_variables"):
        first.average_with([GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=8, hidden_size=8)])


def test_filters_are_derived_from_the_relations_that_always_bring_them():
    featurizer = GGDFeaturizer(grouping=False, encoder_input="words").fit(EXAMPLES)
    assert featurizer.filter_relations == ["people.person.spouse_s/ns:people.marriage.spouse"]
    assert "!=" not in featurizer.relations  # nothing to learn: decoding adds the filter of each spouse edge
    marry = EXAMPLES[1]
    assert featurizer.target_graph(marry).edge_index.shape[1] == 1
    assert SPARQL.canonical(_round_trip(featurizer, marry)) == SPARQL.canonical(marry.program)
    exception = Example("Did M0 influence M1", "SELECT count ( * ) WHERE { M0 influence.influence_node.influenced M1 . "
                                               "FILTER ( M0 != M1 ) }", {"index": 3})
    learned = GGDFeaturizer(grouping=False, encoder_input="words").fit([*EXAMPLES, exception])
    # a relation whose every edge in training comes with its filter joins the derived ones
    assert learned.filter_relations == ["influence.influence_node.influenced",
                                        "people.person.spouse_s/ns:people.marriage.spouse"]
    unexplained = Example("Did M0 meet M1", "SELECT count ( * ) WHERE { M0 people.person.spouse_s/ns:people.marriage."
                                            "spouse ?x0 . FILTER ( M0 != M1 ) }", {"index": 4})
    learned = GGDFeaturizer(grouping=False, encoder_input="words").fit([*EXAMPLES, unexplained])
    assert learned.filter_relations == [] and "!=" in learned.relations  # no rule: filters are learned as edges
    for example in (*EXAMPLES, unexplained):
        assert SPARQL.canonical(_round_trip(learned, example)) == SPARQL.canonical(example.program)
    off = GGDFeaturizer(grouping=False, encoder_input="words", derived_filters=False).fit(EXAMPLES)
    assert off.filter_relations == [] and "!=" in off.relations


def test_checkpointed_featurizer_restores_everything():
    featurizer = GGDFeaturizer(grouping=True, dependencies=True).fit(EXAMPLES)
    restored = GGDFeaturizer.from_state_dict(featurizer.state_dict())
    assert restored.state_dict() == featurizer.state_dict()
    assert restored.dependency_labels and restored.dependency_labels["<unk>"] == 0


def test_dependency_gnn_variant_runs_and_learns():
    featurizer = GGDFeaturizer(grouping=True, dependencies=True).fit(EXAMPLES)
    model = GroundedGraphDecoder(featurizer, "cfq_sparql", embedding_dim=16, hidden_size=16, attention_dim=8,
                                 gnn_layers=2, dropout=0.0)
    batch = featurizer.collate([featurizer.encode(e) for e in EXAMPLES])
    assert batch["dependencies"].num_nodes == sum(featurizer.encode(e)["n_question"] - 1 for e in EXAMPLES)
    out = model(batch)
    out["edges"][out["edge_candidates"]].sum().backward()
    assert all(layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0 for layer in model.gnn)


@needs_mirror
def test_smoke_run_on_cfq_mcd1(tmp_path):
    """``python benchmarks/run.py model=ggd data=cfq_mcd1 debug=smoke``, as the product card writes it."""
    cfg = compose_run("model=ggd", "data=cfq_mcd1", "debug=smoke", f"results_file={tmp_path / 'runs.csv'}")
    row = run(cfg, tmp_path / "run")
    assert row["model"] == "ggd" and row["variant"] == "ggd-train32-eval8" and 0.0 <= row["test_exact_match"] <= 1.0
    assert (tmp_path / "run" / "predictions.jsonl").read_text().count("\n") == row["n_test"]
    # the breakdown of its wrong queries is kept beside its row, where it outlives the run directory
    breakdown = read_rows(tmp_path / "cfq_edge_match.csv")
    assert [(b["run_dir"], b["seed"], float(b["test_exact_match"])) for b in breakdown] == [
        (row["run_dir"], str(row["seed"]), round(row["test_exact_match"], 6))]
    assert {f"wrong_{part}" for part in PARTS} <= breakdown[0].keys()


@needs_mirror
def test_smoke_run_under_the_authors_protocol_reports_emr(tmp_path):
    cfg = compose_run("experiment=ggd_cfq_authors_protocol", "debug=smoke", f"results_file={tmp_path / 'runs.csv'}")
    row = run(cfg, tmp_path / "run")
    assert row["variant"] == "ggd-gold_variables-train32-eval8" and row["protocol"] == "ggd_authors_emr"
    assert row["best_val_metric"] == "val/emr" and row["test_exact_match"] <= row["test_emr"] <= 1.0


def test_ggd_cfq_is_the_authors_schedule_under_both_of_its_names():
    """issue 24's rule made the authors' schedule experiment=ggd_cfq; the rows of its screening name
    (ggd_cfq_groupmax_authors_schedule) must keep meaning the same runs, and the CPU schedule stays pinned."""
    chosen = compose_run("experiment=ggd_cfq", "seed=4")
    assert chosen == compose_run("experiment=ggd_cfq_groupmax_authors_schedule", "seed=4")
    assert (chosen.trainer.max_epochs, chosen.data.batch_size, chosen.model.params.warmup_epochs) == (100, 512, 10)
    assert chosen.model.params.group_scores == "max" and chosen.model.params.predict_variables
    pinned = compose_run("experiment=ggd_cfq_cpu_schedule")
    assert (pinned.trainer.max_epochs, pinned.data.batch_size, pinned.model.variant) == (20, 128, "ggd")
    assert chosen.model.params.input_dropout == 0.0
    screened = compose_run("experiment=ggd_cfq_input_dropout", "seed=4")  # differs from ggd_cfq in its name and 0.1
    assert screened.model.params.input_dropout == 0.1 and screened.model.variant != chosen.model.variant
    screened.model.params.input_dropout, screened.model.variant = 0.0, chosen.model.variant
    assert screened.trainer == chosen.trainer and screened.model == chosen.model and screened.data == chosen.data


@pytest.mark.parametrize("chunks", [1, 3])
def test_the_bilstm_is_a_bidirectional_lstm_over_each_sequence_alone(chunks):
    """models.ggd.BiLSTM (reversal within each length, no packing; in one call, or in runs of sequences sorted by
    length) against nn.LSTM(bidirectional=True) on packed sequences, with the same weights: the same states, zeros
    past each length, the same gradients."""
    from models.ggd import BiLSTM

    torch.manual_seed(0)
    ours = BiLSTM(5, 4, num_layers=2, dropout=0.0, chunks=chunks)
    reference = torch.nn.LSTM(5, 4, num_layers=2, bidirectional=True, batch_first=True)
    with torch.no_grad():
        for layer in range(2):
            for direction, suffix in ((ours.forwards, ""), (ours.backwards, "_reverse")):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(reference, f"{name}_l{layer}{suffix}").copy_(getattr(direction[layer], f"{name}_l0"))
    lengths = torch.tensor([6, 2, 4, 1, 5, 3, 2])
    inputs = torch.randn(len(lengths), 6, 5, requires_grad=True)
    states = ours(inputs, lengths)
    packed = torch.nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
    expected, _ = torch.nn.utils.rnn.pad_packed_sequence(reference(packed)[0], batch_first=True, total_length=6)
    assert torch.allclose(states, expected, atol=1e-6)
    assert not states[1, 2:].any() and not states[2, 4:].any()
    grad, = torch.autograd.grad(states.square().sum(), inputs)
    expected_grad, = torch.autograd.grad(expected.square().sum(), inputs)
    assert torch.allclose(grad, expected_grad, atol=1e-6)
