"""Subtree substitution: new training examples from SpanBasedSP's own span trees, after SUBS (Yang, Zhang & Yang
2022, "SUBS: Subtree Substitution for Compositional Semantic Parsing"), whose span trees for GeoQuery were also
induced by SpanBasedSP.

    python benchmarks/run.py experiment=span_cky_geo data=geo_funql_length        # holds augment=subs, grow
    python benchmarks/run.py model=span_cky data=geo_funql_length augment=subs augment.ratio=2

Two stages (``zoo.stages``), each an ordinary run in a directory of its own:

1. ``trees``: the parser trains on the training set as it would without augmentation.
2. Its hard-EM trees (Herzig & Berant 2021, §3.3: the best tree under the trained scores whose program is the gold
   one) give every node of every training example a phrase (its words from the first to the last that stand under a
   constant: φ words at its edges, a final "?", stay where they are) and a sub-program. A node whose
   sub-program is a whole FunQL expression (not a predicate still waiting for an argument) can be exchanged for
   another such node of the same FunQL type (``funql.type_of``: a state, a city, a river, a number, ...): the donor's
   words replace the node's words in the utterance, and the donor's sub-program replaces the node's in the program.
   "how many rivers does [alaska] have ?" with the donor "[largest state]" becomes "how many rivers does largest
   state have ?", ``answer ( count ( river ( loc_2 ( largest ( state ( all ) ) ) ) ) )``. SUBS exchanges
   subtrees of "similar semantic function"; the type is this zoo's reading of that for FunQL. A new program must
   type-check, and an example the training set already has is not made again. With ``augment.grow`` a node is
   only exchanged for a larger sub-program (more predicates and constants), so every new program is longer than
   the one it was made from.
3. ``subs``: a new parser trains from scratch on the training set and ``ratio`` times as many distinct substituted
   examples, drawn at random (by the run's seed); its checkpoint is chosen on the unchanged dev set and it is tested
   on the unchanged test set. The substituted examples are saved in the run directory (``augmented.jsonl``).

With ``augment.ensemble`` (beyond SUBS) the test set is then decoded by both parsers together, with the mean of
their span scores (``SpanBasedParser.average_with``): the row's test numbers are the pair's, the second parser's
alone are its ``test_stage2_*`` columns, and the first parser's ``test_stage1_*`` as always. Each parser decodes
with its best checkpoint on dev; ``augment.ensemble_checkpoints=best+last`` adds each one's final weights, so four
score tables are averaged. A list of ratios (``augment.ratio=[1,2]``, with the ensemble only) trains a second
parser per ratio, each on its own draw of substituted examples, and all of them decode together with the first
(``test_stage2_*``, ``test_stage3_*``: each second parser alone).

The run's variant gains ``+subs<ratio>`` (``+subs1_2`` for two ratios; and ``+grow``, ``+ensemble``,
``+ensemble_best_last``; ``zoo.augment_suffix``). What LENGTH asks for is programs longer than any in training:
substitution puts whole sub-programs inside others, so it composes parts the training set never composed, and with
``grow`` many of its programs are longer than every training program.
"""
from __future__ import annotations

import json
import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from zoo.formalisms import FormalismError
from zoo.formalisms import funql
from zoo.results import read_predictions, write_jsonl
from zoo.stages import (averaged_test, combined_row, load_stage_model, prepared_data, run_identity, run_stage,
                         stage_directory, test_metrics)
from zoo.types import Example

log = logging.getLogger(__name__)

METHODS = ("none", "subs")
CHECKPOINTS = ("best", "last")  # the weights of a stage that augment.ensemble_checkpoints can name


class AugmentError(ValueError):
    """An ``augment=`` setting that cannot run (said before any training)."""


@dataclass(frozen=True)
class Slot:
    """A node of one training example's span tree that substitution can replace: its words and sub-program."""

    example: int
    start: int  # first word
    end: int  # one past the last word
    program: funql.Tree
    type: frozenset


def exchangeable_nodes(example: int, tree, program: str, language, categories: list[str]) -> list[Slot]:
    """The nodes of ``tree`` (a ``models.cky.SpanNode`` whose program is ``program``) that hold a whole typed
    expression occurring once in the program, other than the whole program itself (FunQL: inside ``answer``); each
    from its first to its last word under a constant, so that φ words at its edges ("the", a final "?") stay where
    they are."""
    from models.cky import JOIN, PHI
    from models.span_programs import Partial

    root = language.gold_root(program)
    slots = {}
    for node in tree.nodes():
        if node.label == PHI:
            continue
        item = language.tree_item(node, categories)
        if item is None or isinstance(item, Partial) or item == root or _occurrences(root, item) != 1:
            continue
        try:
            kind = funql.type_of(item)
        except FormalismError:
            continue
        constants = [leaf for leaf in node.nodes() if leaf.label not in (JOIN, PHI)]
        start, end = min(c.start for c in constants), max(c.end for c in constants)
        slots[start, end, item] = Slot(example, start, end, item, kind)
    return list(slots.values())


def _occurrences(tree: funql.Tree, item: funql.Tree) -> int:
    if tree == item:
        return 1
    return sum(_occurrences(arg, item) for arg in tree[1:]) if isinstance(tree, tuple) else 0


def _size(tree: funql.Tree) -> int:
    return 1 + sum(_size(arg) for arg in tree[1:]) if isinstance(tree, tuple) else 1


def _replaced(tree: funql.Tree, old: funql.Tree, new: funql.Tree) -> funql.Tree:
    if tree == old:
        return new
    return (tree[0], *(_replaced(arg, old, new) for arg in tree[1:])) if isinstance(tree, tuple) else tree


def substitute(tokens: list[list[str]], programs: list[str], slots: list[Slot], ratio: float, seed: int,
               language, grow: bool = False) -> list[Example]:
    """``ratio`` × len(``programs``) distinct new examples (fewer if substitution cannot make that many): a random
    slot, and a random other phrase of its type (with ``grow``, of a larger sub-program), by ``seed``. ``tokens[i]``
    are example i's words."""
    donors: dict[frozenset, list[Slot]] = defaultdict(list)
    for slot in {(tuple(tokens[s.example][s.start:s.end]), s.program): s for s in slots}.values():
        donors[slot.type].append(slot)
    if grow:  # each slot draws from the donors larger than it
        sizes = {slot.program: _size(slot.program) for slot in slots}
        candidates = {slot: [d for d in donors[slot.type] if sizes[d.program] > sizes[slot.program]] for slot in slots}
        slots = [slot for slot in slots if candidates[slot]]
    else:
        candidates = {slot: donors[slot.type] for slot in slots}
    wanted = round(ratio * len(programs))
    seen = {(" ".join(words), program) for words, program in zip(tokens, programs)}
    rng, made = random.Random(seed), []
    for _ in range(50 * wanted):  # draws that give nothing new (the same phrase, a known example) are skipped
        if len(made) >= wanted or not slots:
            break
        slot = rng.choice(slots)
        donor = rng.choice(candidates[slot])
        if donor.program == slot.program:
            continue
        words = tokens[slot.example]
        utterance = " ".join(words[:slot.start] + tokens[donor.example][donor.start:donor.end] + words[slot.end:])
        root = _replaced(language.gold_root(programs[slot.example]), slot.program, donor.program)
        try:
            funql.type_of(root)
        except FormalismError:
            continue
        program = language.finish(root)
        if program is None or (utterance, program) in seen:
            continue
        seen.add((utterance, program))
        made.append(Example(utterance, program, {"substituted": [slot.example, donor.example]}))
    return made


@torch.no_grad()
def latent_trees(model, examples: list[Example], batch_size: int) -> list:
    """The trained span parser's hard-EM tree of each example (None where no tree gives its program)."""
    featurizer, trees = model.featurizer, []
    for start in range(0, len(examples), batch_size):
        batch = featurizer.collate([featurizer.encode(e) for e in examples[start:start + batch_size]])
        batch = {key: value.to(model.device) if torch.is_tensor(value) else value for key, value in batch.items()}
        trees += model.latent_trees(model(batch), batch)
    return trees


def ensemble_test(cfg: DictConfig, stage_dirs: list[Path], run_dir: Path) -> dict[str, float]:
    """``augment.ensemble``: the test set decoded with the mean of the stages' span scores
    (``zoo.stages.averaged_test``), each stage with the weights ``augment.ensemble_checkpoints`` names (its best
    checkpoint, its last, or both). The test metrics, as results columns."""
    models = [load_stage_model(d, checkpoint) for checkpoint in cfg.augment.ensemble_checkpoints.split("+")
              for d in stage_dirs]
    metrics, _ = averaged_test([models[-1], *models[:-1]], prepared_data(cfg), run_dir)
    log.info("augment.ensemble: the %d parsers together on test: %s", len(models),
             {key: round(value, 4) for key, value in metrics.items()})
    return metrics


def check_settings(cfg: DictConfig, formalism: str) -> None:
    """Refuse, before any training, settings that cannot work."""
    from zoo.train import RunConfigError

    settings = cfg.augment
    if settings.name not in METHODS:
        raise AugmentError(f"augment={settings.name!r}: choose one of {', '.join(METHODS)}")
    if cfg.model.name != "span_cky":
        raise RunConfigError(f"augment={settings.name} substitutes subtrees of SpanBasedSP's span trees: use "
                             f"model=span_cky, not model={cfg.model.name}")
    if formalism != "funql":
        raise AugmentError(f"augment={settings.name} exchanges subtrees by FunQL's types; {cfg.data.name} is "
                           f"{formalism}")
    checkpoints = settings.get("ensemble_checkpoints", "best")
    if not checkpoints or not set(checkpoints.split("+")) <= set(CHECKPOINTS):
        raise AugmentError(f"augment.ensemble_checkpoints={checkpoints!r}: expected {' or '.join(CHECKPOINTS)}, or "
                           "both joined by '+'")
    if not all(isinstance(r, (int, float)) and r > 0 for r in ratios(settings)) or not ratios(settings):
        raise AugmentError(f"augment.ratio={settings.ratio}: expected a positive number of substituted examples "
                           "per training example, or a list of them")
    if len(ratios(settings)) > 1 and not settings.get("ensemble"):
        raise AugmentError(f"augment.ratio={settings.ratio} trains a second parser per ratio, which only "
                           "augment.ensemble=true decodes together: set it, or give one ratio")


def ratios(settings: DictConfig) -> list[float]:
    """``augment.ratio`` as a list: one second parser per ratio (several only with ``augment.ensemble``)."""
    return list(settings.ratio) if OmegaConf.is_list(settings.ratio) else [settings.ratio]


def run_augmented(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    """``augment=subs``: stage ``trees``, the substituted examples, stage ``subs``. Records one row."""
    from zoo.registry import get_dataset
    from zoo.train import git_commit, record

    check_settings(cfg, get_dataset(cfg.data.name).formalism)
    commit = git_commit()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    settings, root = cfg.augment, cfg.augment.stages_dir
    datamodule = prepared_data(cfg)
    train, test = datamodule.train, datamodule.test

    trees_dir = stage_directory(cfg, root, "trees")
    stage_rows = [run_stage(cfg, "trees", trees_dir, None)]
    model = load_stage_model(trees_dir)
    featurizer = model.featurizer
    trees = latent_trees(model, train, cfg.data.eval_batch_size or cfg.data.batch_size)
    tokens = [featurizer.tokens(e.utterance) for e in train]
    slots = [slot for i, (tree, e) in enumerate(zip(trees, train)) if tree is not None
             for slot in exchangeable_nodes(i, tree, e.program, featurizer.language, featurizer.categories)]
    parsers, sets = [], []  # the second parsers' directories and substituted examples, one per ratio
    for ratio in ratios(settings):
        augmented = substitute(tokens, [e.program for e in train], slots, ratio, cfg.seed, featurizer.language,
                               settings.grow)
        log.info("augment=subs: %d of %d training examples have a tree, %d exchangeable nodes, %d new examples at "
                 "ratio %g", sum(t is not None for t in trees), len(train), len(slots), len(augmented), ratio)
        name = "augmented.jsonl" if not sets else f"augmented_subs{ratio:g}.jsonl"
        write_jsonl(run_dir / name, [{"utterance": e.utterance, "program": e.program, **e.meta} for e in augmented])
        stage = {"ratio": ratio, **({"grow": True} if settings.grow else {})}  # the first runs' names stay
        parsers.append(stage_directory(cfg, root, "subs", stage))
        sets.append(augmented)
        stage_rows.append(run_stage(cfg, "subs", parsers[-1], lambda split, examples, augmented=augmented:
                                    examples + augmented if split == "train" else examples))
    final = stage_rows[-1]
    test_seconds = len(test) / max(float(final["test_examples_per_s"]), 1e-9)
    row = combined_row(run_identity(cfg), stage_rows, [trees_dir, *parsers], run_dir, commit, len(train), len(test),
                       test_seconds)
    # the first parser is the same setting without augmentation: its test numbers are the comparison
    compared = {"test_stage1": test_metrics(stage_rows[0])}
    if settings.get("ensemble"):
        compared.update({f"test_stage{i}": test_metrics(r) for i, r in enumerate(stage_rows[1:], start=2)})
        row.update(ensemble_test(cfg, [trees_dir, *parsers], run_dir))
    else:
        write_jsonl(run_dir / "predictions.jsonl", read_predictions(parsers[-1] / "predictions.jsonl"))
        row.update(test_metrics(final))
    for prefix, metrics in compared.items():
        row.update({f"{prefix}_{key[len('test_'):]}": metrics[key] for key in ("test_exact_match", "test_denotation")
                    if key in metrics})
    (run_dir / "augment.json").write_text(json.dumps({
        "trees": sum(t is not None for t in trees), "n_train": len(train), "slots": len(slots),
        "augmented": len(sets[0]), **({"augmented_per_ratio": [len(a) for a in sets]} if len(sets) > 1 else {}),
        "stage_dirs": [str(trees_dir), *map(str, parsers)]}, indent=1))
    record(cfg, run_dir, row)
    return row
