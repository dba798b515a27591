"""Dataset readers and ParsingDataModule.

Tests marked ``mirror`` read the local data mirror (``ZOO_DATA``, e.g. ``../shared/data``) and check every
registered dataset against the sizes its PROVENANCE.md verifies against the papers; they skip when the mirror is
absent. The rest use small hand-written files (``tests/fixtures/datasets``, ``tmp_path``).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import compose_run

from datamodules import DataConfigError, DataFormatError, MissingDataError, ParsingDataModule, read_splits
from datamodules.base import iter_json_array, resolve_root
from datamodules.cfq import preprocess_sparql, read_release, tokenize_punctuation
from datamodules.datamodule import LengthBucketBatchSampler, fixed_subset, hold_out
from zoo.registry import DATASETS
from zoo.types import Example

MIRROR = resolve_root()
FIXTURES = Path(__file__).parent / "fixtures" / "datasets"
REPO = Path(__file__).resolve().parent.parent
mirror = pytest.mark.skipif(not (MIRROR / "scan").is_dir() or not (MIRROR / "cfq").is_dir(),
                            reason=f"data mirror not found at {MIRROR} (set ZOO_DATA=../shared/data)")

# (train, dev, test) as the readers return them (dev None: held out by the datamodule), from the PROVENANCE files.
SIZES = {
    "scan_simple": (16728, None, 4182), "scan_length": (16990, None, 3920), "scan_addjump": (14670, None, 7706),
    "scan_turn_left": (21890, None, 1208), "scan_around_right": (15225, None, 4476),
    "scan_right": (15225, None, 4476), "scan_mcd1": (8365, None, 1045), "scan_mcd2": (8365, None, 1045),
    "scan_mcd3": (8365, None, 1045),
    "scan_sp_simple": (13383, 3345, 4182), "scan_sp_right": (12180, 3045, 4476),
    "scan_sp_around_right": (12180, 3045, 4476),
    "geo_funql_iid": (540, 60, 280), "geo_funql_template": (544, 60, 276), "geo_funql_length": (540, 60, 280),
    "geo_sql_iid": (549, 49, 279), "geo_sql_template": (536, 159, 182),
    "atis_sql_iid": (4347, 486, 447), "atis_sql_template": (4812, 121, 347),
    "scholar_sql_iid": (499, 100, 218), "scholar_sql_template": (408, 94, 315),
    "cfq_mcd1": (95743, 11968, 11968), "cfq_mcd2_partial": (80908, 9756, 9741),
    "cfq_mcd3_partial": (71801, 7914, 7920), "cfq_random_partial": (47974, 5916, 5917),
    "cogs": (24155, 3000, 3000), "cogs_gen": (24155, 3000, 21000),
}
FULL_CFQ_ONLY_IN_RELEASE = ("cfq_mcd2", "cfq_mcd3", "cfq_random")

# First training example: utterance and the start of the program, read off the files by hand.
FIRST = {
    "scan_simple": ("jump opposite right twice and turn opposite right thrice", "I_TURN_RIGHT I_TURN_RIGHT I_JUMP"),
    "scan_length": ("walk", "I_WALK"),
    "scan_addjump": ("jump", "I_JUMP"),
    "scan_turn_left": ("turn left", "I_TURN_LEFT"),
    "scan_around_right": ("walk opposite right thrice after run opposite right", "I_TURN_RIGHT I_TURN_RIGHT I_RUN"),
    "scan_right": ("walk opposite right thrice after run opposite right", "I_TURN_RIGHT I_TURN_RIGHT I_RUN"),
    "scan_mcd1": ("run left twice after look around right", "I_TURN_RIGHT I_LOOK"),
    "scan_mcd2": ("look around left thrice and walk", "I_TURN_LEFT I_LOOK"),
    "scan_mcd3": ("run around left after run opposite left twice", "I_TURN_LEFT I_TURN_LEFT I_RUN"),
    "scan_sp_simple": ("run around left twice and jump left", "i_and ( i_twice ( i_run ( i_left , i_around ) )"),
    "scan_sp_right": ("turn left thrice after walk around right", "i_after ( i_thrice ( i_turn ( i_left ) )"),
    "scan_sp_around_right": ("look around left thrice and run opposite left twice", "i_and ( i_thrice ( i_look"),
    "geo_funql_iid": ("what state has the largest city ?", "answer ( state ( loc_1 ( largest ( city ( all ) ) ) ) )"),
    "geo_funql_template": ("what is the tallest mountain in america ?", "answer ( highest ( mountain ( loc_2"),
    "geo_funql_length": ("what is the longest river in the us ?", "answer ( longest ( river ( loc_2"),
    "geo_sql_iid": ("what is the biggest city in state_name0", "SELECT CITYalias0.CITY_NAME FROM CITY AS CITYalias0"),
    "geo_sql_template": ("what is the biggest city in state_name0", "SELECT CITYalias0.CITY_NAME FROM CITY"),
    "atis_sql_iid": ("list all the flights that arrive at airport_code0 from various cities",
                     "SELECT DISTINCT FLIGHTalias0.FLIGHT_ID FROM"),
    "atis_sql_template": ("list all the flights that arrive at airport_code0 from various cities",
                          "SELECT DISTINCT FLIGHTalias0.FLIGHT_ID FROM"),
    "scholar_sql_iid": ("papers that are coauthored by authorname0 and authorname1",
                        "SELECT DISTINCT WRITESalias0.PAPERID"),
    "scholar_sql_template": ("papers that are coauthored by authorname0 and authorname1",
                             "SELECT DISTINCT WRITESalias0.PAPERID"),
    "cfq_mcd1": ("Did M2 marry M3 , marry a male person , and marry M4 and M5",
                 "SELECT count ( * ) WHERE { ?x0 a people.person . ?x0 people.person.gender m_05zppz ."),
    "cfq_mcd2_partial": ("Did M1 star a child and sibling of M0", "SELECT count ( * ) WHERE {"),
    "cfq_mcd3_partial": ("Was M1 edited by and written by a actor", "SELECT count ( * ) WHERE { ?x0 a film.actor ."),
    "cfq_random_partial": ("What editor , writer , and director of M0 , M1 , and M2 did a film producer marry and "
                           "influence", "SELECT DISTINCT ?x0 WHERE {"),
    "cogs": ("A rose was helped by a dog .", "rose ( x _ 1 ) AND help . theme ( x _ 3 , x _ 1 )"),
    "cogs_gen": ("A rose was helped by a dog .", "rose ( x _ 1 ) AND help . theme ( x _ 3 , x _ 1 )"),
}


def test_every_registered_dataset_is_covered_here():
    assert set(DATASETS) == set(SIZES) | set(FULL_CFQ_ONLY_IN_RELEASE)
    assert set(FIRST) == set(SIZES)


# ------------------------------------------------------------------------------------------------- the mirror
@mirror
@pytest.mark.parametrize("name", sorted(SIZES))
def test_reader_on_mirror(name):
    splits = read_splits(name, MIRROR, cache=name == "scan_simple")  # the datamodule tests reuse scan_simple
    assert tuple(len(splits[p]) if p in splits else None for p in ("train", "dev", "test")) == SIZES[name]
    first = splits["train"][0]
    assert first.utterance == FIRST[name][0] and first.program.startswith(FIRST[name][1])
    for part in splits.values():
        assert [e.meta["index"] for e in part[:3]] == list(range(min(3, len(part))))
        assert all(e.utterance and e.program for e in part)


@mirror
def test_meta_on_mirror():
    scan_sp = read_splits("scan_sp_simple", MIRROR, cache=False)["train"][0]
    assert scan_sp.meta["answer"].startswith("I_TURN_LEFT I_RUN")
    assert read_splits("cogs_gen", MIRROR, cache=False)["test"][0].meta["type"] == "prim_to_subj_proper"
    geo = read_splits("geo_funql_iid", MIRROR, cache=False)
    # *_spans.json cover the alignable examples: 513 of 540 train, 57 of 60 dev, 256 of 280 test (PROVENANCE)
    assert [sum("gold_spans" in e.meta for e in geo[p]) for p in ("train", "dev", "test")] == [513, 57, 256]
    assert geo["train"][0].meta["gold_spans"][0] == {"span": [0, 6], "type": "span"}
    atis = read_splits("atis_sql_template", MIRROR, cache=False)
    first = atis["train"][0]
    assert first.meta["variables"] == {"airport_code0": "MKE"} and first.meta["query_index"] == 0
    assert '"airport_code0"' in first.program and "  " not in first.program
    # template split: no query on both sides (Finegan-Dollak et al. 2018; checked in text2sql/PROVENANCE.md)
    assert not {e.program for e in atis["train"]} & {e.program for e in atis["test"]}


@mirror
@pytest.mark.parametrize("name", FULL_CFQ_ONLY_IN_RELEASE)
def test_full_cfq_split_without_release_says_partial(name):
    with pytest.raises(MissingDataError) as err:
        ParsingDataModule(name, root=str(MIRROR)).prepare_data()
    message = str(err.value)
    assert f"{name}_partial" in message and "cfq/dataset.json" in message
    assert f"python -m zoo.download cfq --root {MIRROR}" in message
    with pytest.raises(MissingDataError, match="_partial"):
        read_splits(name, MIRROR)


# ----------------------------------------------------------------------------------------- the datamodule
@mirror
def test_held_out_validation_is_deterministic_and_disjoint():
    dm = ParsingDataModule("scan_simple", root=str(MIRROR))
    dm.prepare_data()
    dm.setup()
    assert (len(dm.train), len(dm.val), len(dm.test)) == (16728 - 1673, 1673, 4182)
    train_ids, val_ids = {e.meta["index"] for e in dm.train}, {e.meta["index"] for e in dm.val}
    assert not train_ids & val_ids and len(train_ids | val_ids) == 16728
    again = ParsingDataModule("scan_simple", root=str(MIRROR))
    again.setup()
    assert [e.meta["index"] for e in again.val] == [e.meta["index"] for e in dm.val]
    other = ParsingDataModule("scan_simple", root=str(MIRROR), val_seed=1)
    other.setup()
    assert {e.meta["index"] for e in other.val} != val_ids
    limited = ParsingDataModule("scan_simple", root=str(MIRROR), limit_train=10, limit_eval=3)
    limited.setup()
    assert limited.train == dm.train[:10] and limited.val == dm.val[:3] and limited.test == dm.test[:3]
    assert dm.formalism.name == "scan" and dm.spec.name == "scan_simple"


def test_hold_out_edge_cases():
    examples = [Example(str(i), str(i), {"index": i}) for i in range(5)]
    assert hold_out(examples, 0.0, 0) == (examples, [])
    kept, held = hold_out(examples, 0.01, 0)
    assert len(held) == 1 and sorted(kept + held, key=lambda e: e.meta["index"]) == examples
    with pytest.raises(ValueError):
        hold_out(examples, 1.0, 0)


def fake_length(example: Example) -> int:
    """A stand-in length, distinct for every example of a file: its position there, plus one."""
    return example.meta["index"] + 1


class FakeFeaturizer:
    """Encodes an example as its ``fake_length``; collates by stacking."""

    def encode(self, example):
        return torch.tensor(fake_length(example))

    def collate(self, items):
        return {"lengths": torch.stack(items)}


def write_scan_root(root: Path, n_train: int = 20, n_test: int = 6) -> Path:
    """``scan_simple`` files of ``n_train`` and ``n_test`` examples (valid SCAN lines, repeated)."""
    folder = root / "scan" / "simple_split"
    folder.mkdir(parents=True)
    for part, n in (("train", n_train), ("test", n_test)):
        lines = [VALID_LINES["scan/"][i % 2] for i in range(n)]
        (folder / f"tasks_{part}_simple.txt").write_text("\n".join(lines) + "\n")
    return root


def test_dataloader_round_trip(tmp_path):
    dm = ParsingDataModule("scan_simple", root=str(write_scan_root(tmp_path)), val_fraction=0.25, batch_size=4,
                           eval_batch_size=5)
    dm.setup()
    with pytest.raises(RuntimeError, match="attach"):
        dm.train_dataloader()
    dm.attach(FakeFeaturizer())
    torch.manual_seed(0)
    train_batches = list(dm.train_dataloader())
    assert [len(b["examples"]) for b in train_batches] == [4, 4, 4, 3]
    for batch in train_batches:
        assert batch["lengths"].tolist() == [fake_length(e) for e in batch["examples"]]
    seen = [e for b in train_batches for e in b["examples"]]
    assert sorted(seen, key=lambda e: e.meta["index"]) == dm.train and seen != dm.train  # all, shuffled
    val = list(dm.val_dataloader())
    assert [e for b in val for e in b["examples"]] == dm.val and len(dm.val) == 5
    test = list(dm.test_dataloader())
    assert [len(b["examples"]) for b in test] == [5, 1]
    assert [e for b in dm.predict_dataloader() for e in b["examples"]] == dm.test


def test_length_buckets_keep_every_example_once_per_epoch():
    lengths = [(i * 7919) % 61 for i in range(1000)]
    sampler = LengthBucketBatchSampler(lengths, batch_size=16, seed=3, pool_batches=10)
    epochs = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler) == 63 and all(1 <= len(b) <= 16 for b in batches)
        assert sorted(i for b in batches for i in b) == list(range(1000))  # each example exactly once
        # a batch spans few lengths: at most the spread of one pool's 160 sorted examples over 10 batches
        spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
        assert spread < 15
        epochs.append(batches)
    assert epochs[0] != epochs[1] != epochs[2]  # each epoch batches and orders anew
    firsts = [lengths[b[0]] for b in epochs[0]]
    assert firsts != sorted(firsts)  # batches do not come in length order
    again = LengthBucketBatchSampler(lengths, batch_size=16, seed=3, pool_batches=10)
    again.set_epoch(1)
    assert list(again) == epochs[1]  # seeded


class LengthFeaturizer(FakeFeaturizer):
    def length(self, example):
        return fake_length(example)


def test_training_batches_are_bucketed_when_the_featurizer_measures_length(tmp_path):
    root = str(write_scan_root(tmp_path, n_train=40))
    dm = ParsingDataModule("scan_simple", root=root, val_fraction=0.1, batch_size=4, seed=1, bucket_pool_batches=10)
    dm.setup()
    dm.attach(LengthFeaturizer())
    batches = list(dm.train_dataloader())
    assert sorted(e.meta["index"] for b in batches for e in b["examples"]) == [e.meta["index"] for e in dm.train]
    # 36 examples of distinct lengths in one pool (of 10 batches): each batch holds 4 neighbours in length
    assert all(max(b["lengths"]) - min(b["lengths"]) <= 4 for b in batches)
    dm.bucket_by_length = False
    assert max(max(b["lengths"]) - min(b["lengths"]) for b in dm.train_dataloader()) > 4
    plain = ParsingDataModule("scan_simple", root=root, val_fraction=0.1, batch_size=4)
    plain.setup()
    plain.attach(FakeFeaturizer())  # no length: random batches
    assert max(max(b["lengths"]) - min(b["lengths"]) for b in plain.train_dataloader()) > 4


def test_validation_subset_is_fixed_across_runs(tmp_path):
    examples = [Example(str(i), str(i), {"index": i}) for i in range(100)]
    subset = fixed_subset(examples, 10, seed=0)
    assert len(subset) == 10 and subset == sorted(subset, key=lambda e: e.meta["index"])
    assert fixed_subset(examples, 10, seed=0) == subset != fixed_subset(examples, 10, seed=1)
    assert fixed_subset(examples, 200, seed=0) == fixed_subset(examples, None, seed=0) == examples
    root = str(write_scan_root(tmp_path, n_train=40))
    vals = []
    for seed in (1, 2):  # the run's seed does not move the subset; val_seed does
        dm = ParsingDataModule("scan_simple", root=root, val_fraction=0.5, val_subset=5, seed=seed)
        dm.setup()
        vals.append([e.meta["index"] for e in dm.val])
    assert len(vals[0]) == 5 and vals[0] == vals[1]
    with pytest.raises(DataConfigError, match="val_subset"):
        ParsingDataModule("scan_simple", root=root, val_subset=0)


# ----------------------------------------------------------------------------------------------- errors
MALFORMED = [  # dataset, file under the root, good line, bad line, words the message must contain
    ("scan_simple", "scan/simple_split/tasks_train_simple.txt", "IN: walk OUT: I_WALK", "walk I_WALK",
     "IN: <command> OUT: <actions>"),
    ("scan_sp_simple", "scan_sp/dsl/train_simple.json",
     '{"question": "walk", "program": "i_walk ( )", "answer": "I_WALK"}',
     '{"question": "walk", "program": "i_walk ( )"}',
     "answer"),
    ("cogs", "cogs/train.tsv", "A dog ran .\trun . agent ( x _ 2 , x _ 1 )\tin_distribution", "A dog ran .",
     "<sentence>\\t<logical form>"),
    ("geo_funql_iid", "geoquery_funql/funql/train.json", '{"question": "q", "program": "answer ( state ( all ) )"}',
     '{"question": "q", "program": ', "question"),
    ("cfq_mcd1", "cfq/preprocessed/mcd1/train/train_decode.txt", "SELECT DISTINCT ?x0 WHERE { ?x0 a film.actor }",
     None, "one query per question"),
]


@pytest.mark.parametrize("name, rel, good, bad, expected", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_line_names_file_and_line(tmp_path, name, rel, good, bad, expected):
    for rel_other in DATASETS[name].files:  # every file well-formed (a CFQ question may be any text) ...
        (tmp_path / rel_other).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel_other).write_text(f"{good}\n" * 3)
    # ... except the target, broken on its 4th line (CFQ: a 4th query for 3 questions)
    (tmp_path / rel).write_text(f"{good}\n{good}\n\n{bad}\n" if bad is not None else f"{good}\n" * 4)
    with pytest.raises(DataFormatError) as err:
        read_splits(name, tmp_path, cache=False)
    message = str(err.value)
    assert str(tmp_path / rel) in message and "line 4" in message and expected in message
    assert isinstance(err.value, ValueError)


def test_malformed_text2sql_names_line(tmp_path):
    (tmp_path / "text2sql").mkdir()
    (tmp_path / "text2sql" / "atis.json").write_text('[\n  {"query-split": "train",\n  "sql": [}\n]\n')
    with pytest.raises(DataFormatError, match=r"atis\.json, line 3"):
        read_splits("atis_sql_iid", tmp_path, cache=False)


def test_missing_file_names_path_root_and_download(tmp_path, monkeypatch):
    monkeypatch.delenv("ZOO_DATA", raising=False)
    dm = ParsingDataModule("scan_length", root=str(tmp_path))
    with pytest.raises(MissingDataError) as err:
        dm.prepare_data()
    message = str(err.value)
    assert str(tmp_path / "scan/length_split/tasks_train_length.txt") in message
    assert "data.root=" in message and "ZOO_DATA" in message
    assert f"python -m zoo.download scan_length --root {tmp_path}" in message
    assert isinstance(err.value, FileNotFoundError)
    train = tmp_path / "scan/length_split/tasks_train_length.txt"
    train.parent.mkdir(parents=True)
    train.write_text("IN: walk OUT: I_WALK\n")
    with pytest.raises(MissingDataError) as err:
        dm.setup()
    assert "tasks_test_length.txt" in str(err.value) and str(train) not in str(err.value)


def test_root_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_DATA", str(tmp_path))
    assert ParsingDataModule("cogs").root == tmp_path.resolve()
    assert ParsingDataModule("cogs", root=str(tmp_path / "x")).root == (tmp_path / "x").resolve()
    monkeypatch.delenv("ZOO_DATA")
    assert ParsingDataModule("cogs").root == REPO / "data"
    with pytest.raises(KeyError, match="scan_simple"):
        ParsingDataModule("no_such_dataset")


# ------------------------------------------------------------------------------------ CFQ release layout
RELEASE_MCD2 = {  # fixture dataset.json indices train [3, 0, 1], dev [4], test [2], preprocessed by hand
    "train": [
        ("Which male Swedish costume designer executive produced M2 and wrote M1",
         "SELECT DISTINCT ?x0 WHERE { ?x0 a film.film_costumer_designer . ?x0 film.producer.films_executive_produced "
         "M2 . ?x0 film.writer.film M1 . ?x0 people.person.gender m_05zppz . ?x0 people.person.nationality m_0d0vqn }"),
        ("What was founded by M0 and founded by a actor",
         "SELECT DISTINCT ?x0 WHERE { ?x0 organization.organization.founders ?x1 . "
         "?x0 organization.organization.founders M0 . ?x1 a film.actor }"),
        ("Was M1 ' s child , spouse , and sibling M0",
         "SELECT count ( * ) WHERE { M0 people.person.sibling_s/ns:people.sibling_relationship.sibling|"
         "ns:fictional_universe.fictional_character.siblings/ns:fictional_universe.sibling_relationship_of_fictional_"
         "characters.siblings M1 . M1 people.person.children|ns:fictional_universe.fictional_character.children M0 }"),
    ],
    "dev": [("Did M1 star a child and sibling of M0",
             "SELECT count ( * ) WHERE { ?x0 people.person.parents M0 . "
             "M1 film.film.starring/ns:film.performance.actor ?x0 }")],
    "test": [("Did M2 marry M3 , marry a male person , and marry M4 and M5",
              "SELECT count ( * ) WHERE { ?x0 a people.person . ?x0 people.person.gender m_05zppz . "
              "FILTER ( M2 != ?x0 ) . M2 people.person.spouse_s/ns:people.marriage.spouse M3 }")],
}


@pytest.mark.parametrize("chunk_chars", [1 << 22, 7, 1])
def test_cfq_release_layout(chunk_chars):
    splits = read_release(str(FIXTURES), "mcd2", chunk_chars=chunk_chars)
    assert {p: [(e.utterance, e.program) for e in splits[p]] for p in splits} == RELEASE_MCD2
    assert [e.meta["dataset_index"] for e in splits["train"]] == [3, 0, 1]
    assert [e.meta["index"] for e in splits["train"]] == [0, 1, 2]


def test_cfq_full_split_reads_release_through_the_datamodule(tmp_path):
    dm = ParsingDataModule("cfq_mcd2", root=str(FIXTURES))
    dm.prepare_data()
    dm.setup()
    assert [e.utterance for e in dm.val] == [RELEASE_MCD2["dev"][0][0]] and len(dm.train) == 3
    # cfq_mcd1 prefers preprocessed files but falls back to the release
    shutil.copytree(FIXTURES / "cfq", tmp_path / "cfq")
    shutil.copy(tmp_path / "cfq/splits/mcd2.json", tmp_path / "cfq/splits/mcd1.json")
    assert [e.program for e in read_splits("cfq_mcd1", tmp_path, cache=False)["test"]] == [RELEASE_MCD2["test"][0][1]]


@mirror
def test_cfq_preprocessing_reproduces_googles_files():
    # fixture example 3 is MCD1 train line 2 in raw form: our preprocessing must give Google's line byte for byte
    lines = (MIRROR / "cfq/preprocessed/mcd1/train/train_decode.txt").open().readlines()[:2]
    assert lines[1].rstrip("\n") == RELEASE_MCD2["train"][0][1]


def test_cfq_preprocessing_and_broken_release(tmp_path):
    assert tokenize_punctuation("Was M1's  child,spouse") == "Was M1 ' s child , spouse"
    assert preprocess_sparql("SELECT count(*) WHERE {\n?x0 ns:a.b ns:m.0x\n}") == \
        "SELECT count ( * ) WHERE { ?x0 a.b m_0x }"
    broken = tmp_path / "dataset.json"
    broken.write_text('[\n {"a": 1},\n {"a": 2}\n {"a": 3}\n]')
    with pytest.raises(DataFormatError, match=r"dataset\.json, line 4"):
        list(iter_json_array(broken, "a JSON list", chunk_chars=5))
    broken.write_text('[\n {"a": 1},\n {"a": tru},\n {"a": 3}, {"a": 4}, {"a": 5}, {"a": 6}, {"a": 7}\n]')
    with pytest.raises(DataFormatError, match=r"dataset\.json, line 3: malformed data: invalid JSON"):
        list(iter_json_array(broken, "a JSON list", chunk_chars=5))
    items = [item for _, item in iter_json_array(FIXTURES / "cfq/dataset.json", "x", 3)]
    assert len(items) == 6 and items[5]["question"].endswith("5?")


# ------------------------------------------------------------------------------------------------ configs
def test_configs_mirror_the_registry():
    from hydra import compose, initialize_config_dir

    configs = REPO / "configs" / "data"
    assert {p.stem for p in configs.glob("*.yaml")} == set(DATASETS)  # data_base.yaml is no choice
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        for name in ("scan_simple", "cfq_mcd2_partial"):
            cfg = compose(overrides=[f"+data={name}"]).data
            dm = ParsingDataModule(**cfg)
            assert (dm.name, dm.batch_size, dm.val_fraction) == (name, 64, 0.1)


def test_prepare_data_downloads_missing_files_when_asked(tmp_path, monkeypatch):
    """data.download=true hands exactly the missing paths to zoo.download, then reads them."""
    import zoo.download

    calls = []

    def fake_download(name, root, files):
        calls.append((name, sorted(files)))
        for rel in files:
            (Path(root) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(root) / rel).write_text("IN: jump OUT: I_JUMP\n")

    monkeypatch.setattr(zoo.download, "download", fake_download)
    with pytest.raises(MissingDataError):
        ParsingDataModule("scan_mcd1", root=str(tmp_path)).prepare_data()
    datamodule = ParsingDataModule("scan_mcd1", root=str(tmp_path), download=True, val_fraction=0.0)
    datamodule.prepare_data()
    assert calls == [("scan_mcd1", ["scan/mcd_split/tasks_test_mcd1.txt", "scan/mcd_split/tasks_train_mcd1.txt"])]
    datamodule.setup()
    assert datamodule.test[0].program == "I_JUMP"


@mirror
def test_stats_command_prints_counts_of_present_datasets(tmp_path, capsys):
    from datamodules.__main__ import main

    for rel in DATASETS["scan_mcd1"].files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(MIRROR / rel, tmp_path / rel)
    main(["stats", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    [row] = [line.split() for line in out.splitlines() if line.startswith("scan_mcd1 ")]
    assert row == ["scan_mcd1", "scan", "7,529", "836*", "1,045"]  # 8,365 train minus the 10% held out
    assert "held out from train" in out and "scan_simple: missing" in out


def test_stats_command_lists_a_damaged_dataset_and_counts_the_others(tmp_path, capsys):
    from datamodules.__main__ import main

    scan = tmp_path / "scan" / "simple_split"
    scan.mkdir(parents=True)
    (scan / "tasks_train_simple.txt").write_text("IN: walk OUT: I_WALK\nIN: jump OUT: I_JUMP\n")
    (scan / "tasks_test_simple.txt").write_bytes(b"IN: run OUT: I_RUN\nIN: look \xff OUT: I_LOOK\n")
    main(["stats", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    assert "present but not readable (skipped):" in out
    assert f"scan_simple: {scan / 'tasks_test_simple.txt'}, line 2: malformed data: byte 0xff" in out


# ------------------------------------------------------------------- every data file of every dataset, broken
# Two valid lines per kind of line file; the second line's program is the one a truncation cuts.
VALID_LINES = {
    "scan/": ["IN: walk twice OUT: I_WALK I_WALK", "IN: jump left after run OUT: I_RUN I_TURN_LEFT I_JUMP"],
    "scan_sp/": ['{"question": "walk twice", "program": "i_twice ( i_walk ( ) )", "answer": "I_WALK I_WALK"}',
                 '{"question": "jump left", "program": "i_jump ( i_left )", "answer": "I_TURN_LEFT I_JUMP"}'],
    "geoquery_funql/": ['{"question": "what is texas ?", "program": "answer ( stateid ( \'texas\' ) )"}',
                        '{"question": "which states are there ?", "program": "answer ( state ( all ) )"}'],
    "cogs/": ["A dog ran .\tdog ( x _ 1 ) AND run . agent ( x _ 2 , x _ 1 )\tin_distribution",
              "A cat slept .\tcat ( x _ 1 ) AND sleep . agent ( x _ 2 , x _ 1 ) AND cat ( x _ 1 )\tin_distribution"],
    "_encode.txt": ["Did M0 marry M1", "What did M0 write"],
    "_decode.txt": ["SELECT count ( * ) WHERE { M0 people.person.spouse_s M1 }",
                    "SELECT DISTINCT ?x0 WHERE { ?x0 film.film.written_by M0 . ?x0 a film.film }"],
}


def text2sql_json(without: str = "") -> str:
    """Three queries whose sentences put every part of both splits (question-split, query-split) to use; the part
    ``without`` becomes train."""
    def query(split: str, sentence_splits: list[str]) -> dict:
        return {"query-split": split.replace(without, "train") if without else split,
                "sql": ['SELECT CITYalias0.CITY_NAME FROM CITY AS CITYalias0 WHERE CITYalias0.STATE_NAME = '
                        '"state_name0" ;'],
                "sentences": [{"question-split": s.replace(without, "train") if without else s,
                               "text": "cities in state_name0", "variables": {"state_name0": "texas"}}
                              for s in sentence_splits]}

    return json.dumps([query("train", ["train", "dev", "test"]), query("dev", ["train"]), query("test", ["train"])],
                      indent=1)


def write_valid_root(root: Path, name: str) -> list[str]:
    """Small valid files for every file that ``name`` reads first (its preferred layout); returns their paths."""
    files = list(DATASETS[name].files)
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.startswith("text2sql/"):
            path.write_text(text2sql_json())
        elif rel == "cfq/dataset.json":
            shutil.copy(FIXTURES / rel, path)
        elif rel.startswith("cfq/splits/"):
            shutil.copy(FIXTURES / "cfq/splits/mcd2.json", path)
        else:
            [lines] = [lines for kind, lines in VALID_LINES.items() if kind in rel]
            path.write_text("".join(f"{line}\n" for line in lines))
    return files


FILES = [(name, rel) for name in sorted(DATASETS) for rel in DATASETS[name].files]


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_valid_fixture_roots_read(tmp_path, name):
    """The fixtures the tests below break are themselves valid, so each failure is the fault's."""
    write_valid_root(tmp_path, name)
    splits = read_splits(name, tmp_path, cache=False)
    assert all(splits[part] for part in splits)


@pytest.mark.parametrize("name, rel", FILES, ids=[f"{n}:{r}" for n, r in FILES])
def test_a_byte_that_is_not_utf8_names_file_line_and_column(tmp_path, name, rel):
    write_valid_root(tmp_path, name)
    path = tmp_path / rel
    lines = path.read_bytes().split(b"\n")
    target = min(1, len(lines) - 1)  # the second line where there is one
    column = min(3, len(lines[target])) + 1
    lines[target] = lines[target][:column - 1] + b"\xff" + lines[target][column - 1:]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DataFormatError) as err:
        read_splits(name, tmp_path, cache=False)
    assert str(err.value) == (f"{path}, line {target + 1}: malformed data: byte 0xff at column {column} is not "
                              "UTF-8; expected UTF-8 text")


@pytest.mark.parametrize("name, world, content, says", [
    ("geo_funql_iid", "geoquery_funql/geobase.pl", b"state('texas','tx','austin',1,2,3,'a').\nriver('r\xffo',1,[]).\n",
     "line 2: malformed data: byte 0xff at column 9 is not UTF-8"),
    ("geo_funql_iid", "geoquery_funql/geobase.pl", b"state('texas'\n", "prolog: expected ')'"),
    ("geo_sql_iid", "text2sql/geography-db.sql", b"CREATE TABLE t (a text);\nINSERT INTO t VALUES ('\xff');\n",
     "line 2: malformed data: byte 0xff at column 24 is not UTF-8"),  # was read as U+FFFD, silently
    ("geo_sql_iid", "text2sql/geography-db.sql", b"-- no table\n", "defines no table"),
], ids=["geobase-byte", "geobase-syntax", "sql-byte", "sql-empty"])
def test_a_broken_world_file_is_named(tmp_path, name, world, content, says):
    write_valid_root(tmp_path, name)
    (tmp_path / world).write_bytes(content)
    with pytest.raises(DataFormatError) as err:
        ParsingDataModule(name, root=str(tmp_path)).world  # noqa: B018  (the property loads the world)
    assert str(err.value).startswith(str(tmp_path / world)) and says in str(err.value)


def test_a_byte_order_mark_is_not_part_of_the_first_example(tmp_path):
    write_valid_root(tmp_path, "cogs")
    path = tmp_path / "cogs/train.tsv"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # as some editors save UTF-8
    assert read_splits("cogs", tmp_path, cache=False)["train"][0].utterance == "A dog ran ."


@pytest.mark.parametrize("name, rel", FILES, ids=[f"{n}:{r}" for n, r in FILES])
def test_an_empty_file_names_itself(tmp_path, name, rel):
    """An empty training file reached torch as ``num_samples=0``; an empty test file trained to the end and then
    crashed in zoo/train.py (issue 25, item 3). Every file must hold examples."""
    write_valid_root(tmp_path, name)
    (tmp_path / rel).write_text("\n \n")
    with pytest.raises(DataFormatError) as err:
        read_splits(name, tmp_path, cache=False)
    assert str(err.value).startswith(str(tmp_path / rel))


@pytest.mark.parametrize("name, rel", [("scan_simple", DATASETS["scan_simple"].files[0]),
                                       ("geo_sql_iid", "text2sql/geography.json")])
def test_a_data_file_that_cannot_be_read_names_itself(tmp_path, monkeypatch, name, rel):
    """A file without read permission (tests run as root, who may read anything: ``open`` is told to refuse)."""
    import datamodules.base

    write_valid_root(tmp_path, name)
    unreadable = tmp_path / rel

    def refusing_open(path, *args, **kwargs):
        if Path(path) == unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(datamodules.base, "open", refusing_open, raising=False)
    expected = rf"^{re.escape(str(unreadable))}: cannot read it \(Permission denied\)$"
    with pytest.raises(DataConfigError, match=expected):
        read_splits(name, tmp_path, cache=False)


@pytest.mark.parametrize("name, part, split_field", [("geo_sql_iid", "test", "question-split"),
                                                    ("geo_sql_template", "dev", "query-split")])
def test_text2sql_part_without_sentences(tmp_path, name, part, split_field):
    write_valid_root(tmp_path, name)
    (tmp_path / "text2sql/geography.json").write_text(text2sql_json(without=part))
    with pytest.raises(DataFormatError, match=rf"geography\.json: malformed data: no sentence is in {part} by its "
                                              rf"{split_field}"):
        read_splits(name, tmp_path, cache=False)


@pytest.mark.parametrize("indices, says", [
    ({"trainIdxs": [3, 0], "devIdxs": [4], "testIdxs": []}, "testIdxs is empty"),
    ({"trainIdxs": [3, -1], "devIdxs": [4], "testIdxs": [2]}, "index -1 of trainIdxs is not in"),
    ({"trainIdxs": [3, 0], "devIdxs": [4], "testIdxs": [6]}, "index 6 of testIdxs is not in"),
])
def test_cfq_split_file_naming_no_or_missing_examples(tmp_path, indices, says):
    write_valid_root(tmp_path, "cfq_mcd2")
    (tmp_path / "cfq/splits/mcd2.json").write_text(json.dumps(indices))
    with pytest.raises(DataFormatError) as err:
        read_splits("cfq_mcd2", tmp_path, cache=False)
    assert str(err.value).startswith(str(tmp_path / "cfq/splits/mcd2.json")) and says in str(err.value)


@pytest.mark.parametrize("option, value", [
    ("limit_train", 0), ("limit_train", -5), ("limit_eval", 0), ("limit_eval", -1), ("val_fraction", 1.0),
    ("val_fraction", -0.1), ("batch_size", 0), ("eval_batch_size", 0), ("num_workers", -1), ("val_subset", 0),
    ("bucket_pool_batches", 0), ("train_limit", 0), ("limit_eval", 2.5),
])
def test_data_options_that_would_empty_or_break_a_split(tmp_path, option, value):
    """``limit_eval=0`` emptied the test set (a crash after training), a negative ``limit_train`` silently dropped
    examples from the end, ``eval_batch_size=0`` silently became ``batch_size``."""
    with pytest.raises(DataConfigError, match=rf"^data\.{option}={value}: expected"):
        ParsingDataModule("scan_simple", root=str(tmp_path), **{option: value})


def test_an_empty_test_file_stops_a_run_before_training(tmp_path):
    from zoo.launch import run

    write_valid_root(tmp_path / "data", "scan_simple")
    test_file = tmp_path / "data" / DATASETS["scan_simple"].files[1]
    test_file.write_text("")
    cfg = compose_run("debug=smoke", "data=scan_simple", f"data.root={tmp_path / 'data'}",
                      f"results_file={tmp_path / 'results' / 'runs.csv'}")
    with pytest.raises(DataFormatError, match=rf"^{test_file}: malformed data: no examples"):
        run(cfg, tmp_path / "run")
    assert not (tmp_path / "results" / "runs.csv").exists()  # no row


def test_cfq_blank_line_inside_a_paired_file(tmp_path):
    """Line i of encode pairs with line i of decode: a blank question and a blank query at other places used to be
    skipped, pairing every question between them with the wrong query, without a word."""
    write_valid_root(tmp_path, "cfq_mcd1")
    base = tmp_path / "cfq/preprocessed/mcd1/train/train"
    questions, queries = VALID_LINES["_encode.txt"], VALID_LINES["_decode.txt"]
    Path(f"{base}_encode.txt").write_text(f"{questions[0]}\n\n{questions[1]}\n")
    Path(f"{base}_decode.txt").write_text(f"{queries[0]}\n{queries[1]}\n\n")
    with pytest.raises(DataFormatError, match=rf"^{base}_encode.txt, line 2: malformed data: a blank line"):
        read_splits("cfq_mcd1", tmp_path, cache=False)


# Files whose last line, cut in two, still reads as an example unless its program is checked (a CFQ question is
# free text: a question cut short is not detectable, so encode files are left out).
CUTTABLE = [(name, rel) for name, rel in FILES if not rel.endswith("_encode.txt")]


@pytest.mark.parametrize("name, rel", CUTTABLE, ids=[f"{n}:{r}" for n, r in CUTTABLE])
def test_a_file_cut_inside_its_last_example_names_file_and_line(tmp_path, name, rel):
    write_valid_root(tmp_path, name)
    path = tmp_path / rel
    text = path.read_text().rstrip("\n")
    head, newline, last = text.rpartition("\n")
    path.write_text(head + newline + last[: len(last) * 2 // 3])  # 2/3 of the last line
    with pytest.raises(DataFormatError) as err:
        read_splits(name, tmp_path, cache=False)
    assert str(err.value).startswith(str(path))
    if rel.endswith((".txt", ".tsv")) or "/dsl/" in rel or "/funql/" in rel:  # a line file: the last line
        assert str(err.value).startswith(f"{path}, line {text.count(chr(10)) + 1}:")


@pytest.mark.parametrize("line, says", [
    ("IN: jump left after run OUT: I_RUN I_TURN_LEFT I_JUMP I_TURN_RIG",  # the example
     "expected one of I_WALK, I_LOOK, I_RUN, I_JUMP, I_TURN_LEFT, I_TURN_RIGHT at token 3, found 'I_TURN_RIG'"),
    ("IN: jump left after run OUT: I_RUN I_TURN_LEFT",  # cut after a whole action: only the grammar tells
     "'jump left after run' means 'I_RUN I_TURN_LEFT I_JUMP', not 'I_RUN I_TURN_LEFT'"),
    ("IN: jump left after run OUT: I_RUN I_JUMP I_TURN_LEFT",
     "'jump left after run' means 'I_RUN I_TURN_LEFT I_JUMP', not 'I_RUN I_JUMP I_TURN_LEFT'"),
    ("IN: jump left after OUT: I_RUN I_TURN_LEFT I_JUMP", "found the end in 'jump left after'"),  # not SCAN
])
def test_scan_targets_are_checked_against_the_grammar(tmp_path, line, says):
    write_valid_root(tmp_path, "scan_length")
    path = tmp_path / DATASETS["scan_length"].files[0]
    path.write_text(f"{VALID_LINES['scan/'][0]}\n{line}\n")
    with pytest.raises(DataFormatError) as err:
        read_splits("scan_length", tmp_path, cache=False)
    assert str(err.value).startswith(f"{path}, line 2: malformed data: scan") and says in str(err.value)
    assert "expected a scan program that its command means" in str(err.value)


def test_text2sql_and_cfq_release_programs_are_checked(tmp_path):
    write_valid_root(tmp_path, "atis_sql_iid")
    path = tmp_path / "text2sql/atis.json"
    queries = json.loads(path.read_text())
    queries[1]["sql"][0] = "SELECT CITYalias0.CITY_NAME FROM ( CITY AS CITYalias0"
    path.write_text(json.dumps(queries))
    with pytest.raises(DataFormatError, match=rf"^{path}: malformed data: query entry 1: sql: expected '\)'"):
        read_splits("atis_sql_iid", tmp_path, cache=False)
    write_valid_root(tmp_path, "cfq_mcd2")
    path = tmp_path / "cfq/dataset.json"
    path.write_text(path.read_text().replace('\\n}",', '\\n",', 1))  # example 0's query loses its closing brace
    with pytest.raises(DataFormatError, match=rf"^{path}, line 2: malformed data: example 0: cfq_sparql: "):
        read_splits("cfq_mcd2", tmp_path, cache=False)


def test_a_cogs_file_cut_inside_the_generalization_type(tmp_path):
    """The type is the last field: a cut there left a well-formed line whose type no result breakdown knows."""
    write_valid_root(tmp_path, "cogs_gen")
    path = tmp_path / "cogs/gen.tsv"
    path.write_text(path.read_text().rstrip("\n")[:-5])  # in_distribution -> in_distrib
    with pytest.raises(DataFormatError, match=rf"^{path}, line 2: malformed data: unknown generalization type "
                                              r"'in_distrib'"):
        read_splits("cogs_gen", tmp_path, cache=False)
