"""Grounded Graph Decoding (Gai et al. 2021, "Grounded Graph Decoding Improves Compositional Generalization in
Question Answering") for CFQ.

A CFQ query is a conjunctive query graph (§3.1): its nodes are the anonymised entities of the question (``M0``..),
constants (types such as ``people.person``, Freebase ids such as ``m_05zppz`` for "male") and variables
(``?x0``..); its edges are the relations of the triples. The model

1. encodes ``g_1 .. g_k NIL [SEP] c_1 .. c_C [SEP] x_0 .. x_V`` with a bidirectional LSTM, where ``g_i`` are the
   question's *groups*: single words, or ``A and B`` phrases whose words share a part of speech merged into one
   token whose embedding is the sum of its words' (§3.2, ``models/syntax.py``; CFQ writes coordinations of three
   or more as ``A , B , and C``, grouped too unless ``comma_lists=False``); ``NIL`` is the token grounding
   attends to when no edge holds (§3.3); ``c_j`` are the constants and ``x_i`` the variable slots (§3.1: "we
   concatenate the question with the list of variables"). Constants are appended like variables, as the reference
   implementation did: the whole training inventory (28 constants on CFQ MCD1), so every query of the split can be
   written and each constant's embedding is contextualised by the question;
2. embeds each node as the contextual embedding of its token (an entity mentioned several times sums its
   mentions; an entity inside a group gets the group's embedding, §3.2);
3. scores every candidate edge s -r-> o independently, ``sigmoid(w_r^T [h_s, h_o, z_so])`` (Eq. 1 and §3.3), where
   the grounded embedding ``z_so = sum_k softmax_k(q_so^T K h_k / sqrt(d)) nu_k`` attends over the question's
   groups and NIL with ``q_so = Q [h_s, h_o]`` and ``nu_k`` the group's input embedding; without grounding (the
   "syntax-aware" and "graph decoding only" ablations of Table 3) the score is ``sigmoid(w_r^T [h_s, h_o])``;
4. trains on the binary cross-entropy of Eq. 2 over all candidate triples, plus the query type (``SELECT
   DISTINCT ?x0`` or ``SELECT count ( * )``), and decodes every triple with probability above 0.5. FILTER
   inequalities are edges of the reserved relation ``!=`` (``zoo.formalisms.sparql``).

The scoring is vectorised over all (s, r, o) of a batch: ``w_r^T [h_s, h_o, z_so]`` splits into a subject term, an
object term and a grounding term, and the grounding term is ``sum_k alpha_so^k (w_r^z . nu_k)``, so no tensor of
size pairs x embedding is ever formed.

Beyond the paper (§4.6 names richer syntax as future work): with ``gnn_layers > 0`` the encoder's question states
are refined by a relational GCN (``torch_geometric`` ``RGCNConv``) over the spaCy dependency parse lifted to groups.

Departures, each a parameter: ``node_identity`` adds a learned embedding per node slot (M0, M1, ...), since two
entities in one group ("M4 and M5") otherwise share one embedding and the direction of a FILTER between them is
undecidable; candidate triples are restricted to the (subject kind, relation, object kind) combinations seen in
training (question entity / Freebase id / type / variable), which removes triples the SPARQL grammar forbids, such
as a type constant as a subject, so every decoded query is one the formalism reads.
"""
from __future__ import annotations

import math
import re
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Batch, Data

from zoo.formalisms import FormalismError, get_formalism
from zoo.formalisms.sparql import NODE_TYPE, FILTER_RELATION, Filter, SparqlQuery, Triple, term_kind
from zoo.parser import Featurizer, Parser
from zoo.registry import register_model
from zoo.types import Example

PAD, UNK, NIL, SEP = "<pad>", "<unk>", "<nil>", "<sep>"
ENTITY = re.compile(r"M(\d+)")
VARIABLE = re.compile(r"\?x(\d+)")
# Node kinds for the candidate mask; constants split as the SPARQL formalism's grammar does (a type is only ever the
# object of "a"; a Freebase id such as m_05zppz is an object of other relations).
KIND_ENTITY, KIND_ID, KIND_TYPE, KIND_VARIABLE = 0, 1, 2, 3
N_KINDS = 4


class FeaturizationError(ValueError):
    """An example the featurizer cannot encode (empty question, an entity index beyond those seen in training)."""


def _terms(query: SparqlQuery):
    for conjunct in query.conjuncts:
        if isinstance(conjunct, Triple):
            yield conjunct.subject
            yield conjunct.object
        else:
            yield conjunct.left
            yield conjunct.right


def _example_name(example: Example) -> str:
    return f"example {example.meta.get('index', '?')} ({example.utterance[:60]!r})"


class GGDFeaturizer(Featurizer):
    """Questions to group sequences and node incidences; queries to target graphs (``torch_geometric`` ``Data``).

    Node slots are fixed per fitted featurizer: entities ``M0..M{E-1}``, then the constants, then ``?x0..?x{V-1}``
    (E, the constants and V from the training split).
    """

    def __init__(self, grouping: bool = True, dependencies: bool = False, tagger: str | None = None,
                 entity_slots: int | None = None, comma_lists: bool = True, compound_items: bool = False):
        self.grouping = grouping
        self.comma_lists = comma_lists  # group "A , B , and C" too, not only "A and B" (models/syntax.py)
        self.compound_items = compound_items  # list items may be noun compounds ("art director")
        self.entity_slots = entity_slots  # None: as many as the training split mentions
        self.dependencies = dependencies
        self.tagger = tagger
        self.words: dict[str, int] = {}
        self.constants: list[str] = []
        self.relations: dict[str, int] = {}
        self.dependency_labels: dict[str, int] = {}
        self.n_entities = self.n_variables = 0
        self.allowed = torch.zeros(0)  # [R, kinds, kinds]: relation r seen from a subject kind to an object kind
        self._syntax: dict[str, Any] = {}  # utterance -> Analysis; filled by prepare, never saved
        self._encoded: dict[tuple[str, str], dict[str, Any]] = {}  # (utterance, program) -> encode's output

    # ----- layout ----------------------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return self.n_entities + len(self.constants) + self.n_variables

    def node_names(self) -> list[str]:
        return ([f"M{i}" for i in range(self.n_entities)] + self.constants
                + [f"?x{i}" for i in range(self.n_variables)])

    def subject_slots(self) -> torch.Tensor:
        """The node slots whose kind is the subject of some relation in training (entities and variables on CFQ;
        a constant is only ever an object): scoring rows are these slots only."""
        can_be_subject = self.allowed.any(dim=(0, 2))
        return torch.nonzero(can_be_subject[self.node_kinds()]).flatten()

    def node_kinds(self) -> torch.Tensor:
        constants = [KIND_TYPE if term_kind(c) == NODE_TYPE else KIND_ID for c in self.constants]
        return torch.tensor([KIND_ENTITY] * self.n_entities + constants + [KIND_VARIABLE] * self.n_variables)

    # ----- fitting ---------------------------------------------------------------------------------------------
    def fit(self, examples: Sequence[Example]) -> "GGDFeaturizer":
        sparql = get_formalism("cfq_sparql")
        queries = [sparql.parse(e.program) for e in examples]
        words = sorted({w for e in examples for w in e.utterance.split()})
        constants, entities, variables = set(), {0}, {0}
        for query in queries:
            for term in _terms(query):
                if (match := ENTITY.fullmatch(term)):
                    entities.add(int(match.group(1)))
                elif (match := VARIABLE.fullmatch(term)):
                    variables.add(int(match.group(1)))
                else:
                    constants.add(term)
        for e in examples:
            entities.update(int(m.group(1)) for w in e.utterance.split() if (m := ENTITY.fullmatch(w)))
        self.constants = sorted(constants)
        self.n_entities, self.n_variables = max(max(entities) + 1, self.entity_slots or 0), max(variables) + 1
        specials = [PAD, UNK, NIL, SEP] + [f"<c:{c}>" for c in self.constants] + [
            f"<x{i}>" for i in range(self.n_variables)]
        self.words = {w: i for i, w in enumerate(specials + words)}
        self.relations = sparql.build_relation_vocab(queries)
        if self.dependencies:
            self.prepare(examples)
            labels = {label for e in examples for label in self._dependency_edges(e, self._groups(e))[1]}
            self.dependency_labels = {label: i for i, label in enumerate(["<unk>", *sorted(labels)])}
        slot = {name: i for i, name in enumerate(self.node_names())}
        kinds = self.node_kinds()
        self.allowed = torch.zeros(len(self.relations), N_KINDS, N_KINDS, dtype=torch.bool)
        for query in queries:
            for s, r, o in self._triples(query, slot):
                self.allowed[r, kinds[s], kinds[o]] = True
        return self

    def prepare(self, examples: Sequence[Example]) -> None:
        """Tag every question once, in bulk (spaCy; cached on disk by ``models.syntax.SyntaxCache``)."""
        if not (self.grouping or self.dependencies):
            return
        from models.syntax import SyntaxCache

        missing = sorted({e.utterance for e in examples} - set(self._syntax))
        if missing:
            self._syntax.update(zip(missing, SyntaxCache(self.tagger).analyse_many(missing)))

    # ----- encoding --------------------------------------------------------------------------------------------
    def _triples(self, query: SparqlQuery, slot: dict[str, int]):
        for conjunct in query.conjuncts:
            if isinstance(conjunct, Triple):
                yield slot[conjunct.subject], self.relations[conjunct.relation], slot[conjunct.object]
            else:
                yield slot[conjunct.left], self.relations[FILTER_RELATION], slot[conjunct.right]

    def _analysis(self, example: Example):
        """The question's spaCy analysis; tagged now if ``prepare`` did not see it."""
        if example.utterance not in self._syntax:
            self.prepare([example])
        return self._syntax[example.utterance]

    def _groups(self, example: Example) -> list[tuple[int, ...]]:
        if not self.grouping:
            return [(i,) for i in range(len(example.utterance.split()))]
        from models.syntax import conjunction_groups

        return conjunction_groups(self._analysis(example), comma_lists=self.comma_lists,
                                  compound_items=self.compound_items)

    def encode(self, example: Example) -> dict[str, Any]:
        """Memoised: CFQ training revisits 95k questions every epoch, and encoding costs a sixth of a step."""
        key = (example.utterance, example.program)
        if key not in self._encoded:
            self._encoded[key] = self._encode(example)
        return self._encoded[key]

    def _encode(self, example: Example) -> dict[str, Any]:
        tokens = example.utterance.split()
        if not tokens:
            raise FeaturizationError(f"{_example_name(example)}: empty question")
        groups = self._groups(example)
        unk = self.words[UNK]
        sequence = [[self.words.get(tokens[i], unk) for i in group] for group in groups]
        n_question = len(sequence) + 1  # the groups and NIL: what grounding attends over
        sequence += [[self.words[NIL]], [self.words[SEP]]]
        constant_start = len(sequence)
        sequence += [[self.words[f"<c:{c}>"]] for c in self.constants] + [[self.words[SEP]]]
        variable_start = len(sequence)
        sequence += [[self.words[f"<x{i}>"]] for i in range(self.n_variables)]
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
        mentions += [(self.n_entities + j, constant_start + j) for j in range(len(self.constants))]
        mentions += [(self.n_entities + len(self.constants) + i, variable_start + i) for i in range(self.n_variables)]
        try:
            target = self.target_graph(example)
        except FeaturizationError as e:  # a constant unseen in training: fine to evaluate on, not to train on
            target = str(e)
        item = {"sequence": sequence, "n_question": n_question, "mentions": mentions, "target": target}
        if self.dependencies:
            item["dependencies"] = self._dependency_graph(example, groups)
        return item

    def target_graph(self, example: Example) -> Data:
        """The gold query as a graph over this featurizer's node slots (``edge_type`` indexes ``relations``)."""
        sparql = get_formalism("cfq_sparql")
        query = sparql.parse(example.program)
        slot = {name: i for i, name in enumerate(self.node_names())}
        try:
            triples = sorted(set(self._triples(query, slot)))
        except KeyError as e:
            raise FeaturizationError(f"{_example_name(example)}: {e.args[0]!r} is not a node or relation seen in "
                                     "training, so this query cannot be a target") from None
        edges = torch.tensor([[s for s, _, _ in triples], [o for _, _, o in triples]], dtype=torch.long).view(2, -1)
        return Data(edge_index=edges, edge_type=torch.tensor([r for _, r, _ in triples], dtype=torch.long),
                    num_nodes=self.n_nodes, count=torch.tensor([query.query_type == "count"]))

    def query(self, triples: Sequence[tuple[int, int, int]], count: bool) -> SparqlQuery:
        """The query of a graph over the node slots: (subject slot, relation id, object slot) triples."""
        names = self.node_names()
        relations = {i: r for r, i in self.relations.items()}
        conjuncts = tuple(Filter(names[s], names[o]) if relations[r] == FILTER_RELATION
                          else Triple(names[s], relations[r], names[o]) for s, r, o in triples)
        return SparqlQuery("count" if count else "select", None if count else "?x0", conjuncts)

    def _dependency_edges(self, example: Example, groups: list[tuple[int, ...]]):
        from models.syntax import dependency_edges, lift_edges_to_groups

        return lift_edges_to_groups(*dependency_edges(self._analysis(example)), groups)

    def _dependency_graph(self, example: Example, groups: list[tuple[int, ...]]) -> Data:
        edges, labels = self._dependency_edges(example, groups)
        label_ids = [self.dependency_labels.get(label, 0) for label in labels]  # 0: a label unseen in training
        return Data(edge_index=torch.tensor(edges, dtype=torch.long).view(-1, 2).t(),
                    edge_type=torch.tensor(label_ids, dtype=torch.long), num_nodes=len(groups))

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        batch_size = len(items)
        length = max(len(item["sequence"]) for item in items)
        width = max(len(group) for item in items for group in item["sequence"])
        # Fill the tensors with one indexed assignment each: a Python loop over elements costs more than the model.
        word_index = [(b, t, w, word) for b, item in enumerate(items) for t, group in enumerate(item["sequence"])
                      for w, word in enumerate(group)]
        words = torch.zeros(batch_size, length, width, dtype=torch.long)
        b, t, w, word = torch.tensor(word_index).unbind(1)
        words[b, t, w] = word
        mention_index = torch.tensor([(b, node, position) for b, item in enumerate(items)
                                      for node, position in item["mentions"]])
        incidence = torch.zeros(batch_size, self.n_nodes, length)
        incidence.index_put_(tuple(mention_index.unbind(1)), torch.ones(len(mention_index)), accumulate=True)
        lengths = torch.tensor([len(item["sequence"]) for item in items])
        n_question = torch.tensor([item["n_question"] for item in items])
        targets = [item["target"] for item in items]
        untrainable = [t for t in targets if isinstance(t, str)]
        batch = {"words": words, "lengths": lengths, "incidence": incidence,
                 "question_mask": torch.arange(length)[None, :] < n_question[:, None],
                 "target": untrainable[0] if untrainable else Batch.from_data_list(targets)}
        if self.dependencies:
            batch["dependencies"] = Batch.from_data_list([item["dependencies"] for item in items])
        return batch

    # ----- checkpoint state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"grouping": self.grouping, "dependencies": self.dependencies, "tagger": self.tagger,
                "entity_slots": self.entity_slots, "comma_lists": self.comma_lists,
                "compound_items": self.compound_items,
                "words": self.words, "constants": self.constants, "relations": self.relations,
                "dependency_labels": self.dependency_labels, "n_entities": self.n_entities,
                "n_variables": self.n_variables, "allowed": self.allowed.tolist()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "GGDFeaturizer":
        featurizer = cls(state["grouping"], state["dependencies"], state["tagger"], state["entity_slots"],
                         state["comma_lists"], state["compound_items"])
        for key in ("words", "constants", "relations", "dependency_labels", "n_entities", "n_variables"):
            setattr(featurizer, key, state[key])
        featurizer.allowed = torch.tensor(state["allowed"], dtype=torch.bool)
        return featurizer


class BiLSTM(nn.Module):
    """A bidirectional LSTM over right-padded sequences, as two unidirectional LSTMs: one reads each sequence
    forwards, the other reads it reversed within its own length. Padding then only ever follows the real tokens
    in either direction, so no packing is needed (packed sequences are several times slower on CPU)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int, dropout: float):
        super().__init__()
        between = dropout if num_layers > 1 else 0.0
        self.forwards = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, dropout=between)
        self.backwards = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, dropout=between)

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[B, T, input_size] and [B] lengths -> [B, T, 2 * hidden_size] (zeros past each length)."""
        positions = torch.arange(inputs.shape[1], device=inputs.device)[None, :]
        lengths = lengths.to(inputs.device)[:, None]
        valid = positions < lengths
        reverse = torch.where(valid, lengths - 1 - positions, positions)  # an involution: reverses, then restores
        gather = reverse[..., None]
        backwards, _ = self.backwards(inputs.gather(1, gather.expand(-1, -1, inputs.shape[2])))
        backwards = backwards.gather(1, gather.expand(-1, -1, backwards.shape[2]))
        forwards, _ = self.forwards(inputs)
        return torch.cat([forwards, backwards], dim=-1) * valid[..., None]


@register_model("ggd")
class GroundedGraphDecoder(Parser):
    """Grounded Graph Decoding (module docstring); ``grounding=False`` gives the paper's ablations."""

    featurizer_class = GGDFeaturizer
    supported_formalisms = ("cfq_sparql",)

    def __init__(self, featurizer: GGDFeaturizer, formalism: str, embedding_dim: int = 64, hidden_size: int = 128,
                 num_layers: int = 1, dropout: float = 0.5, grounding: bool = True, attention_dim: int = 64,
                 node_identity: bool = True, gnn_layers: int = 0, threshold: float = 0.5, lr: float = 5e-3, weight_decay: float = 0.0):
        super().__init__(featurizer, formalism)
        self.save_hyperparameters(ignore=["featurizer"])
        n_relations = len(featurizer.relations)
        self.embedding = nn.Embedding(len(featurizer.words), embedding_dim, padding_idx=0)
        self.encoder = BiLSTM(embedding_dim, hidden_size, num_layers, dropout)
        d = 2 * hidden_size
        self.dropout = nn.Dropout(dropout)
        self.node_identity = nn.Embedding(featurizer.n_nodes, d) if node_identity else None
        self.gnn = nn.ModuleList()
        if gnn_layers:
            from torch_geometric.nn import RGCNConv

            labels = max(1, len(featurizer.dependency_labels))
            self.gnn = nn.ModuleList(RGCNConv(d, d, labels) for _ in range(gnn_layers))
        self.subject_score = nn.Linear(d, n_relations)  # w_r^T [h_s, h_o, z] = w_s.h_s + w_o.h_o + w_z.z
        self.object_score = nn.Linear(d, n_relations, bias=False)
        if grounding:
            self.query_subject = nn.Linear(d, attention_dim, bias=False)  # Q [h_s, h_o] = Q_s h_s + Q_o h_o
            self.query_object = nn.Linear(d, attention_dim, bias=False)
            self.key = nn.Linear(d, attention_dim, bias=False)
            self.grounded_score = nn.Linear(embedding_dim, n_relations, bias=False)
        self.count_score = nn.Linear(d, 1)  # query type: SELECT count ( * ) vs SELECT DISTINCT ?x0
        self.register_buffer("allowed", featurizer.allowed.clone(), persistent=False)
        self.register_buffer("kinds", featurizer.node_kinds(), persistent=False)
        self.register_buffer("subjects", featurizer.subject_slots(), persistent=False)
        row_of_slot = torch.full((featurizer.n_nodes,), -1)
        row_of_slot[self.subjects] = torch.arange(len(self.subjects))
        self.register_buffer("row_of_slot", row_of_slot, persistent=False)

    @property
    def backbone(self) -> str:
        return f"bilstm{self.hparams.num_layers}x{self.hparams.hidden_size}"

    # ----- network ---------------------------------------------------------------------------------------------
    def forward(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Edge logits [B, S, N, R] (S: the subject slots), the candidate mask [B, S, N, R] and query-type
        logits [B]."""
        inputs = self.embedding(batch["words"]).sum(dim=2)  # a group's embedding is the sum of its words' (§3.2)
        states = self.dropout(self.encoder(self.dropout(inputs), batch["lengths"]))
        if len(self.gnn):
            states = self._refine_with_dependencies(states, batch)
        nodes = torch.bmm(batch["incidence"], states)  # [B, N, d]: sums of mention embeddings
        if self.node_identity is not None:
            nodes = nodes + self.node_identity.weight[None]
        subjects = nodes[:, self.subjects]
        logits = self.subject_score(subjects)[:, :, None, :] + self.object_score(nodes)[:, None, :, :]
        if self.hparams.grounding:
            logits = logits + self._grounding(subjects, nodes, states, inputs, batch["question_mask"])
        question = batch["question_mask"]
        pooled = (states * question[..., None]).sum(1) / question.sum(1, keepdim=True)
        return logits, self._candidates(batch), self.count_score(pooled).squeeze(-1)

    def _grounding(self, subjects, nodes, states, inputs, question_mask) -> torch.Tensor:
        """``w_r^z . z_so`` for every (s, o, r): attention of each node pair over the question's groups (§3.3)."""
        length = int(question_mask.sum(1).max())  # the question comes first in the sequence
        question_mask, states, inputs = question_mask[:, :length], states[:, :length], inputs[:, :length]
        keys = self.key(states) / math.sqrt(self.hparams.attention_dim)  # [B, T, a]; temperature sqrt(d)
        from_subject = torch.einsum("bsa,bta->bst", self.query_subject(subjects), keys)
        from_object = torch.einsum("boa,bta->bot", self.query_object(nodes), keys)
        from_subject = from_subject.masked_fill(~question_mask[:, None, :], float("-inf"))
        attention = (from_subject[:, :, None, :] + from_object[:, None, :, :]).softmax(dim=-1)  # [B, S, N, T]
        values = self.grounded_score(inputs)  # [B, T, R]: w_r^z . nu_k, nu_k the group's input embedding
        return torch.einsum("bsot,btr->bsor", attention, values)

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

    def _candidates(self, batch: dict[str, Any]) -> torch.Tensor:
        """Triples that may exist: both nodes present (an entity the question mentions) and a (subject kind,
        relation, object kind) combination seen in training. Self-loops stay: 8 MCD1 training queries have one
        ("Were M1 and M2 influenced by M1": M1 influenced_by M1)."""
        present = batch["incidence"].sum(-1) > 0  # [B, N]
        pairs = present[:, self.subjects, None] & present[:, None, :]
        allowed = self.allowed[:, self.kinds[self.subjects, None], self.kinds[None, :]].permute(1, 2, 0)  # [S, N, R]
        return pairs[..., None] & allowed[None]

    def _targets(self, batch: dict[str, Any], like: torch.Tensor) -> torch.Tensor:
        target = batch["target"]
        dense = torch.zeros_like(like)
        n = self.featurizer.n_nodes
        graph = target.batch[target.edge_index[0]]
        rows = self.row_of_slot[target.edge_index[0] - graph * n]
        if (rows < 0).any():
            raise FeaturizationError("a gold triple has a subject kind never seen as a subject in training")
        dense[graph, rows, target.edge_index[1] - graph * n, target.edge_type] = 1.0
        return dense

    # ----- training and decoding -------------------------------------------------------------------------------
    def loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. 2 (every candidate triple a Bernoulli event, summed per question, averaged over the batch) plus the
        query type; and the number of gold triples outside the candidates, which can never be decoded."""
        if isinstance(batch["target"], str):  # the featurizer's reason this batch has no target graph
            raise FeaturizationError(batch["target"])
        logits, candidates, count_logit = self(batch)
        targets = self._targets(batch, logits)
        edge_loss = F.binary_cross_entropy_with_logits(logits, targets, weight=candidates.to(logits.dtype),
                                                       reduction="sum")
        count_loss = F.binary_cross_entropy_with_logits(count_logit, batch["target"].count.float(), reduction="sum")
        return (edge_loss + count_loss) / logits.shape[0], (targets * ~candidates).sum()

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss, uncoverable = self.loss(batch)
        self.log_dict({"train/loss": loss, "train/uncoverable_edges": uncoverable}, prog_bar=True,
                      batch_size=len(batch["lengths"]))
        return loss

    @torch.no_grad()
    def parse(self, batch: dict[str, Any]) -> list[str]:
        logits, candidates, count_logit = self(batch)
        probabilities = torch.sigmoid(logits).masked_fill(~candidates, 0.0)
        n_relations = probabilities.shape[3]
        sparql = get_formalism("cfq_sparql")
        programs = []
        for b in range(logits.shape[0]):
            chosen = (probabilities[b] > self.hparams.threshold).nonzero().tolist()  # [s, o, r] rows
            if not chosen:  # a query needs a conjunct: keep the most probable one
                flat = int(probabilities[b].argmax())
                chosen = [[*divmod(flat // n_relations, probabilities.shape[2]), flat % n_relations]]
            query = self.featurizer.query([(int(self.subjects[s]), r, o) for s, o, r in chosen],
                                          count=bool(count_logit[b] > 0))
            try:
                programs.append(sparql.unparse(query))
            except FormalismError as e:  # never expected; still a wrong prediction rather than a crash
                programs.append(f"<unprintable: {e}>")
        return programs

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
