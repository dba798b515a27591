"""Grounded Graph Decoding (Gai et al. 2021, "Grounded Graph Decoding Improves Compositional Generalization in
Question Answering") for CFQ.

A CFQ query is a conjunctive query graph (§3.1): its nodes are the anonymised entities of the question (``M0``..)
and variables (``?x0``..), its edges the relations between them (FILTER inequalities are edges of the reserved
relation ``!=``, ``zoo.formalisms.sparql``, unless they are derived: see the departures below). Triples whose object
is a constant (``?x0 a film.film``, ``?x0 people.person.gender m_05zppz``) are *attributes* of their subject, one per
(relation, constant) pair of training. The model

1. reads the question as *groups* (§3.2): single words, or ``A and B`` phrases whose words share a part of speech
   merged into one group whose embedding is the sum of its words' (``models/syntax.py``; CFQ writes coordinations
   of three or more as ``A , B , and C``, grouped too unless ``comma_lists=False``). Phrases that act as one word
   in training (``art director``, ``executive produced``, ``country of nationality``) are one word first
   (``multiword``), so they can be list items;
2. encodes ``g_1 .. g_k NIL [SEP] x_0 .. x_V`` with a bidirectional LSTM (§3.1: "we concatenate the question with
   the list of variables"; ``NIL`` is what grounding attends to when no edge holds, §3.3). With
   ``encoder_input="tags"`` (the default) the LSTM reads each group's part of speech, or a closed-class word
   itself (``Did [entity] [VERB] [entity]``), as the reference implementation did with CFQ's question templates:
   the words then reach the edge scores only through grounding, which is what makes the structure generalise;
   ``encoder_input="words"`` reads the group embeddings, as §3.2 describes;
3. embeds each node as the contextual embedding of its token (an entity mentioned several times sums its
   mentions; an entity inside a group gets the group's embedding, §3.2);
4. scores every candidate edge s -r-> o independently, ``sigmoid(w_r^T [h_s, h_o, z_so])`` (Eq. 1 and §3.3), where
   the grounded embedding ``z_so = sum_k softmax_k(q_so^T K h_k / sqrt(d)) nu_k`` attends over the question's
   groups and NIL with ``q_so = Q [h_s, h_o]`` and ``nu_k`` the group's embedding; an attribute a of node s is
   scored the same way with a learned embedding of a in place of ``Q_o h_o``. Without grounding (the
   "syntax-aware" and "graph decoding only" ablations of Table 3) the score is ``sigmoid(w_r^T [h_s, h_o])``.
   With ``attention_heads > 1`` (beyond the paper, and no better on MCD1) each head has its own ``Q``, ``K`` and
   ``w_r^z`` and the grounded terms add up: with one softmax, the relations of one pair share one distribution,
   so in "founded and was employed by M0" (two groups: the auxiliary keeps them from being one ``A and B``) each
   relation is grounded in a part of its word only, where the group sum of §3.2 gives each its whole word;
5. trains on the binary cross-entropy of Eq. 2 over all candidate triples and attributes, plus the query type
   (``SELECT DISTINCT ?x0`` or ``SELECT count ( * )``), and decodes every triple with probability above a
   threshold and every attribute above another: 0.5, or with ``tune_threshold`` the pair with the best dev exact
   match (``on_test_start``; counted for every pair at once by ``exact_by_thresholds``, which also gives each
   validation's ``val/exact_match_tuned``, the checkpoint choice of ``selection_metric=exact_match_tuned``).

The scoring is vectorised over all (s, r, o) of a batch: ``w_r^T [h_s, h_o, z_so]`` splits into a subject term, an
object term and a grounding term, and the grounding term is ``sum_k alpha_so^k (w_r^z . nu_k)``, so no tensor of
size pairs x embedding is ever formed. The node axis of a batch holds each question's own nodes (``collate``), not
every slot, and ``data.bucket_by_length`` batches questions with as many nodes together (``GGDFeaturizer.length``).

Beyond the paper (§4.6 names richer syntax as future work): with ``gnn_layers > 0`` the encoder's question states
are refined by a relational GCN (``torch_geometric`` ``RGCNConv``) over the spaCy dependency parse lifted to groups.

The authors' protocol (``featurizer.variables="gold"``, ``experiment=ggd_cfq_authors_protocol``): the reference
implementation appended the gold query's variables to the question and counted a question right by ``emr``, the
match of the relations between entities and variables only (``zoo.formalisms.sparql.emr_view``; every CFQ run
reports it as ``test_emr``). With ``variables="gold"`` the candidate nodes are the question's entities and the gold
query's variables, as theirs; that number is comparable with the paper's 97.9, and the headline stays the
full-query exact match with every variable slot a candidate.

Beyond the paper, ``predict_variables``: a head on the pooled question predicts how many variables the query has
(CFQ numbers them ``?x0`` up, without gaps, in every MCD1 training and test query), and only that many variable
slots are candidate nodes; training conditions the edges on the gold number, as the authors' gold variables did,
and decoding on the predicted one, so nothing comes from the gold query. With every slot a candidate, most
candidate triples of a question involve variables its query does not have (MCD1 test queries have at most 3 of
the 6).

Beyond the paper, ``node_terms="shared"``: Eq. 1's ``w_r^T [h_s, h_o]`` gives every relation its own reading of
the two nodes' contextual states, so a question whose construction training never had can shift relations apart
however clearly its words name them. MCD1 has no training question "Who was M1 ' s ..." (336 in dev): on
them the ``group_scores=max`` model of seed 4 was right on 46% of dev against 92-100% for seeds 1-3, and it reads
"Who was M1 ' s cinematographer" as no relation at all. With shared node terms the states say only whether s and o
are related, the same for every relation, and which relation comes from grounding and a bias per relation.

Beyond the paper, ``input_dropout``: word dropout (Iyyer et al. 2015) on the encoder's input only. In training
each question position's tag (or group embedding) is replaced by the unknown one with this probability, so that a
node's contextual state cannot depend on every word of its construction; grounding still reads every word.

Departures, each a switch: the tag input and the multiword units follow the reference implementation rather
than the paper's text; a word's part of speech comes from a lexicon of the training questions (``lexical_tags``,
``models.syntax.tag_lexicon``), since spaCy tags CFQ's generated questions inconsistently; constants are
attributes, since a decomposed score ``w_r . h_s + w_r . h_o + w_r . z`` cannot tell which type constant the
grounded word names; candidate triples are restricted to the (subject kind, relation, object kind) combinations
seen in training, which removes triples the SPARQL grammar forbids; the decision threshold is chosen on dev;
decoding leaves out the types that CFQ's queries leave out as implied by a chosen triple (``?x0 film.director.film
M0`` implies ``?x0 a film.director``; ``GGDFeaturizer.implied_types``, read off the training queries), which the
independent scores of §3.1 cannot know; and ``FILTER ( s != o )`` is not an edge to learn but derived from each
chosen edge s -> o of the relations that always come with it in training (``filter_relations``: spouse and sibling,
on every CFQ split of the mirror without exception), unless ``derived_filters=False``.
"""
from __future__ import annotations

import logging
import math
import re
from typing import Any, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Batch, Data

from zoo.formalisms import FormalismError, get_formalism
from zoo.formalisms.sparql import FILTER_RELATION, Filter, SparqlQuery, Triple
from zoo.parser import Featurizer, Parser, distributed
from zoo.registry import register_model
from zoo.types import Example

log = logging.getLogger(__name__)
PAD, UNK, NIL, SEP = "<pad>", "<unk>", "<nil>", "<sep>"
ENTITY = re.compile(r"M(\d+)")
VARIABLE = re.compile(r"\?x(\d+)")
KIND_ENTITY, KIND_VARIABLE = 0, 1  # node kinds, for the candidate masks
N_KINDS = 2
# Universal PoS tags of open-class words: the encoder reads these in place of the words (encoder_input="tags").
OPEN_CLASSES = frozenset({"NOUN", "VERB", "ADJ", "ADV", "PROPN", "NUM", "X", "INTJ", "SYM"})


class FeaturizationError(ValueError):
    """An example the featurizer cannot encode (empty question, an entity index beyond those seen in training)."""


def _is_node(term: str) -> bool:
    return bool(ENTITY.fullmatch(term) or VARIABLE.fullmatch(term))


def _conjuncts(query: SparqlQuery, filters: bool = True) -> Iterator[tuple[str, str, str]]:
    """(subject, relation, object) of every conjunct; a FILTER is (left, "!=", right), unless ``filters=False``."""
    for conjunct in query.conjuncts:
        if isinstance(conjunct, Triple):
            yield conjunct.subject, conjunct.relation, conjunct.object
        elif filters:
            yield conjunct.left, FILTER_RELATION, conjunct.right


def filter_relations(queries: Sequence[SparqlQuery]) -> list[str] | None:
    """The relations whose every edge s -> o comes with ``FILTER ( s != o )``, when the filters of every query are
    exactly those of its edges of these relations; None when that does not hold (then filters must be learned).
    On every CFQ split in the mirror they are the spouse and sibling relations."""
    always = {t.relation for q in queries for t in q.triples if _is_node(t.object)}
    for query in queries:
        filters = {(f.left, f.right) for f in query.filters}
        always -= {t.relation for t in query.triples if (t.subject, t.object) not in filters}
    for query in queries:
        if {(f.left, f.right) for f in query.filters} != {(t.subject, t.object) for t in query.triples
                                                          if t.relation in always}:
            return None
    return sorted(always)


def _domain(relation: str) -> str | None:
    """The type a relation is a property of, by Freebase's naming (``film.director.film`` -> ``film.director``),
    when all of its alternatives agree; ``None`` for reversed paths and alternatives of several types."""
    alternatives = relation.split("|")
    if any(alt.startswith("^") for alt in alternatives):
        return None
    domains = {alt.split("/")[0].removeprefix("ns:").rsplit(".", 1)[0] for alt in alternatives}
    return domains.pop() if len(domains) == 1 else None


def _example_name(example: Example) -> str:
    return f"example {example.meta.get('index', '?')} ({example.utterance[:60]!r})"


def _rows(items: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """The batch index of each row of the ``item[key]`` arrays of a batch, and those rows stacked."""
    blocks = [item[key] for item in items]
    return (np.repeat(np.arange(len(blocks)), [len(block) for block in blocks]),
            np.concatenate(blocks).astype(np.int64))


class GGDFeaturizer(Featurizer):
    """Questions to group sequences and node incidences; queries to target graphs (``torch_geometric`` ``Data``).

    Node slots are fixed per fitted featurizer: entities ``M0..M{E-1}``, then ``?x0..?x{V-1}`` (E and V from the
    training split). Each (relation, constant) pair of training (``a film.film``, ``people.person.gender
    m_05zppz``) is an *attribute* a node may have.
    """

    def __init__(self, grouping: bool = True, encoder_input: str = "tags", multiword: bool = True,
                 dependencies: bool = False, tagger: str | None = None, entity_slots: int | None = None,
                 comma_lists: bool = True, lexical_tags: bool = True, variables: str = "all",
                 derived_filters: bool = True):
        if encoder_input not in ("tags", "words"):
            raise ValueError(f"encoder_input must be 'tags' or 'words', not {encoder_input!r}")
        if variables not in ("all", "gold"):
            raise ValueError(f"model.featurizer.variables must be 'all' or 'gold', not {variables!r}")
        self.grouping = grouping
        self.multiword = multiword  # read phrases such as "art director" as one word (models/syntax.py)
        self.encoder_input = encoder_input
        self.comma_lists = comma_lists  # group "A , B , and C" too, not only "A and B" (models/syntax.py)
        self.lexical_tags = lexical_tags  # a word's parts of speech are those of training (models.syntax.tag_lexicon)
        self.entity_slots = entity_slots  # None: as many as the training split mentions
        # "all": every variable slot is a candidate node; "gold": only the gold query's variables, as the reference
        # implementation's preprocessing appended them to the question (the authors' protocol, never the headline)
        self.variables = variables
        # derive FILTER ( s != o ) from the chosen edges of ``filter_relations`` at decoding instead of learning it as
        # an edge, where training shows the rule without exception (it holds on every CFQ split in the mirror)
        self.derived_filters = derived_filters
        self.filter_relations: list[str] = []
        self.dependencies = dependencies
        self.tagger = tagger
        self.units: set[tuple[str, ...]] = set()  # the multiword units found in training
        self.lexicon: dict[str, tuple[str, ...]] = {}  # word -> its parts of speech in training, most frequent first
        self.words: dict[str, int] = {}
        self.tags: dict[str, int] = {}
        self.relations: dict[str, int] = {}  # edge relations between entities and variables, FILTER's "!=" too
        self.attributes: list[tuple[str, str]] = []  # (relation, constant)
        self.dependency_labels: dict[str, int] = {}
        self.n_entities = self.n_variables = 0
        self.allowed = torch.zeros(0)  # [R, 2, 2]: relation r seen from a subject kind to an object kind
        self.allowed_attributes = torch.zeros(0)  # [2, A]: attribute seen on a node kind
        self.implied_types = torch.zeros(0)  # [R, A]: CFQ leaves attribute a out of a subject of relation r
        self._syntax: dict[str, Any] = {}  # utterance -> Analysis over its units; filled by prepare, never saved
        self._encoded: dict[tuple[str, str], dict[str, Any]] = {}  # (utterance, program) -> encode's output

    @property
    def needs_syntax(self) -> bool:
        return self.grouping or self.dependencies or self.encoder_input == "tags"

    # ----- layout ----------------------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return self.n_entities + self.n_variables

    def node_names(self) -> list[str]:
        return [f"M{i}" for i in range(self.n_entities)] + [f"?x{i}" for i in range(self.n_variables)]

    def node_kinds(self) -> torch.Tensor:
        return torch.tensor([KIND_ENTITY] * self.n_entities + [KIND_VARIABLE] * self.n_variables)

    # ----- fitting ---------------------------------------------------------------------------------------------
    def fit(self, examples: Sequence[Example], world: Any = None) -> "GGDFeaturizer":
        sparql = get_formalism("cfq_sparql")
        queries = [sparql.parse(e.program) for e in examples]
        derived = filter_relations(queries) if self.derived_filters else None
        if self.derived_filters and derived is None:
            log.warning("derived_filters: the FILTERs of the training queries are not those of a set of relations; "
                        "they are learned as edges")
        self.filter_relations = derived or []
        entities, variables, relations, attributes = {0}, {0}, set(), set()
        for query in queries:
            for subject, relation, obj in _conjuncts(query, filters=derived is None):
                for term in (subject, obj):
                    if (match := ENTITY.fullmatch(term)):
                        entities.add(int(match.group(1)))
                    elif (match := VARIABLE.fullmatch(term)):
                        variables.add(int(match.group(1)))
                if _is_node(obj):
                    relations.add(relation)
                else:
                    attributes.add((relation, obj))
        for e in examples:
            entities.update(int(m.group(1)) for w in e.utterance.split() if (m := ENTITY.fullmatch(w)))
        self.n_entities, self.n_variables = max(max(entities) + 1, self.entity_slots or 0), max(variables) + 1
        self.relations = {r: i for i, r in enumerate(sorted(relations))}
        self.attributes = sorted(attributes)
        if self.multiword:
            from models.syntax import multiword_units

            self.units = multiword_units(e.utterance.split() for e in examples)
        variable_tokens = [f"<x{i}>" for i in range(self.n_variables)]
        words = sorted({w for e in examples for w in self._tokens(e)})
        self.words = {w: i for i, w in enumerate([PAD, UNK, NIL, SEP, *variable_tokens, *words])}
        if self.needs_syntax:
            self.prepare(examples)
        if self.lexical_tags and self.needs_syntax:
            from models.syntax import tag_lexicon

            self.lexicon = tag_lexicon(self._syntax[e.utterance] for e in examples)
        if self.encoder_input == "tags":
            tags = sorted({tag for e in examples for tag in self._tags(e, self._groups(e))})
            self.tags = {t: i for i, t in enumerate([PAD, UNK, NIL, SEP, *variable_tokens, *tags])}
        if self.dependencies:
            labels = {label for e in examples for label in self._dependency_edges(e, self._groups(e))[1]}
            self.dependency_labels = {label: i for i, label in enumerate(["<unk>", *sorted(labels)])}
        slot = {name: i for i, name in enumerate(self.node_names())}
        kinds = self.node_kinds()
        self.allowed = torch.zeros(len(self.relations), N_KINDS, N_KINDS, dtype=torch.bool)
        self.allowed_attributes = torch.zeros(N_KINDS, len(self.attributes), dtype=torch.bool)
        stated_together = torch.zeros(len(self.relations), len(self.attributes), dtype=torch.bool)
        for query in queries:
            edges, node_attributes = self._graph(query, slot)
            for s, r, o in edges:
                self.allowed[r, kinds[s], kinds[o]] = True
            for s, a in node_attributes:
                self.allowed_attributes[kinds[s], a] = True
                stated_together[[r for s_, r, _ in edges if s_ == s], a] = True
        # CFQ drops a type its query implies: ``?x0 film.director.film M0`` never comes with ``?x0 a
        # film.director`` although "film director" is in the question, while ``film.writer.film`` keeps ``a
        # film.writer``. The implied pairs are a relation and its own type (``_domain``) never stated together
        # on one subject in training; decoding drops them (``GroundedGraphDecoder.decode``).
        own_type = torch.tensor([[attribute == ("a", _domain(relation)) for attribute in self.attributes]
                                 for relation in self.relations], dtype=torch.bool).view(len(self.relations), -1)
        self.implied_types = own_type & ~stated_together
        return self

    def prepare(self, examples: Sequence[Example]) -> None:
        """Tag every question once, in bulk (spaCy; cached on disk by ``models.syntax.SyntaxCache``)."""
        if not self.needs_syntax:
            return
        from models.syntax import merge_analysis, shared_cache

        missing = sorted({e.utterance for e in examples} - set(self._syntax))
        if missing:
            for utterance, analysis in zip(missing, shared_cache(self.tagger).analyse_many(missing)):
                self._syntax[utterance] = merge_analysis(analysis, self._spans(utterance))

    # ----- encoding --------------------------------------------------------------------------------------------
    def _graph(self, query: SparqlQuery, slot: dict[str, int]):
        """(subject slot, relation id, object slot) edges and (slot, attribute id) pairs of a query; a KeyError
        names the first term, relation or attribute outside this featurizer's vocabulary."""
        attribute_ids = {a: i for i, a in enumerate(self.attributes)}
        edges, attributes = set(), set()
        for subject, relation, obj in _conjuncts(query, filters=not self.filter_relations):
            if _is_node(obj):
                edges.add((slot[subject], self.relations[relation], slot[obj]))
            else:
                attributes.add((slot[subject], attribute_ids[(relation, obj)]))
        return sorted(edges), sorted(attributes)

    def _spans(self, utterance: str) -> list[tuple[int, ...]]:
        """The word indices of each unit of the question: a multiword unit, or a single word."""
        from models.syntax import merge_units

        spans, start = [], 0
        for unit in merge_units(utterance.split(), self.units):
            spans.append(tuple(range(start, start + len(unit))))
            start += len(unit)
        return spans

    def _tokens(self, example: Example) -> list[str]:
        """The question's units as tokens (``art_director``); its words without ``multiword``."""
        words = example.utterance.split()
        return ["_".join(words[i] for i in span) for span in self._spans(example.utterance)]

    def _analysis(self, example: Example):
        """The question's spaCy analysis; tagged now if ``prepare`` did not see it."""
        if example.utterance not in self._syntax:
            self.prepare([example])
        return self._syntax[example.utterance]

    def _groups(self, example: Example) -> list[tuple[int, ...]]:
        if not self.grouping:
            return [(i,) for i in range(len(self._tokens(example)))]
        from models.syntax import conjunction_groups

        return conjunction_groups(self._analysis(example), comma_lists=self.comma_lists, lexicon=self.lexicon)

    def _tags(self, example: Example, groups: list[tuple[int, ...]]) -> list[str]:
        """A group's tag: ``[entity]`` for CFQ's anonymised entities, the part of speech of an open-class word
        (``[NOUN]``, ``[VERB]``, ``[ADJ]``), and a closed-class word itself (``Did``, ``of``, ``'s``). The words
        of a group share a part of speech (``models.syntax.group_tag``)."""
        from models.syntax import group_tag, word_tags

        analysis = self._analysis(example)
        word_pos = word_tags(analysis, self.lexicon)
        tags = []
        for group in groups:
            pos, word = group_tag(word_pos, group), analysis.tokens[group[0]]
            tags.append("[entity]" if pos == "ENTITY" else f"[{pos}]" if pos in OPEN_CLASSES else word)
        return tags

    def encode(self, example: Example) -> dict[str, Any]:
        """Memoised: CFQ training revisits 95k questions every epoch."""
        key = (example.utterance, example.program)
        if key not in self._encoded:
            self._encoded[key] = self._encode(example)
        return self._encoded[key]

    def _encode(self, example: Example) -> dict[str, Any]:
        """Numpy arrays, so that ``collate`` copies blocks rather than building tensors from Python lists:
        ``words`` [groups + tail, widest group] (0-padded word ids), ``tags`` [groups + tail], ``mentions`` [M, 2]
        (node slot, sequence position), ``nodes`` (the question's node slots, ascending) and the ``target``
        graph's ``edges`` [E, 3] (subject slot, relation, object slot) and ``attributes`` [K, 2] (slot,
        attribute), or the reason the example has none."""
        tokens = self._tokens(example)
        if not tokens:
            raise FeaturizationError(f"{_example_name(example)}: empty question")
        groups = self._groups(example)
        unk = self.words[UNK]
        variables = self._variable_slots(example)
        tail = [NIL, SEP] + [f"<x{i}>" for i in variables]
        word_ids = [[self.words.get(tokens[i], unk) for i in group] for group in groups] + [[self.words[t]]
                                                                                            for t in tail]
        words = np.zeros((len(word_ids), max(map(len, word_ids))), dtype=np.int64)
        for position, ids in enumerate(word_ids):
            words[position, :len(ids)] = ids
        item = {"words": words, "n_question": len(groups) + 1}  # grounding attends over the groups and NIL
        if self.encoder_input == "tags":
            unk_tag = self.tags[UNK]
            item["tags"] = np.array([self.tags.get(tag, unk_tag) for tag in self._tags(example, groups) + tail])
        # node -> the sequence positions whose contextual embeddings it sums (an entity: its mentions)
        mentions: list[tuple[int, int]] = []
        for position, group in enumerate(groups):
            for i in group:
                if (match := ENTITY.fullmatch(tokens[i])):
                    entity = int(match.group(1))
                    if entity >= self.n_entities:
                        raise FeaturizationError(f"{_example_name(example)}: entity {tokens[i]} is beyond the "
                                                 f"M0..M{self.n_entities - 1} seen in training")
                    mentions.append((entity, position))
        variable_start = len(groups) + 2
        mentions += [(self.n_entities + i, variable_start + k) for k, i in enumerate(variables)]
        item["mentions"] = np.array(mentions, dtype=np.int64).reshape(-1, 2)
        item["nodes"] = np.unique(item["mentions"][:, 0])
        try:
            graph = self.target_graph(example)
            edges, attributes = (torch.stack([graph.edge_index[0], graph.edge_type, graph.edge_index[1]], dim=1),
                                 graph.node_attributes.nonzero())
            nodes = torch.cat([edges[:, 0], edges[:, 2], attributes[:, 0]])
            item["target"] = {"edges": edges.numpy(), "attributes": attributes.numpy(), "count": bool(graph.count),
                              "variables": len(nodes[nodes >= self.n_entities].unique())}
        except (FeaturizationError, FormalismError) as e:
            # a term unseen in training, or no gold query (a new question: zoo.inference): parsed, never trained on
            item["target"] = str(e)
        if self.dependencies:
            item["dependencies"] = self._dependency_graph(example, groups)
        return item

    def _variable_slots(self, example: Example) -> list[int]:
        """The variables ``?x<i>`` that are candidate nodes: all slots, or with ``variables="gold"`` the gold
        query's."""
        if self.variables == "all":
            return list(range(self.n_variables))
        try:
            query = get_formalism("cfq_sparql").parse(example.program)
        except FormalismError as e:
            raise FeaturizationError(f"{_example_name(example)}: variables=gold needs a gold query ({e})") from None
        slots = sorted({int(m.group(1)) for c in query.conjuncts for t in c.ends if (m := VARIABLE.fullmatch(t))})
        if slots and slots[-1] >= self.n_variables:
            raise FeaturizationError(f"{_example_name(example)}: ?x{slots[-1]} is beyond the "
                                     f"?x0..?x{self.n_variables - 1} seen in training")
        return slots

    def target_graph(self, example: Example) -> Data:
        """The gold query as a graph over this featurizer's node slots (``edge_type`` indexes ``relations``),
        with ``node_attributes`` [N, A] and the query type ``count``."""
        query = get_formalism("cfq_sparql").parse(example.program)
        try:
            edges, attributes = self._graph(query, {name: i for i, name in enumerate(self.node_names())})
        except KeyError as e:
            raise FeaturizationError(f"{_example_name(example)}: {e.args[0]!r} is not a node, relation or "
                                     "attribute seen in training, so this query cannot be a target") from None
        node_attributes = torch.zeros(self.n_nodes, len(self.attributes), dtype=torch.bool)
        for s, a in attributes:
            node_attributes[s, a] = True
        return Data(edge_index=torch.tensor([[s for s, _, _ in edges], [o for _, _, o in edges]],
                                            dtype=torch.long).view(2, -1),
                    edge_type=torch.tensor([r for _, r, _ in edges], dtype=torch.long),
                    node_attributes=node_attributes, num_nodes=self.n_nodes,
                    count=torch.tensor([query.query_type == "count"]))

    def query(self, edges: Sequence[tuple[int, int, int]], attributes: Sequence[tuple[int, int]],
              count: bool) -> SparqlQuery:
        """The query of a graph over the node slots: (subject, relation id, object) edges, (node, attribute id)."""
        names = self.node_names()
        relations = {i: r for r, i in self.relations.items()}
        conjuncts = [Filter(names[s], names[o]) if relations[r] == FILTER_RELATION
                     else Triple(names[s], relations[r], names[o]) for s, r, o in edges]
        conjuncts += [Filter(names[s], names[o]) for s, r, o in edges if relations[r] in self.filter_relations]
        conjuncts += [Triple(names[s], self.attributes[a][0], self.attributes[a][1]) for s, a in attributes]
        return SparqlQuery("count" if count else "select", None if count else "?x0", tuple(conjuncts))

    def _dependency_edges(self, example: Example, groups: list[tuple[int, ...]]):
        from models.syntax import dependency_edges, lift_edges_to_groups

        return lift_edges_to_groups(*dependency_edges(self._analysis(example)), groups)

    def _dependency_graph(self, example: Example, groups: list[tuple[int, ...]]) -> Data:
        edges, labels = self._dependency_edges(example, groups)
        label_ids = [self.dependency_labels.get(label, 0) for label in labels]  # 0: a label unseen in training
        return Data(edge_index=torch.tensor(edges, dtype=torch.long).view(-1, 2).t(),
                    edge_type=torch.tensor(label_ids, dtype=torch.long), num_nodes=len(groups))

    def length(self, example: Example) -> tuple[int, int]:
        """Training batches of questions with as many nodes and of similar length (``data.bucket_by_length``): the
        pairs of nodes and the encoder's steps are what a step costs, and padding either is waste."""
        item = self.encode(example)
        return len(item["nodes"]), len(item["words"])

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Tensors of a batch. The node axis holds each question's nodes only (the entities it mentions and its
        variable slots), in slot order and padded to the batch's most (``nodes``: their slots, ``node_mask``):
        an absent slot's pairs are never candidates, and on MCD1 a question has 7.9 of the 16 slots on average."""
        batch_size = len(items)
        lengths = np.array([len(item["words"]) for item in items])
        length, width = int(lengths.max()), max(item["words"].shape[1] for item in items)
        n_present = max(1, max(len(item["nodes"]) for item in items))  # (no nodes: still decoded, to a wrong query)
        words = np.zeros((batch_size, length, width), dtype=np.int64)
        nodes = np.zeros((batch_size, n_present), dtype=np.int64)
        node_mask = np.zeros((batch_size, n_present), dtype=bool)
        position = np.full((batch_size, self.n_nodes), -1)  # slot -> its place on the node axis (-1: absent)
        for b, item in enumerate(items):
            words[b, :len(item["words"]), :item["words"].shape[1]] = item["words"]
            present = item["nodes"]
            nodes[b, :len(present)], node_mask[b, :len(present)] = present, True
            position[b, present] = np.arange(len(present))
        b, mentions = _rows(items, "mentions")
        incidence = torch.zeros(batch_size, n_present, length)
        incidence.index_put_(tuple(torch.from_numpy(x) for x in (b, position[b, mentions[:, 0]], mentions[:, 1])),
                             torch.ones(len(b)), accumulate=True)
        n_question = torch.tensor([item["n_question"] for item in items])
        targets = [item["target"] for item in items]
        untrainable = [t for t in targets if isinstance(t, str)]
        batch = {"words": torch.from_numpy(words), "lengths": torch.from_numpy(lengths),
                 "nodes": torch.from_numpy(nodes), "node_mask": torch.from_numpy(node_mask), "incidence": incidence,
                 "question_mask": torch.arange(length)[None, :] < n_question[:, None],
                 "target": untrainable[0] if untrainable else self._target_tensors(targets, position, n_present)}
        if self.encoder_input == "tags":
            tags = np.zeros((batch_size, length), dtype=np.int64)
            for b, item in enumerate(items):
                tags[b, :len(item["tags"])] = item["tags"]
            batch["tags"] = torch.from_numpy(tags)
        if self.dependencies:
            batch["dependencies"] = Batch.from_data_list([item["dependencies"] for item in items])
        return batch

    def _target_tensors(self, targets: list[dict[str, Any]], position: np.ndarray,
                        n_present: int) -> dict[str, torch.Tensor]:
        """The gold graphs on the batch's node axis: ``edges`` [B, P, P, R] and ``attributes`` [B, P, A] (0/1),
        ``count`` [B], ``variables`` [B] (how many variables the query has: CFQ numbers them ``?x0`` up), and
        ``absent`` [B], the number of gold triples and attributes on a node the question lacks
        (an entity it does not mention, a variable ``variables="gold"`` left out), which can never be decoded."""
        batch_size = len(targets)
        b_edges, edges = _rows(targets, "edges")
        s, r, o = edges.T
        s, o = position[b_edges, s], position[b_edges, o]
        edges_here = (s >= 0) & (o >= 0)
        edges = torch.zeros(batch_size, n_present, n_present, len(self.relations))
        edges[tuple(torch.from_numpy(x[edges_here]) for x in (b_edges, s, o, r))] = 1.0
        b_attributes, attributes = _rows(targets, "attributes")
        s, a = attributes.T
        s = position[b_attributes, s]
        attributes_here = s >= 0
        attributes = torch.zeros(batch_size, n_present, len(self.attributes))
        attributes[tuple(torch.from_numpy(x[attributes_here]) for x in (b_attributes, s, a))] = 1.0
        return {"edges": edges, "attributes": attributes,
                "absent": torch.from_numpy(np.bincount(b_edges[~edges_here], minlength=batch_size)
                                           + np.bincount(b_attributes[~attributes_here], minlength=batch_size)),
                "count": torch.tensor([target["count"] for target in targets], dtype=torch.float),
                "variables": torch.tensor([target["variables"] for target in targets])}

    # ----- checkpoint state ------------------------------------------------------------------------------------
    _OPTIONS = ("grouping", "encoder_input", "multiword", "dependencies", "tagger", "entity_slots", "comma_lists",
                "lexical_tags", "variables", "derived_filters")
    _FITTED = ("words", "tags", "relations", "dependency_labels", "n_entities", "n_variables", "filter_relations")

    def state_dict(self) -> dict[str, Any]:
        return {**{key: getattr(self, key) for key in self._OPTIONS + self._FITTED},
                "units": sorted(map(list, self.units)), "attributes": [list(a) for a in self.attributes],
                "lexicon": {word: list(tags) for word, tags in self.lexicon.items()},
                "allowed": self.allowed.tolist(), "allowed_attributes": self.allowed_attributes.tolist(),
                "implied_types": self.implied_types.tolist()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "GGDFeaturizer":
        featurizer = cls(**{key: state[key] for key in cls._OPTIONS if key in state})  # older: option defaults
        for key in cls._FITTED:
            if key in state:  # (an older checkpoint: learned filters)
                setattr(featurizer, key, state[key])
        featurizer.units = set(map(tuple, state["units"]))
        featurizer.lexicon = {word: tuple(tags) for word, tags in state["lexicon"].items()}
        featurizer.attributes = [tuple(a) for a in state["attributes"]]
        featurizer.allowed = torch.tensor(state["allowed"], dtype=torch.bool)
        featurizer.allowed_attributes = torch.tensor(state["allowed_attributes"], dtype=torch.bool)
        featurizer.implied_types = torch.tensor(state["implied_types"], dtype=torch.bool)
        return featurizer


class BiLSTM(nn.Module):
    """A stacked bidirectional LSTM over right-padded sequences. Each layer is two unidirectional LSTMs, one
    reading each sequence forwards, the other reading it reversed within its own length, so padding only ever
    follows the real tokens in either direction and no packing is needed (packed sequences are several times
    slower on CPU); a layer reads both directions of the layer below, as ``nn.LSTM(bidirectional=True)`` does."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int, dropout: float, chunks: int = 1):
        super().__init__()
        sizes = [input_size] + [2 * hidden_size] * (num_layers - 1)
        self.forwards = nn.ModuleList(nn.LSTM(size, hidden_size, batch_first=True) for size in sizes)
        self.backwards = nn.ModuleList(nn.LSTM(size, hidden_size, batch_first=True) for size in sizes)
        self.dropout = nn.Dropout(dropout)
        self.chunks = chunks

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[B, T, input_size] and [B] lengths -> [B, T, 2 * hidden_size] (zeros past each length).

        With ``chunks > 1`` the batch is sorted by length and cut into that many runs of sequences, each encoded
        only up to its own longest: a random batch of CFQ questions is about half padding at its longest's
        length, and every padded step costs the recurrence as much as a real one. A sequence's states do not
        depend on the others in its batch, so the result is the same as one call (up to float rounding)."""
        if self.chunks <= 1 or len(inputs) < 2 * self.chunks:
            return self._encode(inputs, lengths)
        steps = inputs.shape[1]
        lengths = lengths.to(inputs.device)
        order = lengths.argsort(descending=True)
        parts = []
        for rows in order.tensor_split(self.chunks):
            longest = int(lengths[rows[0]])
            parts.append(F.pad(self._encode(inputs[rows, :longest], lengths[rows]), (0, 0, 0, steps - longest)))
        return torch.cat(parts).index_select(0, order.argsort())

    def _encode(self, inputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        batch, steps = inputs.shape[:2]
        positions = torch.arange(steps, device=inputs.device)[None, :]
        lengths = lengths.to(inputs.device)[:, None]
        valid = positions < lengths
        reverse = torch.where(valid, lengths - 1 - positions, positions)  # an involution
        # the rows of the flattened [B * T, d] states, in each sequence's reversed order: index_select copies
        # whole rows, several times faster than a gather along T (and its scatter_add backward) on CPU
        rows = (reverse + torch.arange(batch, device=inputs.device)[:, None] * steps).reshape(-1)
        valid = valid[..., None]

        def reversed_(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(batch * steps, -1).index_select(0, rows).view(batch, steps, -1)

        states = inputs
        for layer, (forwards, backwards) in enumerate(zip(self.forwards, self.backwards)):
            if layer:
                states = self.dropout(states)
            states = torch.cat([forwards(states)[0], reversed_(backwards(reversed_(states))[0])], dim=-1) * valid
        return states


@register_model("ggd")
class GroundedGraphDecoder(Parser):
    """Grounded Graph Decoding (module docstring); ``grounding=False`` gives the paper's ablations."""

    featurizer_class = GGDFeaturizer
    supported_formalisms = ("cfq_sparql",)

    def __init__(self, featurizer: GGDFeaturizer, formalism: str, embedding_dim: int = 16, hidden_size: int = 32,
                 num_layers: int = 3, dropout: float = 0.0, grounding: bool = True, attention_dim: int = 64,
                 attention_heads: int = 1, gnn_layers: int = 0, threshold: float = 0.5,
                 attribute_threshold: float | None = None, tune_threshold: bool = True,
                 lr: float = 5e-3, weight_decay: float = 0.0, warmup_epochs: float = 0.0,
                 selection_metric: str = "exact_match", encoder_chunks: int = 1, predict_variables: bool = False,
                 group_scores: str = "sum", grounding_attention: str = "softmax", node_terms: str = "relation",
                 input_dropout: float = 0.0):
        super().__init__(featurizer, formalism)
        if not 0.0 <= input_dropout < 1.0:
            raise ValueError(f"model.params.input_dropout must be in [0, 1), got {input_dropout}")
        if attention_heads < 1:
            raise ValueError(f"model.params.attention_heads must be at least 1, got {attention_heads}")
        if group_scores not in ("sum", "max"):
            raise ValueError(f"model.params.group_scores must be 'sum' or 'max', not {group_scores!r}")
        if grounding_attention not in ("softmax", "sigmoid"):
            raise ValueError("model.params.grounding_attention must be 'softmax' or 'sigmoid', "
                             f"not {grounding_attention!r}")
        if node_terms not in ("relation", "shared"):
            raise ValueError(f"model.params.node_terms must be 'relation' or 'shared', not {node_terms!r}")
        if node_terms == "shared" and not grounding:
            raise ValueError("model.params.node_terms=shared needs grounding: without it nothing tells relations apart")
        if selection_metric not in self.SELECTION_METRICS:
            raise ValueError(f"model.params.selection_metric must be one of {', '.join(self.SELECTION_METRICS)}, "
                             f"not {selection_metric!r}")
        self.primary_metric = selection_metric  # what chooses the checkpoint and the thresholds on dev
        self._threshold_tally = torch.zeros(len(self.THRESHOLDS), len(self.THRESHOLDS), dtype=torch.long)
        self._tallied = 0
        self.save_hyperparameters(ignore=["featurizer"])
        n_relations, n_attributes = len(featurizer.relations), len(featurizer.attributes)
        self.word_embedding = nn.Embedding(len(featurizer.words), embedding_dim, padding_idx=0)
        self.tag_embedding = (nn.Embedding(len(featurizer.tags), embedding_dim, padding_idx=0)
                              if featurizer.encoder_input == "tags" else None)
        # dropout acts between LSTM layers only, as nn.LSTM's does and as the reference implementation used it
        self.encoder = BiLSTM(embedding_dim, hidden_size, num_layers, dropout, encoder_chunks)
        d = 2 * hidden_size
        self.dropout = nn.Dropout(dropout)  # and on the residual of each dependency-GNN layer
        self.gnn = nn.ModuleList()
        if gnn_layers:
            from torch_geometric.nn import RGCNConv

            labels = max(1, len(featurizer.dependency_labels))
            self.gnn = nn.ModuleList(RGCNConv(d, d, labels) for _ in range(gnn_layers))
        # w_r^T [h_s, h_o, z] = w_s . h_s + w_o . h_o + w_z . z: three linear maps, summed by broadcasting. With
        # node_terms="shared" the node terms are one score for every relation (and one for every attribute), and
        # what tells relations apart is grounding and a bias per relation
        shared = node_terms == "shared"
        self.subject_score = nn.Linear(d, 1 if shared else n_relations)
        self.object_score = nn.Linear(d, 1 if shared else n_relations, bias=False)
        self.attribute_score = nn.Linear(d, 1 if shared else n_attributes)  # w_a^T [h_s, z]
        self.relation_bias = nn.Parameter(torch.zeros(n_relations)) if shared else None
        self.attribute_bias = nn.Parameter(torch.zeros(n_attributes)) if shared else None
        if grounding:  # every head has its own Q, K and w_r^z; one head is the paper's
            all_heads = attention_heads * attention_dim
            self.query_subject = nn.Linear(d, all_heads)  # Q [h_s, h_o] = Q_s h_s + Q_o h_o
            self.query_object = nn.Linear(d, all_heads, bias=False)
            self.query_attribute = nn.Embedding(n_attributes, all_heads)  # an attribute's stand-in for Q_o h_o
            self.key = nn.Linear(d, all_heads, bias=False)
            self.grounded_score = nn.Linear(embedding_dim, attention_heads * n_relations, bias=False)
            self.grounded_attribute_score = nn.Linear(embedding_dim, attention_heads * n_attributes, bias=False)
        self.count_score = nn.Linear(d, 1)  # query type: SELECT count ( * ) vs SELECT DISTINCT ?x0
        # how many variables the query has (0 .. n_variables): only ?x0 .. ?x<k-1> are then candidate nodes
        self.variables_score = nn.Linear(d, featurizer.n_variables + 1) if predict_variables else None
        self.register_buffer("allowed", featurizer.allowed.clone(), persistent=False)
        self.register_buffer("allowed_attributes", featurizer.allowed_attributes.clone(), persistent=False)
        self.register_buffer("implied_types", featurizer.implied_types.clone(), persistent=False)
        self.register_buffer("kinds", featurizer.node_kinds(), persistent=False)

    @property
    def backbone(self) -> str:
        """The encoder's size, the grounding heads where there are several, ``-varcount`` where a head predicts
        the number of variables, ``-groupmax`` where a group scores by its best word, ``-sigmoid`` where
        grounding gates each group on its own and ``-sharednodes`` where the node terms are one for all relations
        (so results tables keep them apart from the paper's model)."""
        heads = self.hparams.attention_heads if self.hparams.grounding else 1
        return (f"bilstm{self.hparams.num_layers}x{self.hparams.hidden_size}" + (f"-{heads}heads" if heads > 1 else "")
                + ("-varcount" if self.hparams.get("predict_variables") else "")
                + ("-groupmax" if self.hparams.get("group_scores") == "max" and self.hparams.grounding else "")
                + ("-sigmoid" if self.hparams.get("grounding_attention") == "sigmoid" and self.hparams.grounding
                   else "")
                + ("-sharednodes" if self.hparams.get("node_terms") == "shared" else ""))

    # ----- network ---------------------------------------------------------------------------------------------
    AVERAGED = ("edges", "attributes", "count", "variables")  # the logits that average_with averages

    def average_with(self, others: Sequence["GroundedGraphDecoder"]) -> "GroundedGraphDecoder":
        """Score questions, outside training, with the mean of this model's and ``others``' logits (an ensemble of
        runs, beyond the paper): the weak seeds of MCD1 each fail on some construction that training withholds, and
        not on the same one (README). Each of ``others`` must read a batch as this one does (the same words, tags,
        relations, attributes and variable slots); the candidates follow the averaged number of variables."""
        for other in others:
            for part in ("words", "tags", "relations", "attributes", "n_entities", "n_variables"):
                if getattr(other.featurizer, part) != getattr(self.featurizer, part):
                    raise ValueError(f"ggd: cannot average logits with a model whose featurizer has other {part}: "
                                     "the node and label axes would not line up")
            if (other.variables_score is None) != (self.variables_score is None):
                raise ValueError("ggd: cannot average a model that predicts the number of variables with one that "
                                 "does not (model.params.predict_variables)")
        self.averaged_with = [other.eval() for other in others]  # a list: not submodules, so never saved with it
        return self

    def forward(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Edge logits [B, P, P, R] and attribute logits [B, P, A] over the batch's node axis (``collate``), their
        candidate masks, query-type logits [B], and the node axis's slots (``nodes``, for decoding); outside
        training, with ``average_with``, the logits' mean over the models."""
        out = self.logits(batch)
        others = getattr(self, "averaged_with", [])
        if others and not self.training:
            outs = [out, *(other.to(out["edges"].device).logits(batch) for other in others)]
            out.update({key: torch.stack([o[key] for o in outs]).mean(0) for key in self.AVERAGED if key in out})
        n_variables = None
        if "variables" in out:
            # training conditions the edges on the gold number (teacher forcing), decoding on the predicted one
            target = batch.get("target")
            n_variables = (target["variables"] if self.training and isinstance(target, dict)
                           else out["variables"].argmax(-1))
        out["edge_candidates"], out["attribute_candidates"] = self._candidates(batch, n_variables)
        return out

    def logits(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """``forward``'s logits and node slots, without the candidate masks."""
        words = self.word_embedding(batch["words"])  # [B, T, W, e]: each group's words
        groups = words.sum(dim=2)  # a group's embedding is its words' sum (§3.2)
        dropped = self._dropped_inputs(batch) if self.training and self.hparams.get("input_dropout") else None
        if self.tag_embedding is None:
            inputs = groups if dropped is None else torch.where(
                dropped[..., None], self.word_embedding.weight[self.featurizer.words[UNK]], groups)
        else:
            tags = batch["tags"] if dropped is None else batch["tags"].masked_fill(dropped, self.featurizer.tags[UNK])
            inputs = self.tag_embedding(tags)
        states = self.encoder(inputs, batch["lengths"])
        if len(self.gnn):
            states = self._refine_with_dependencies(states, batch)
        nodes = torch.bmm(batch["incidence"], states)  # [B, P, d]: sums of mention embeddings
        edges = self.subject_score(nodes)[:, :, None, :] + self.object_score(nodes)[:, None, :, :]
        attributes = self.attribute_score(nodes)
        if self.relation_bias is not None:  # node_terms="shared": [B, P, P, 1] and [B, P, 1] gain a score per label
            edges, attributes = edges + self.relation_bias, attributes + self.attribute_bias
        if self.hparams.grounding:
            grounded_edges, grounded_attributes = self._grounding(nodes, states, groups, words, batch)
            edges, attributes = edges + grounded_edges, attributes + grounded_attributes
        question = batch["question_mask"]
        pooled = (states * question[..., None]).sum(1) / question.sum(1, keepdim=True)
        out = {"edges": edges, "attributes": attributes, "count": self.count_score(pooled).squeeze(-1),
               "nodes": batch["nodes"]}
        if self.variables_score is not None:
            out["variables"] = self.variables_score(pooled)
        return out

    def _dropped_inputs(self, batch: dict[str, Any]) -> torch.Tensor:
        """[B, T]: the question positions whose encoder input training replaces by the unknown one, each with
        probability ``input_dropout`` (module docstring)."""
        draw = torch.rand(batch["question_mask"].shape, device=batch["question_mask"].device)
        return batch["question_mask"] & (draw < self.hparams.input_dropout)

    def _grounding(self, nodes, states, groups, words, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """``w_r^z . z_so`` for every (s, o, r) and ``w_a^z . z_sa`` for every (s, a): attention of each node pair
        (node and attribute) over the question's groups and NIL (§3.3); ``nu_k`` is group k's input embedding, the
        sum of its words' embeddings, so ``w_r^z . nu_k`` sums its words' scores. With ``group_scores="max"`` a
        group scores relation r by its best word's ``w_r^z . e_word`` instead (beyond the paper): a sum lets words
        that each lean a little towards r add up to r ("produced , written , edited , and directed by" read as
        "executive produced"), a maximum grounds each relation in one word of the group.

        With ``grounding_attention="sigmoid"`` (beyond the paper) each group's weight is ``sigmoid`` of its logit
        instead of its share of one softmax, so that a pair holding k relations in k groups need not split its
        attention k ways. On MCD1 it learned more slowly and stalled (seed 1: 64.7% dev exact match after 10
        epochs, README); a list of roles is one group anyway, so the split it removes was not what failed."""
        question_mask = batch["question_mask"]
        length = int(question_mask.sum(1).max())  # the question comes first in the sequence
        question_mask, states = question_mask[:, :length], states[:, :length]

        def group_scores(linear: nn.Linear) -> torch.Tensor:  # [B, T, heads * n]
            if self.hparams.get("group_scores", "sum") == "sum":
                return linear(groups[:, :length])
            scores = linear(words[:, :length])  # [B, T, W, heads * n]
            padding = (batch["words"][:, :length] == 0)[..., None]
            best = scores.masked_fill(padding, float("-inf")).amax(dim=2)
            return best.masked_fill(padding.all(dim=2), 0.0)  # positions past the sequence: no word

        def by_head(x: torch.Tensor) -> torch.Tensor:  # [..., heads * n] -> [..., heads, n]
            return x.unflatten(-1, (self.hparams.attention_heads, -1))

        def weigh(logits: torch.Tensor) -> torch.Tensor:  # a masked position's -inf weighs 0 either way
            sigmoid = self.hparams.get("grounding_attention") == "sigmoid"
            return logits.sigmoid() if sigmoid else logits.softmax(dim=-1)

        keys = by_head(self.key(states)) / math.sqrt(self.hparams.attention_dim)  # [B,T,H,a]; temperature sqrt(d)
        from_subject = torch.einsum("bsha,btha->bsht", by_head(self.query_subject(nodes)), keys)
        from_subject = from_subject.masked_fill(~question_mask[:, None, None, :], float("-inf"))
        from_object = torch.einsum("boha,btha->boht", by_head(self.query_object(nodes)), keys)
        from_attribute = torch.einsum("cha,btha->bcht", by_head(self.query_attribute.weight), keys)
        edge_attention = weigh(from_subject[:, :, None] + from_object[:, None])  # [B, S, O, H, T]
        attribute_attention = weigh(from_subject[:, :, None] + from_attribute[:, None])  # [B, S, A, H, T]
        edges = torch.einsum("bsoht,bthr->bsor", edge_attention, by_head(group_scores(self.grounded_score)))
        attributes = torch.einsum("bscht,bthc->bsc", attribute_attention,
                                  by_head(group_scores(self.grounded_attribute_score)))
        return edges, attributes

    def _refine_with_dependencies(self, states: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        """Residual relational-GCN layers over the dependency parse of each question's groups."""
        graphs = batch["dependencies"]
        counts = torch.bincount(graphs.batch, minlength=states.shape[0])
        positions = torch.cat([torch.arange(int(n), device=states.device) for n in counts])
        flat = states[graphs.batch, positions]
        for layer in self.gnn:
            flat = flat + self.dropout(F.relu(layer(flat, graphs.edge_index, graphs.edge_type)))
        refined = states.clone()
        refined[graphs.batch, positions] = flat
        return refined

    def _candidates(self, batch: dict[str, Any], n_variables: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What may exist: edges between present nodes (variables, the first ``n_variables`` [B] of them where
        given, and the entities the question mentions) with a (subject kind, relation, object kind) seen in
        training, and attributes of present nodes seen on their kind. Self-loops stay: 8 MCD1 training queries have
        one ("Were M1 and M2 influenced by M1")."""
        present, kinds = batch["node_mask"], self.kinds[batch["nodes"]]  # [B, P]
        if n_variables is not None:
            variable = batch["nodes"] - self.featurizer.n_entities  # a variable slot's number, ?x<i>
            present = present & ((variable < 0) | (variable < n_variables[:, None]))
        pairs = present[:, :, None] & present[:, None, :]
        allowed = self.allowed[:, kinds[:, :, None], kinds[:, None, :]].permute(1, 2, 3, 0)  # [B, P, P, R]
        return pairs[..., None] & allowed, present[..., None] & self.allowed_attributes[kinds]

    # ----- training and decoding -------------------------------------------------------------------------------
    def loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. 2 (every candidate triple a Bernoulli event, summed per question, averaged over the batch) plus the
        query type and, with ``predict_variables``, the number of variables; and the number of gold triples outside
        the candidates, which can never be decoded."""
        if isinstance(batch["target"], str):  # the featurizer's reason this batch has no target graph
            raise FeaturizationError(batch["target"])
        out, target = self(batch), batch["target"]
        loss = sum(F.binary_cross_entropy_with_logits(out[key], target[key], weight=out[mask].to(out[key].dtype),
                                                      reduction="sum")
                   for key, mask in (("edges", "edge_candidates"), ("attributes", "attribute_candidates")))
        loss = loss + F.binary_cross_entropy_with_logits(out["count"], target["count"], reduction="sum")
        if "variables" in out:
            loss = loss + F.cross_entropy(out["variables"], target["variables"], reduction="sum")
        uncoverable = (target["absent"].sum() + (target["edges"] * ~out["edge_candidates"]).sum()
                       + (target["attributes"] * ~out["attribute_candidates"]).sum())
        return loss / len(target["count"]), uncoverable

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss, uncoverable = self.loss(batch)
        self.log_dict({"train/loss": loss, "train/uncoverable_edges": uncoverable}, prog_bar=True,
                      batch_size=len(batch["lengths"]))
        return loss

    @torch.no_grad()
    def parse(self, batch: dict[str, Any]) -> list[str]:
        return self.decode(self(batch), *self.thresholds)

    @property
    def thresholds(self) -> tuple[float, float]:
        """The decision thresholds of edges and of attributes (``attribute_threshold``; None: the edges')."""
        attribute = self.hparams.get("attribute_threshold")  # (absent from older checkpoints)
        return self.hparams.threshold, self.hparams.threshold if attribute is None else attribute

    @staticmethod
    def probabilities(out: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward``'s edge and attribute probabilities, 0 outside the candidates (no threshold passes them)."""
        return (torch.sigmoid(out["edges"]).masked_fill(~out["edge_candidates"], 0.0),
                torch.sigmoid(out["attributes"]).masked_fill(~out["attribute_candidates"], 0.0))

    def decode(self, out: dict[str, torch.Tensor], threshold: float,
               attribute_threshold: float | None = None) -> list[str]:
        """The queries of ``forward``'s scores: every candidate triple above ``threshold`` and attribute above
        ``attribute_threshold`` (None: ``threshold``), less the types the chosen triples imply
        (``GGDFeaturizer.implied_types``), which CFQ leaves out."""
        return [program for program, _ in self.decode_graphs(out, threshold, attribute_threshold, graphs=False)]

    @torch.no_grad()
    def explain(self, batch: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
        """The programs of ``parse`` and each one's query graph (``decode_graphs``), for ``python -m zoo.parse``;
        not saved in predictions.jsonl, where it would add every test question's edges."""
        decoded = self.decode_graphs(self(batch), *self.thresholds)
        return [program for program, _ in decoded], [{"query_graph": graph} for _, graph in decoded]

    def decode_graphs(self, out: dict[str, torch.Tensor], threshold: float, attribute_threshold: float | None = None,
                      graphs: bool = True) -> list[tuple[str, dict[str, Any] | None]]:
        """``decode``'s queries, each with (``graphs``) the graph it was decoded from: the query type (``count``),
        the chosen ``edges`` as [subject, relation, object, probability] and ``attributes`` as [node, relation,
        constant, probability]. The FILTERs derived from edges (``filter_relations``) are in the query only."""
        attribute_threshold = threshold if attribute_threshold is None else attribute_threshold
        edges, attributes = self.probabilities(out)
        subject_of = (edges > threshold).any(dim=2).float()  # [B, S, R]
        attributes = attributes.masked_fill((subject_of @ self.implied_types.float()) > 0, 0.0)
        # one copy to the CPU for the whole batch: on a GPU each question's reads would each wait for the device
        edges, attributes, counts = edges.cpu(), attributes.cpu(), (out["count"] > 0).tolist()
        sparql = get_formalism("cfq_sparql")
        decoded = []
        for b, slot in enumerate(out["nodes"].tolist()):  # slot[i]: the node slot at place i of the node axis
            chosen_edges = [(s, r, o) for s, o, r in (edges[b] > threshold).nonzero().tolist()]
            chosen_attributes = (attributes[b] > attribute_threshold).nonzero().tolist()
            if not chosen_edges and not chosen_attributes:  # a query needs a conjunct: keep the most probable
                if edges[b].max() >= attributes[b].max():
                    s, o, r = np.unravel_index(int(edges[b].argmax()), edges[b].shape)
                    chosen_edges = [(int(s), int(r), int(o))]
                else:
                    chosen_attributes = [list(map(int, np.unravel_index(int(attributes[b].argmax()),
                                                                         attributes[b].shape)))]
            graph = None if not graphs else self._graph(
                [(slot[s], r, slot[o], float(edges[b, s, o, r])) for s, r, o in chosen_edges],
                [(slot[s], a, float(attributes[b, s, a])) for s, a in chosen_attributes], counts[b])
            chosen_edges = [(slot[s], r, slot[o]) for s, r, o in chosen_edges]
            chosen_attributes = [(slot[s], a) for s, a in chosen_attributes]
            query = self.featurizer.query(chosen_edges, chosen_attributes, count=counts[b])
            try:
                decoded.append((sparql.unparse(query), graph))
            except FormalismError as e:  # never expected; still a wrong prediction rather than a crash
                decoded.append((f"<unprintable: {e}>", graph))
        return decoded

    def _graph(self, edges: list[tuple[int, int, int, float]], attributes: list[tuple[int, int, float]],
               count: bool) -> dict[str, Any]:
        """A decoded graph over node slots, named: see ``decode_graphs``."""
        names, relations = self.featurizer.node_names(), {i: r for r, i in self.featurizer.relations.items()}
        return {"count": count,
                "edges": [[names[s], relations[r], names[o], round(p, 4)] for s, r, o, p in edges],
                "attributes": [[names[s], *self.featurizer.attributes[a], round(p, 4)] for s, a, p in attributes]}

    THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 11))  # 0.05 .. 0.5
    SELECTION_METRICS = ("exact_match", "exact_match_tuned", "emr")

    @torch.no_grad()
    def exact_by_thresholds(self, out: dict[str, torch.Tensor], target: dict[str, torch.Tensor]) -> torch.Tensor:
        """[T, T]: how many of the batch's questions ``decode`` gets exactly right at each (edge threshold,
        attribute threshold) of ``THRESHOLDS``, without decoding. A question is right when its query type is and
        the thresholds lie between its highest wrong and its lowest gold probability, for edges and for attributes
        (whose implied types, ``decode``, are those of the gold edges there), or, for a one-conjunct gold query,
        when nothing passes and the fallback keeps its conjunct. Questions without a target graph count wrong."""
        edges, attributes = self.probabilities(out)
        gold_edges, gold_attributes = target["edges"] > 0, target["attributes"] > 0
        implied = (gold_edges.any(dim=2).float() @ self.implied_types.float()) > 0  # [B, S, A]
        kept_attributes = attributes.masked_fill(implied, 0.0)

        def window(p: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """Per question, [highest non-gold, lowest gold) probability: the thresholds that keep exactly gold."""
            dims = tuple(range(1, p.dim()))
            return p.masked_fill(gold, 0.0).amax(dims), p.masked_fill(~gold, 2.0).amin(dims)

        t = torch.tensor(self.THRESHOLDS, device=edges.device)[None, :]
        (edge_low, edge_high), (attribute_low, attribute_high) = (window(edges, gold_edges),
                                                                 window(kept_attributes, gold_attributes))
        right = (((edge_low[:, None] <= t) & (t < edge_high[:, None]))[:, :, None]
                 & ((attribute_low[:, None] <= t) & (t < attribute_high[:, None]))[:, None, :])
        # nothing passes: decode keeps the most probable triple or attribute (ties: the triple)
        top_edge, top_attribute = edges.flatten(1).amax(1), attributes.flatten(1).amax(1)
        gold_on_top = torch.where(top_edge >= top_attribute,
                                  (edges * gold_edges).flatten(1).amax(1) == top_edge,
                                  (attributes * gold_attributes).flatten(1).amax(1) == top_attribute)
        one_conjunct = gold_edges.flatten(1).sum(1) + gold_attributes.flatten(1).sum(1) == 1
        fallback = ((one_conjunct & gold_on_top)[:, None, None] & (t >= top_edge[:, None])[:, :, None]
                    & (t >= top_attribute[:, None])[:, None, :])
        possible = (target["absent"] == 0) & ((out["count"] > 0) == (target["count"] > 0))
        return ((right | fallback) & possible[:, None, None]).sum(0)

    def best_thresholds(self, tally: torch.Tensor) -> tuple[float, float, int]:
        """The (edge, attribute) threshold pair with the most exact questions in ``tally`` (ties: the higher
        edge threshold, then the higher attribute threshold), and that count."""
        flat = tally.flatten().tolist()
        index = max(range(len(flat)), key=lambda i: (flat[i], i))  # row-major: later is higher
        n = len(self.THRESHOLDS)
        return self.THRESHOLDS[index // n], self.THRESHOLDS[index % n], flat[index]

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """The scores at the current thresholds (``val/exact_match``, ``val/emr``), and the exact match at the best
        threshold pair of this epoch (``val/exact_match_tuned``, ``exact_by_thresholds``)."""
        out = self(batch)
        self._score(batch, self.decode(out, *self.thresholds), self.val_metrics)
        if not isinstance(batch["target"], str):
            self._threshold_tally = self._threshold_tally.to(self.device) + self.exact_by_thresholds(out,
                                                                                                     batch["target"])
        self._tallied += len(batch["examples"])

    def on_validation_epoch_end(self) -> None:
        tally = self.trainer.strategy.reduce(self._threshold_tally.float(), reduce_op="sum")
        seen = self.trainer.strategy.reduce(torch.tensor(float(self._tallied), device=self.device), reduce_op="sum")
        self._threshold_tally, self._tallied = torch.zeros_like(self._threshold_tally), 0
        if seen > 0:
            self.log("val/exact_match_tuned", self.best_thresholds(tally)[2] / float(seen), prog_bar=True)

    @torch.no_grad()
    def on_test_start(self) -> None:
        """With ``tune_threshold``, decode the test set with the thresholds among ``THRESHOLDS`` that give the
        best dev score of ``selection_metric`` (ties: the higher), the checkpoint being the one selected on dev
        too: for exact match, an edge and an attribute threshold together (``exact_by_thresholds``); for ``emr``,
        one threshold for both, by decoding dev at each. Every triple is an independent Bernoulli event, and a query
        is exact only when all of its many triples are right, so the thresholds that maximise query exact match are
        not 0.5: missed triples cost more than extra ones."""
        datamodule = getattr(self.trainer, "datamodule", None)
        if not self.hparams.tune_threshold or datamodule is None or not datamodule.val:
            return
        n = len(self.THRESHOLDS)
        tally = torch.zeros(n, n, dtype=torch.long)
        for batch in datamodule.val_dataloader():
            batch = datamodule.transfer_batch_to_device(batch, self.device, 0)
            out = self(batch)
            if self.primary_metric == "emr":
                for i, threshold in enumerate(self.THRESHOLDS):
                    scores = self.scorer.score_batch(self.decode(out, threshold), batch["examples"])
                    tally[i, i] += sum(score.emr for score in scores)
            elif not isinstance(batch["target"], str):
                tally += self.exact_by_thresholds(out, batch["target"]).cpu()
        # under DDP each process tallied its shard of dev (EvaluationShardSampler): the counts of all of dev, the
        # same on every rank, choose the same thresholds everywhere
        if distributed():
            tally = tally.to(self.device)  # (NCCL reduces on the GPU)
            dist.all_reduce(tally)
            tally = tally.cpu()
        edge, attribute, right = self.best_thresholds(tally)
        self.hparams.threshold, self.hparams.attribute_threshold = edge, attribute
        self.dev_score_at_thresholds = right / len(datamodule.val)  # (benchmarks/ensemble.py records it)
        log.info("decision thresholds %.2f (edges), %.2f (attributes), chosen on dev: %s %.4f", edge, attribute,
                 "emr" if self.primary_metric == "emr" else "exact match", self.dev_score_at_thresholds)

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        edge, attribute = self.thresholds  # the results row records what decoded the test
        self.log_dict({"test/threshold": float(edge), "test/attribute_threshold": float(attribute)})

    def configure_optimizers(self):
        """AdamW; with ``warmup_epochs`` the reference schedule: linear warm-up, then cosine decay to zero."""
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        if not self.hparams.warmup_epochs:
            return optimizer
        total = self.trainer.estimated_stepping_batches
        warmup = max(1, int(total * self.hparams.warmup_epochs / max(1, self.trainer.max_epochs)))

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
