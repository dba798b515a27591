"""SpanBasedSP (Herzig & Berant 2021, "Span-based Semantic Parsing for Compositional Generalization").

Every span (i, j) of the utterance gets a distribution over categories ``Σ ∪ {join, φ}`` (§3.1, Eq. 2-3): the
encoder's states of its first and last word, ``[h_i; h_j]``, through a one-hidden-layer network (250 units), plus
``λ·δ(x_ij, c)`` where a lexicon says the phrase names constant c (§3.3, "exact match features": entity names,
and the manual lexicon ``models/lexicons/<formalism>.json``). Σ is the set of domain constants (§2): those of the
training programs, every predicate of the language and every entity of the dataset's database (GeoQuery's geobase),
so an entity first named at test time is reachable through its name (``models.span_programs``).

Training (§3.3) has programs only, no trees: for each example a constrained CKY (``models.cky`` with the gold
program's ``Composition``) finds the best tree under the current scores whose program is the gold one (hard-EM), and
the loss is the cross-entropy of every span against that tree's labels (a node's category; φ for every span that is
no node), averaged over spans. Examples without such a tree are skipped and counted (``train/no_tree``). With
``gold_trees`` the labels come from the authors' annotated trees (``*_spans.json``, Table 2's "gold trees" rows).
Inference (§3.2) runs K-best CKY (K = 5) and returns the program of the best tree whose sub-programs compose
(``models.span_programs``); an utterance with no valid tree gets an empty prediction, which scores wrong. With
``ternary`` the grammar has the non-projective rule ``join := join join join`` (§3.4). Each prediction's tree goes to
predictions.jsonl, and ``test/span_f1`` is the F1 of its labeled spans against the annotated trees (§4.4, Table 3).

Entity scores (``share_entity_scores``, on by default; a departure from Eq. 2, which gives every constant its own
output row): entities of one kind (``stateid``, ``cityid``, ``cityid`` with a state, ``riverid``, ...) share one row,
so the network says "a state is named here" and the lexicon says which. With a row per entity, the rows of entities
absent from training only ever learn to score low, and the lexicon's λ cannot lift them above the entities seen in
the same contexts: with MiniLM on ``geo_funql_iid``, 0 of the 25 test questions naming such an entity came out right.
The loss's softmax (Eq. 3) is then over the rows, a kind scoring as its best entity (``row_scores``): over the
categories, a kind's row would count once per entity of it, and its entity spans could never reach probability 1.

Details of the authors' implementation (jonathanherzig/span-based-sp), options off by default until runs on
held-out training examples (``data.heldout``) choose them: no constant on a span holding a function word
(featurizer ``function_words``), a learned λ (``learn_lexicon_weight``), ternary derivations below 0 dropped at
inference (``prune_ternary``), one derivation per score in each span (``distinct_scores``, ``models.cky.parse``),
and their manual lexicon (featurizer ``lexicon="authors"``). One of this zoo's, for LENGTH's programs that come out
too short (a long prefix left φ): featurizer ``cover_named_words``, no φ over a word the lexicon names a constant
with (of those whose constants the training programs hold in ``named_word_share`` of their questions); and
``constant_bonus``, a score β added to every constant label at inference (a tree of m constants gains m·β), which
trades the prior of training's shorter programs for longer ones; and ``execution_guided`` (after Wang et al. 2018's
execution-guided decoding): the best tree whose program runs on the database to a non-empty answer, among the
``max_trees`` candidates (it hurts on GeoQuery, whose database answers some gold programs with the empty set); and
``lexicon_bounds_constants``, at inference: a constant over several words may not hold a named word (as above) unless
a lexicon phrase holding that word names the constant, so "highest point in" cannot become ``population_1`` in one
span, swallowing the words that name ``highest``, ``place`` and ``loc_2`` (on the authors' annotated LENGTH trees,
9 of 520 training and 2 of 225 test trees have such a span).
Where the constraints leave no tree that composes, decoding falls back to the chart without them;
``fallback_keeps_named_words`` first tries the chart with the named words kept and the function-word bar dropped.

Encoders (``encoder``): ``lstm``, a bidirectional LSTM over word embeddings trained from scratch; ``minilm``, the
pretrained 6-layer MiniLM (``zoo.pretrained``), fine-tuned, where a word's start state is its first word piece and
its end state its last, so spans stay over words. The paper uses BERT-base (110M parameters, §4); MiniLM has 22M.
"""
from __future__ import annotations

import json
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, AutoTokenizer

from models import cky
from models.span_programs import gold_span_tree, labeled_spans, span_language
from zoo.formalisms import FormalismError
from zoo.parser import Featurizer, Parser
from zoo.pretrained import minilm_path
from zoo.registry import register_model
from zoo.types import Example

PAD, UNK = "<pad>", "<unk>"
MAX_PHRASE = 4  # longest lexicon phrase looked up, in words
ENCODERS = ("lstm", "minilm")
# The manual lexicons (models/lexicons/): ours, written for this zoo, and the one of the authors' implementation
LEXICONS = {"ours": "{formalism}.json", "authors": "{formalism}.authors.json"}
# Words no constant may sit on in the authors' CKY (jonathanherzig/span-based-sp, utils/cky.py), in every domain
FUNCTION_WORDS = ("is", "are", "the", "it", "which", "do", "does", "a", "?", ".")


def pad_mask(lengths: list[int], width: int) -> torch.Tensor:
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()


def foreign_constants(named: Sequence[int], allowed: Sequence[Sequence[int]], n: int, size: int) -> torch.Tensor:
    """[n+1, n+1, size] True where ``lexicon_bounds_constants`` bars a constant: on every span (i, j) of two words or
    more that holds the named word at ``named[w]``, each constant but ``allowed[w]``, those its phrases name."""
    forbidden = torch.zeros(n + 1, n + 1, size, dtype=torch.bool)
    start, end = torch.arange(n + 1)[:, None], torch.arange(n + 1)[None, :]
    for position, constants in zip(named, allowed):
        holding = (start <= position) & (position < end) & (end - start > 1)
        others = torch.ones(size, dtype=torch.bool)
        others[list(constants)] = False
        forbidden |= holding[..., None] & others
    return forbidden


def manual_lexicon(formalism: str, lexicon: str = "ours") -> dict[str, list[str]]:
    """A hand-written lexicon of §3.3 (at most two phrases per constant), shipped with the model in
    ``models/lexicons/``: ``ours`` or the ``authors`` one; empty where ours is not written for the formalism."""
    path = Path(__file__).parent / "lexicons" / LEXICONS[lexicon].format(formalism=formalism)
    if not path.is_file():
        if lexicon != "ours":
            raise ValueError(f"model.featurizer.lexicon={lexicon}: there is no {path.name} for {formalism} in "
                             f"{path.parent}")
        return {}
    entries = {c: p for c, p in json.loads(path.read_text(encoding="utf-8")).items() if not c.startswith("_")}
    crowded = [c for c, phrases in entries.items() if not isinstance(phrases, list) or len(phrases) > 2]
    if crowded:
        raise ValueError(f"{path}: each constant takes a list of at most two phrases (§3.3); not so for {crowded}")
    return entries


class SpanFeaturizer(Featurizer):
    """Words to ids (or to MiniLM word pieces), the category inventory Σ, and lexicon matches per span."""

    def __init__(self, formalism: str, lowercase: bool = True, manual_lexicon: bool = True, encoder: str = "lstm",
                 lexicon: str = "ours", function_words: bool = False, cover_named_words: bool = False,
                 named_word_share: float = 0.0):
        if encoder not in ENCODERS:
            raise ValueError(f"span_cky: unknown encoder {encoder!r}; expected one of {', '.join(ENCODERS)}")
        if lexicon not in LEXICONS:
            raise ValueError(f"model.featurizer.lexicon must be one of {', '.join(LEXICONS)}, not {lexicon!r}")
        self.formalism = formalism
        self.language = span_language(formalism)  # refuses a formalism without span types before anything else
        self.lowercase = lowercase
        self.manual_lexicon = manual_lexicon  # add the manual lexicon to the entity lexicon
        self.lexicon = lexicon  # which manual lexicon (LEXICONS); named as its option, as resuming compares them
        self.function_words = function_words  # no constant on a span holding one of FUNCTION_WORDS
        self.cover_named_words = cover_named_words  # no φ over a word the lexicon names a constant with...
        # ...when, of the training examples holding the word, at least this share have one of its constants in
        # their program ("has" names loc_1, but most questions with "has" have no loc_1); 0: every such word
        self.named_word_share = named_word_share
        self.named_words: set[str] = set()
        self.encoder = encoder
        self.tokenizer = AutoTokenizer.from_pretrained(minilm_path()) if encoder == "minilm" else None
        self.words: dict[str, int] = {}
        self.categories: list[str] = []  # Σ; join and φ follow as the last two category indices
        self.phrases: dict[str, list[int]] = {}  # the lexicon: phrase -> constants it names
        self._compositions: dict[str, Any] = {}  # gold program -> models.cky.Composition (not saved)

    @property
    def join(self) -> int:
        return len(self.categories)

    @property
    def phi(self) -> int:
        return len(self.categories) + 1

    def tokens(self, utterance: str) -> list[str]:
        return (utterance.lower() if self.lowercase else utterance).split()

    def fit(self, examples: Sequence[Example], world: Any = None) -> "SpanFeaturizer":
        """Σ is the constants of the training programs, the language's predicates and ``world``'s entities (§2:
        "domain constants, including entities and predicates"): a constant no training program uses can still be
        predicted through the lexicon."""
        self.words = {w: i for i, w in enumerate([PAD, UNK, *sorted({t for e in examples
                                                                    for t in self.tokens(e.utterance)})])}
        self.categories = sorted({c for e in examples for c in self.language.categories(e.program)}
                                 | self.language.domain_categories(world))
        index = {c: i for i, c in enumerate(self.categories)}
        manual = manual_lexicon(self.formalism, self.lexicon) if self.manual_lexicon else {}
        lexicon: dict[str, list[int]] = {}
        for category in self.categories:
            for phrase in self.language.entity_phrases(category) + manual.get(category, []):
                lexicon.setdefault(" ".join(self.tokens(phrase)), []).append(index[category])
        self.phrases = lexicon
        if self.cover_named_words:
            self.named_words = self._reliably_named(examples)
        return self

    def _reliably_named(self, examples: Sequence[Example]) -> set[str]:
        """The one-word lexicon phrases whose constants the training programs hold in at least ``named_word_share``
        of the examples where the phrase occurs (every one, with a share of 0; a word no training question holds,
        such as a city named only at test time, counts as named)."""
        words = {phrase for phrase in self.phrases if " " not in phrase}
        holding, named = Counter(), Counter()
        for example in examples:
            constants = set(self.language.categories(example.program))
            for word in set(self.tokens(example.utterance)) & words:
                holding[word] += 1
                named[word] += any(self.categories[c] in constants for c in self.phrases[word])
        return {word for word in words if named[word] >= self.named_word_share * holding[word]}

    def encode(self, example: Example) -> dict[str, Any]:
        tokens = self.tokens(example.utterance)
        if not tokens:
            raise ValueError(f"empty utterance for program {example.program[:60]!r}")
        matches = [(i, j, c) for i in range(len(tokens)) for j in range(i + 1, min(len(tokens), i + MAX_PHRASE) + 1)
                   for c in self.phrases.get(" ".join(tokens[i:j]), ())]
        gold_spans = example.meta.get("gold_spans")
        gold_tree = None if gold_spans is None else gold_span_tree(len(tokens), example.program, gold_spans,
                                                                    self.language, self.categories)
        # the annotated tree as training labels (gold_trees) and as the labeled spans tree F1 compares
        item = {"n": len(tokens), "matches": matches, "program": example.program,
                "constraints": self.constraints(tokens, matches),
                "gold_labels": None if gold_tree is None else self.tree_labels(gold_tree, len(tokens)),
                "gold_spans": None if gold_tree is None else frozenset(labeled_spans(gold_tree, self.categories))}
        if self.tokenizer is None:
            unk = self.words[UNK]
            return {**item, "ids": [self.words.get(t, unk) for t in tokens]}
        pieces = self.tokenizer(tokens, is_split_into_words=True)
        word_of = pieces.word_ids()
        first = {w: p for p, w in reversed(list(enumerate(word_of))) if w is not None}
        last = {w: p for p, w in enumerate(word_of) if w is not None}
        if len(first) != len(tokens) or len(word_of) > self.tokenizer.model_max_length:
            raise ValueError(f"MiniLM cannot encode {example.utterance!r}: a word without word pieces, or longer "
                             f"than {self.tokenizer.model_max_length} pieces")
        return {**item, "ids": pieces["input_ids"], "first": [first[w] for w in range(len(tokens))],
                "last": [last[w] for w in range(len(tokens))]}

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        def pad(key: str) -> torch.Tensor:
            return nn.utils.rnn.pad_sequence([torch.tensor(item[key]) for item in items], batch_first=True)

        batch = {"ids": pad("ids"), "lengths": torch.tensor([item["n"] for item in items]),
                 "matches": [item["matches"] for item in items], "programs": [item["program"] for item in items],
                 "constraints": [item["constraints"] for item in items],
                 "gold_labels": [item["gold_labels"] for item in items],
                 "gold_spans": [item["gold_spans"] for item in items]}
        if self.tokenizer is not None:  # word pieces: ids are pieces; a word starts at first, ends at last
            batch.update(first=pad("first"), last=pad("last"),
                         piece_mask=pad_mask([len(item["ids"]) for item in items], batch["ids"].shape[1]))
        return batch

    def constraints(self, tokens: list[str], matches: Sequence[tuple[int, int, int]] = ()) -> dict[str, list]:
        """The word positions the chart constrains (``SpanBasedParser._chart``): ``function_words``, where no
        constant may sit (with ``function_words``), and ``named_words``, single words the lexicon names a constant
        with (``_reliably_named``), which no φ may cover (with ``cover_named_words``); ``named_constants``, for each
        named word, the constants that the lexicon phrases holding it name (``matches``: (i, j, constant) of the
        phrases found in ``tokens``), for ``lexicon_bounds_constants``."""
        named = [i for i, t in enumerate(tokens) if t in self.named_words]
        return {"function_words": [i for i, t in enumerate(tokens) if t in FUNCTION_WORDS] if self.function_words
                else [],
                "named_words": named,
                "named_constants": [sorted({c for i, j, c in matches if i <= p < j}) for p in named]}

    def tree_labels(self, tree: cky.SpanNode, n: int) -> torch.Tensor:
        """[n+1, n+1] category of every span: its node's (a constant or join), φ for the rest."""
        labels = torch.full((n + 1, n + 1), self.phi, dtype=torch.long)
        for node in tree.nodes():
            if node.label != cky.PHI:
                labels[node.start, node.end] = self.join if node.label == cky.JOIN else node.label
        return labels

    def composition(self, program: str):
        """The hard-EM constraint of a gold program (None: not a composition of Σ), computed once."""
        if program not in self._compositions:
            self._compositions[program] = self.language.composition_table(program, self.categories)
        return self._compositions[program]

    def state_dict(self) -> dict[str, Any]:
        return {"formalism": self.formalism, "lowercase": self.lowercase, "manual_lexicon": self.manual_lexicon,
                "encoder": self.encoder, "lexicon": self.lexicon, "function_words": self.function_words,
                "cover_named_words": self.cover_named_words, "named_word_share": self.named_word_share,
                "named_words": sorted(self.named_words), "words": self.words, "categories": self.categories,
                "phrases": self.phrases}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "SpanFeaturizer":
        # checkpoints from before the lexicon and function_words options kept the phrases under "lexicon"
        phrases = state["phrases"] if "phrases" in state else state["lexicon"]
        lexicon = state["lexicon"] if "phrases" in state else state.get("lexicon_name", "ours")
        options = ("formalism", "lowercase", "manual_lexicon", "encoder", "function_words", "cover_named_words",
                   "named_word_share")
        featurizer = cls(**{key: state[key] for key in options if key in state}, lexicon=lexicon)
        featurizer.words, featurizer.categories = state["words"], state["categories"]
        featurizer.named_words = set(state.get("named_words", ()))
        featurizer.phrases = {phrase: list(c) for phrase, c in phrases.items()}
        return featurizer


@register_model("span_cky")
class SpanBasedParser(Parser):
    """SpanBasedSP (module docstring)."""

    featurizer_class = SpanFeaturizer
    supported_formalisms = ("funql", "scan_sp")
    primary_metric = "denotation"  # the paper early-stops on dev denotation accuracy (Appendix); both languages run

    def __init__(self, featurizer: SpanFeaturizer, formalism: str, encoder: str = "lstm", embedding_dim: int = 128,
                 hidden_size: int = 128, num_layers: int = 2, dropout: float = 0.2, span_hidden: int = 250,
                 lexicon_weight: float = 5.0, k: int = 5, ternary: bool = True, max_trees: int = 1000,
                 lr: float = 1e-3, encoder_lr: float = 2e-5, gold_trees: bool = False,
                 share_entity_scores: bool = True, learn_lexicon_weight: bool = False, prune_ternary: bool = False,
                 distinct_scores: bool = False, constant_bonus: float = 0.0, execution_guided: bool = False,
                 fallback_keeps_named_words: bool = False, lexicon_bounds_constants: bool = False):
        super().__init__(featurizer, formalism)
        if encoder != featurizer.encoder:
            raise ValueError(f"span_cky: encoder {encoder!r} but the featurizer tokenizes for {featurizer.encoder!r}")
        if lexicon_bounds_constants and not featurizer.cover_named_words:
            raise ValueError("span_cky: model.params.lexicon_bounds_constants=true bounds constants by the words that "
                             "model.featurizer.cover_named_words=true names: set that too")
        self.save_hyperparameters(ignore=["featurizer"])
        if encoder == "minilm":
            # from_pretrained returns the model in eval mode, and Lightning keeps modules' modes: train it
            self.encoder = AutoModel.from_pretrained(minilm_path()).train()
            width = self.encoder.config.hidden_size
        else:
            self.embedding = nn.Embedding(len(featurizer.words), embedding_dim, padding_idx=0)
            self.encoder = nn.LSTM(embedding_dim, hidden_size, num_layers, batch_first=True, bidirectional=True,
                                   dropout=dropout if num_layers > 1 else 0.0)
            width = 2 * hidden_size
        self.dropout = nn.Dropout(dropout)
        # the row of the span network's output that scores each category (join and φ last); with
        # share_entity_scores, entities of one kind share a row and the lexicon tells them apart
        rows: dict[str, int] = {}
        kind = featurizer.language.entity_kind if share_entity_scores else lambda category: None
        score_rows = [rows.setdefault(kind(c) or c, len(rows)) for c in featurizer.categories]
        self.register_buffer("score_rows", torch.tensor(score_rows + [len(rows), len(rows) + 1]), persistent=False)
        self.span_scorer = nn.Sequential(nn.Linear(2 * width, span_hidden), nn.ReLU(),
                                         nn.Linear(span_hidden, len(rows) + 2))  # Eq. 2
        self.no_tree = 0  # training examples of this epoch without a tree for their gold program
        # λ of §3.3; learned, it is lexicon_weight times a scale that starts at 1, as in the authors' implementation
        # (a parameter times 10 there)
        self.lexicon_scale = nn.Parameter(torch.ones(())) if learn_lexicon_weight else None

    @classmethod
    def build(cls, train: Sequence[Example], formalism: str, featurizer: dict | None = None,
              featurizer_state: dict | None = None, **hparams) -> "SpanBasedParser":
        featurizer = {**(featurizer or {}), "formalism": formalism, "encoder": hparams.get("encoder", "lstm")}
        return super().build(train, formalism, featurizer, featurizer_state, **hparams)

    @property
    def backbone(self) -> str:
        if self.hparams.encoder == "minilm":
            return "minilm-l6"
        return f"bilstm{self.hparams.num_layers}x{self.hparams.hidden_size}"

    def word_states(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, n, d] states of each word as a span's first word and as its last word."""
        if self.hparams.encoder == "minilm":
            pieces = self.encoder(input_ids=batch["ids"], attention_mask=batch["piece_mask"]).last_hidden_state
            pieces = self.dropout(pieces)
            gather = lambda index: pieces.gather(1, index[..., None].expand(-1, -1, pieces.shape[-1]))
            return gather(batch["first"]), gather(batch["last"])
        embedded = self.dropout(self.embedding(batch["ids"]))
        packed = nn.utils.rnn.pack_padded_sequence(embedded, batch["lengths"].cpu(), batch_first=True,
                                                   enforce_sorted=False)
        states, _ = nn.utils.rnn.pad_packed_sequence(self.encoder(packed)[0], batch_first=True)
        states = self.dropout(states)
        return states, states

    def average_with(self, others: Sequence["SpanBasedParser"]) -> "SpanBasedParser":
        """Score spans, outside training, with the mean of this parser's and ``others``' span scores (an ensemble,
        beyond the paper; ``augment.ensemble``): a tree's score, a sum of span scores, is then the mean of the
        parsers' scores of that tree. Each of ``others`` must read a batch as this one does (the same categories,
        lexicon and words), as the first and second parsers of ``augment=subs`` do."""
        for other in others:
            for part in ("categories", "phrases", "words", "named_words"):
                if getattr(other.featurizer, part) != getattr(self.featurizer, part):
                    raise ValueError(f"span_cky: cannot average span scores with a parser whose featurizer has other "
                                     f"{part}: the score tables would not line up")
        self.averaged_with = [other.eval() for other in others]  # a list: not submodules, so never saved with it
        return self

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        """Span scores [B, n+1, n+1, C] over half-open spans (i, j): s(x_{i:j}, c) + λ·δ(x_{i:j}, c); outside
        training, with ``average_with``, their mean over the parsers."""
        scores = self.span_scores(batch)
        others = getattr(self, "averaged_with", [])
        if others and not self.training:
            scores = torch.stack([scores, *(other.to(scores.device).span_scores(batch) for other in others)]).mean(0)
        return scores

    def span_scores(self, batch: dict[str, Any]) -> torch.Tensor:
        """This parser's span scores (``forward``)."""
        first, last = self.word_states(batch)
        b, n, d = first.shape
        starts = first[:, :, None, :].expand(b, n, n, d)  # [B, i, j-1, d]: first and last word of the span
        ends = last[:, None, :, :].expand(b, n, n, d)
        rows = self.span_scorer(torch.cat([starts, ends], dim=-1))
        inclusive = rows[..., self.score_rows]  # [B, n, n, C]: span i..j inclusive
        scores = inclusive.new_zeros(b, n + 1, n + 1, inclusive.shape[-1])
        scores[:, :n, 1:] = inclusive
        weight = self.hparams.lexicon_weight * (1 if self.lexicon_scale is None else self.lexicon_scale)
        for example, matches in enumerate(batch["matches"]):
            if matches:
                i, j, c = torch.tensor(matches, device=scores.device).t()
                scores[example, i, j, c] += weight
        return scores

    def row_scores(self, scores: torch.Tensor) -> torch.Tensor:
        """Category scores [..., C] to the distribution the loss trains, over the network's rows [..., R]: a row
        shared by the entities of a kind scores as its best entity (the kind's score, plus λ where the lexicon names
        one of them), so the softmax has the kind once, not once per entity of it; without sharing, the identity."""
        index = self.score_rows.expand_as(scores)
        empty = scores.new_full((*scores.shape[:-1], self.span_scorer[-1].out_features), float("-inf"))
        return empty.scatter_reduce(-1, index, scores, "amax")

    def _chart(self, scores: torch.Tensor, n: int, constraints: dict[str, list[int]] | None = None,
               composition=None, k: int | None = None) -> cky.Chart:
        """The K-best chart of one utterance of ``n`` words from its span scores, under the featurizer's
        ``constraints`` of the utterance (no constant over a function word, no φ over a word the lexicon names).
        Ternary pruning applies at inference only, as the authors did, and so does ``constant_bonus``: every
        constant of a tree adds it to the tree's score, against trees that leave words φ."""
        featurizer, constraints = self.featurizer, constraints or {}
        shifted = cky.shift(scores[:n + 1, :n + 1], featurizer.phi)
        constant_scores = shifted[..., :featurizer.join]
        if composition is None and self.hparams.constant_bonus:
            constant_scores = constant_scores + self.hparams.constant_bonus
        if composition is None and self.hparams.lexicon_bounds_constants and constraints.get("named_words"):
            constant_scores = constant_scores.masked_fill(
                foreign_constants(constraints["named_words"], constraints["named_constants"], n,
                                  constant_scores.shape[-1]).to(constant_scores.device), float("-inf"))
        return cky.parse(constant_scores, shifted[..., featurizer.join], k=k or self.hparams.k,
                         ternary=self.hparams.ternary, composition=composition,
                         barred=cky.spans_holding(constraints.get("function_words", []), n),
                         meaningful=cky.spans_holding(constraints.get("named_words", []), n),
                         prune_ternary=self.hparams.prune_ternary and composition is None,
                         distinct_scores=self.hparams.distinct_scores)

    def training_labels(self, scores: torch.Tensor, batch: dict[str, Any]) -> list[torch.Tensor | None]:
        """Per example, the [n+1, n+1] span labels to train on: hard-EM's E step (§3.3), the best tree under
        ``scores`` whose program is the gold one; with ``gold_trees``, the annotated tree of ``*_spans.json``.
        None where an example has no such tree."""
        if self.hparams.gold_trees:
            return batch["gold_labels"]
        return [None if tree is None else self.featurizer.tree_labels(tree, n)
                for tree, n in zip(self.latent_trees(scores, batch), batch["lengths"].tolist())]

    def latent_trees(self, scores: torch.Tensor, batch: dict[str, Any]) -> list[cky.SpanNode | None]:
        """Per example, the best tree under ``scores`` whose program is the gold one (None where there is none)."""
        trees = []
        for example, (program, n) in enumerate(zip(batch["programs"], batch["lengths"].tolist())):
            composition = self.featurizer.composition(program)
            # one chart entry per sub-program of the gold: the constrained search is then exact, not K-best
            best = None if composition is None else next(self._chart(
                scores[example], n, batch["constraints"][example], composition, k=len(composition.table)).trees(),
                None)
            trees.append(None if best is None else best[1])
        return trees

    def loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor | None, int]:
        """Cross-entropy of every span against the latent tree, averaged over spans, then over the examples that
        have a tree; and how many have none (None loss when no example has one)."""
        scores = self(batch)
        losses = []
        for example, (labels, n) in enumerate(zip(self.training_labels(scores.detach(), batch),
                                                  batch["lengths"].tolist())):
            if labels is not None:
                spans = torch.triu_indices(n + 1, n + 1, offset=1, device=scores.device)  # every span i < j
                losses.append(F.cross_entropy(self.row_scores(scores[example, spans[0], spans[1]]),
                                              self.score_rows[labels.to(scores.device)[spans[0], spans[1]]]))
        skipped = len(batch["programs"]) - len(losses)
        return (torch.stack(losses).mean() if losses else None), skipped

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor | None:
        loss, skipped = self.loss(batch)
        self.no_tree += skipped
        if loss is not None:
            self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["programs"]) - skipped)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("train/no_tree", float(self.no_tree))  # §3.3: examples skipped for want of a tree, this epoch
        self.no_tree = 0

    def decode(self, scores: torch.Tensor, n: int, constraints: dict[str, list[int]] | None = None
               ) -> tuple[str, set[tuple[int, int, str]] | None]:
        """CKY inference for one utterance of ``n`` words from its span scores (§3.2): the program of the best tree
        whose sub-programs compose, and that tree's labeled spans; ("", None) when none of the first ``max_trees``
        root candidates composes (scored wrong). ``constraints``: as in ``_chart``; where they leave no tree that
        composes (a word the lexicon names may stand for another constant than the one it names), the chart
        without them decides, so a constraint can cost an answer but never leave a question unanswered; with
        ``fallback_keeps_named_words``, the chart without the function-word bar first (only its words' constraint)."""
        language, categories = self.featurizer.language, self.featurizer.categories
        chart = self._chart(scores, n, constraints)
        candidates = islice(chart.meanings(lambda c: language.leaf(categories[c]), language.compose),
                            self.hparams.max_trees)
        first = None  # the best tree whose program composes
        for _, meaning, back in candidates:
            program = language.program(meaning)
            if program is None:
                continue
            first = first or (program, back)
            if not self.hparams.execution_guided or self.answers(program):
                return program, labeled_spans(chart.tree(back, 0, n), categories)
        if first is not None:  # execution_guided, and no candidate answered: the best that composes
            return first[0], labeled_spans(chart.tree(first[1], 0, n), categories)
        if self.hparams.fallback_keeps_named_words and constraints and constraints.get("function_words") and \
                constraints.get("named_words"):
            return self.decode(scores, n, {**constraints, "function_words": []})
        if constraints and any(constraints.values()):
            return self.decode(scores, n)
        return "", None

    def answers(self, program: str) -> bool:
        """Whether ``program`` runs on the dataset's database to a non-empty answer (``execution_guided``)."""
        if not self.scorer.executes:
            raise ValueError(f"model.params.execution_guided=true needs programs that run on a database; "
                             f"{self.formalism.name} {'has none here' if self.formalism.executable else 'does not run'}")
        try:
            return bool(self.formalism.execute(program, self.scorer.world))
        except FormalismError:
            return False

    @torch.no_grad()
    def parse_with_details(self, batch: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
        """Programs by ``decode``. Details: the tree as the labeled spans of §4.4 (``[first word, last word,
        category or "join"]``), and where a gold tree exists, [spans shared, predicted, gold] for tree F1."""
        scores = self(batch)
        programs, details = [], []
        for example, n in enumerate(batch["lengths"].tolist()):
            program, spans = self.decode(scores[example], n, batch["constraints"][example])
            programs.append(program)
            detail = {"span_tree": None if spans is None else [list(span) for span in sorted(spans)]}
            gold_spans = batch["gold_spans"][example]
            if gold_spans is not None:
                spans = spans or set()
                detail["gold_spans_matched"] = [len(spans & gold_spans), len(spans), len(gold_spans)]
            details.append(detail)
        return programs, details

    def parse(self, batch: dict[str, Any]) -> list[str]:
        return self.parse_with_details(batch)[0]

    def on_test_epoch_end(self) -> None:
        """Tree F1 against the gold trees (§4.4, Table 3): labeled spans without φ, summed over the test examples
        that have a gold tree; a prediction without a tree counts its gold spans as missed."""
        super().on_test_epoch_end()
        matched = predicted = gold = 0
        for row in self.test_predictions:
            if "gold_spans_matched" in row:
                m, p, g = row["gold_spans_matched"]
                matched, predicted, gold = matched + m, predicted + p, gold + g
        if gold:
            self.log("test/span_f1", 2 * matched / (predicted + gold), sync_dist=False)

    def configure_optimizers(self):
        if self.hparams.encoder != "minilm":
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        # fine-tuning: the pretrained encoder moves slowly, the freshly initialised span network at lr
        encoder = {id(p) for p in self.encoder.parameters()}
        return torch.optim.AdamW([{"params": list(self.encoder.parameters()), "lr": self.hparams.encoder_lr},
                                  {"params": [p for p in self.parameters() if id(p) not in encoder]}],
                                 lr=self.hparams.lr)
