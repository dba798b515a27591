"""IR pipelines (Herzig et al. 2021 §3.4 and §4.1): ``python benchmarks/run.py model=seq2seq ir=<name> data=...``.

Each pipeline is a chain of seq2seq *stages*. A stage maps a source (the utterance x, or ``x [SEP] z`` where z is
a lossy IR) to a target (the program y, its reversible IR z_r, a lossy IR z_l, or both applied, z_lr):

===============  =====================================  ==============================================
``ir=``          stages (trained on gold sources)        at test time
===============  =====================================  ==============================================
``rir``          x -> z_r                                z_r* -> F^-1 -> y
``lir_d``        x -> z_l;  x [SEP] z_l -> y             x -> z_l* ; x [SEP] z_l* -> y
``lir_ind``      x -> y;    x [SEP] z_l -> y             x -> y* -> F_l(y*) ; x [SEP] F_l(y*) -> y
``lir_d+rir``    x -> z_lr; x [SEP] z_lr -> z_r          x -> z_lr* ; then as lir_d, and F^-1
``lir_ind+rir``  x -> z_r;  x [SEP] z_lr -> z_r          x -> z_r* -> F_l(z_r*) ; then as lir_d, and F^-1
``graphq``       x -> z_g                                z_g* -> compiler -> y (Nie et al. 2022; CFQ)
===============  =====================================  ==============================================

The second stage is always trained on the lossy IR of the *gold* program, so ``lir_d`` and ``lir_ind`` share it
(as the paper's "indirect prediction" changes only where z comes from). A stage is an ordinary training run
(``zoo.train.train_and_test``) on rewritten examples, scored token by token (formalism ``tokens``), in a directory
named by the stage and a hash of the model, data and trainer settings: any pipeline that needs the same stage with
the same settings reuses it, so ``rir`` and ``lir_ind+rir`` train x -> z_r once. The pipeline then chains the
stages' best checkpoints over the test set, inverts the final IR and scores the program with the dataset's own
formalism (CFQ: conjuncts sorted and deduplicated, §4.2, is CFQ's canonical form). A final IR that does not invert
is a wrong prediction; its reason is the row's ``error`` in ``predictions.jsonl``.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from zoo.formalisms import get_formalism
from zoo.ir import IRError, UnsupportedIRError, get_ir
from zoo.metrics import ExampleScore, Scorer
from zoo.registry import get_dataset
from zoo.results import path_for_row, write_jsonl
from zoo.stages import (combined_row, load_stage_model, predict, prepared_data, run_identity, run_stage,
                         stage_directory)
from zoo.types import Example

log = logging.getLogger(__name__)

SEP = "[SEP]"


@dataclass(frozen=True)
class Stage:
    source: str | None  # None: the utterance; "lir" / "lir+rir": x [SEP] that lossy IR
    target: str  # "program", a reversible IR ("rir", "graphq"), "lir" or "lir+rir"

    @property
    def name(self) -> str:
        return f"x{'+' + self.source if self.source else ''}_to_{self.target}"


PIPELINES: dict[str, tuple[Stage, ...]] = {
    "rir": (Stage(None, "rir"),),
    "lir_d": (Stage(None, "lir"), Stage("lir", "program")),
    "lir_ind": (Stage(None, "program"), Stage("lir", "program")),
    "lir_d+rir": (Stage(None, "lir+rir"), Stage("lir+rir", "rir")),
    "lir_ind+rir": (Stage(None, "rir"), Stage("lir+rir", "rir")),
    "graphq": (Stage(None, "graphq"),),
}
REVERSIBLE = ("rir", "graphq")


class Transforms:
    """The reversible and lossy IRs of one formalism, fitted on the training programs, as the stages use them."""

    def __init__(self, formalism: str, needed: set[str], definition: str = "paper"):
        self.formalism = formalism
        wanted = needed | ({"rir"} if "lir+rir" in needed else set())
        self.reversible = {name: get_ir(name, formalism, definition) for name in REVERSIBLE if name in wanted}
        self.lir = get_ir("lir", formalism, definition) if needed & {"lir", "lir+rir"} else None

    def fit(self, train: list[Example]) -> "Transforms":
        for ir in self.reversible.values():
            ir.fit([e.program for e in train])
        return self

    def text(self, kind: str, program: str, utterance: str) -> str:
        """The representation ``kind`` of a gold program."""
        if kind == "program":
            return program
        if kind == "lir":
            return self.lir.forward(program, utterance)
        if kind in self.reversible:
            return self.reversible[kind].forward(program, utterance)
        return self.lir.forward(self.reversible["rir"].forward(program, utterance), utterance)  # lir+rir

    def lossy(self, prediction: str, utterance: str) -> str:
        """The lossy IR of a first stage's prediction (a program or an RIR, in ``lir_ind``): F_l(y*) / F_l(z_r*)."""
        return self.lir.forward(prediction, utterance)

    def program(self, kind: str, prediction: str, utterance: str) -> str:
        """The program a final stage's prediction stands for; raises IRError when an IR does not invert."""
        return self.reversible[kind].inverse(prediction, utterance) if kind in self.reversible else prediction

    def state(self) -> dict[str, Any]:
        """What ``fit`` learned, for the run directory (SPARQL's short relation names)."""
        return {"formalism": self.formalism, "rir_short_names": getattr(self.reversible.get("rir"), "short", None)}


def check_pipeline(name: str, formalism: str, definition: str = "paper") -> tuple[tuple[Stage, ...], Transforms]:
    """The stages of ``ir=name`` and the (unfitted) IRs they need, under ``definition`` (``zoo.ir.DEFINITIONS``);
    refuses an unknown pipeline or definition, or a formalism without those IRs."""
    if name not in PIPELINES:
        raise UnsupportedIRError(f"ir={name!r} is not a pipeline; choose one of none, {', '.join(PIPELINES)}")
    stages = PIPELINES[name]
    return stages, Transforms(formalism, {s.target for s in stages} | {s.source for s in stages if s.source},
                              definition)


def stage_directories(cfg: DictConfig, stages: tuple[Stage, ...]) -> list[Path]:
    """Where each stage trains: apart for each IR definition, except that the zoo definition's stages, hashed before
    there was a choice, keep those names (and are reused)."""
    definition = cfg.get("ir_definition", "paper")
    setting = None if definition == "zoo" else {"ir_definition": definition}
    return [stage_directory(cfg, cfg.ir_stages_dir, stage.name, setting) for stage in stages]


def run_pipeline(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    """Train the stages of ``cfg.ir`` that no earlier run trained, chain them over the test set, record one row."""
    from zoo.train import RunConfigError, git_commit, record

    spec = get_dataset(cfg.data.name)
    if cfg.model.name != "seq2seq":
        raise RunConfigError(f"ir={cfg.ir} needs model=seq2seq (the pipelines chain seq2seq stages), "
                             f"not model={cfg.model.name}")
    definition = cfg.get("ir_definition", "paper")
    stages, transforms = check_pipeline(cfg.ir, spec.formalism, definition)
    commit = git_commit()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    datamodule = prepared_data(cfg)
    transforms.fit(datamodule.train)
    stage_dirs = stage_directories(cfg, stages)
    # what zoo.inference needs to chain the stages again: the pipeline, its IRs' definition and the stages' places
    (run_dir / "ir.json").write_text(json.dumps(
        {**transforms.state(), "ir": cfg.ir, "ir_definition": definition,
         "stage_dirs": [path_for_row(d) for d in stage_dirs]}, indent=1, sort_keys=True))

    stage_rows = [run_stage(cfg, stage.name, stage_dir, formalism="tokens",
                            rewrite=lambda split, examples, stage=stage: [stage_example(transforms, stage, e)
                                                                          for e in examples])
                  for stage, stage_dir in zip(stages, stage_dirs)]

    rows, stage1_correct, test_seconds = chain(stages, stage_dirs, transforms, datamodule.test,
                                               cfg.data.eval_batch_size or cfg.data.batch_size)
    scorer = Scorer(get_formalism(spec.formalism), datamodule.world)
    for row, example in zip(rows, datamodule.test):
        if "error" in row:  # the final IR did not invert
            score = ExampleScore(False, False if scorer.executes else None, row["error"],
                                 False if scorer.has_emr else None)
        else:
            score = scorer.score(row["prediction"], example)
        row.update(score.fields())
    write_jsonl(run_dir / "predictions.jsonl", rows)

    n_test = len(rows)
    row = combined_row(run_identity(cfg), stage_rows, stage_dirs, run_dir, commit, len(datamodule.train), n_test,
                       test_seconds)
    row["test_exact_match"] = sum(r["correct"] for r in rows) / max(n_test, 1)
    if scorer.executes:
        row["test_denotation"] = sum(r.get("denotation_correct", False) for r in rows) / max(n_test, 1)
    if scorer.has_emr:
        row["test_emr"] = sum(r["emr_correct"] for r in rows) / max(n_test, 1)
    if len(stages) > 1:  # how often the first stage's output was right (the paper's 47.2 on z_l, §4.1)
        row["test_stage1_exact_match"] = stage1_correct / max(n_test, 1)
    row["best_val_metric"] = "val/exact_match (last stage, gold inputs)"
    row["ir_definition"] = definition
    record(cfg, run_dir, row)
    log.info("ir=%s test exact match %.4f; predictions in %s", cfg.ir, row["test_exact_match"],
             run_dir / "predictions.jsonl")
    return row


def stage_example(transforms: Transforms, stage: Stage, example: Example) -> Example:
    """A gold example as ``stage`` trains on it: source ``x`` or ``x [SEP] z``, target the stage's representation."""
    source = example.utterance
    if stage.source:
        source += f" {SEP} " + transforms.text(stage.source, example.program, example.utterance)
    target = transforms.text(stage.target, example.program, example.utterance)
    return replace(example, utterance=source, program=target)


@torch.no_grad()
def chain(stages: tuple[Stage, ...], stage_dirs: list[Path], transforms: Transforms, test: list[Example],
          batch_size: int) -> tuple[list[dict[str, Any]], int, float]:
    """Run the stages' best checkpoints one after the other over ``test``; per example, the final program (or the
    reason there is none) and each stage's output. Also how many first-stage outputs equal their gold target, and
    the seconds spent decoding (loading the checkpoints not counted)."""
    rows = [{"utterance": e.utterance, "gold": e.program} for e in test]
    outputs, seconds = chain_models(stages, [load_stage_model(d) for d in stage_dirs], transforms,
                                    [e.utterance for e in test], batch_size)
    for row, output in zip(rows, outputs):
        row.update(output)
    first = f"stage1_{stages[0].target}"
    gold = [transforms.text(stages[0].target, e.program, e.utterance) for e in test]
    stage1_correct = sum(" ".join(row[first].split()) == " ".join(g.split()) for row, g in zip(rows, gold))
    return rows, stage1_correct, seconds


@torch.no_grad()
def chain_models(stages: tuple[Stage, ...], models: list, transforms: Transforms, utterances: list[str],
                 batch_size: int) -> tuple[list[dict[str, Any]], float]:
    """The stages' ``models`` one after the other over ``utterances`` (the test set's, or new ones:
    ``zoo.inference``): per utterance, each stage's output (``stage<i>_<target>``), the final ``prediction`` (``""``
    and ``correct``/``error`` when the final IR does not invert) and ``stage1_error`` when the lossy IR of a first
    stage's output failed; and the seconds spent decoding."""
    rows: list[dict[str, Any]] = [{} for _ in utterances]
    sources = list(utterances)
    seconds = 0.0
    for index, (stage, model) in enumerate(zip(stages, models)):
        start = time.perf_counter()
        outputs = predict(model, sources, batch_size)
        seconds += time.perf_counter() - start
        for row, output in zip(rows, outputs):
            row[f"stage{index + 1}_{stage.target}"] = output
        if index + 1 < len(stages):  # the next stage reads x [SEP] z, z from this stage's output
            following = stages[index + 1]
            sources = []
            for utterance, output, row in zip(utterances, outputs, rows):
                z = output
                if stage.target != following.source:  # lir_ind: the lossy IR of the predicted program / RIR
                    try:
                        z = transforms.lossy(output, utterance)
                    except IRError as e:  # the second stage still gets the raw prediction; recorded
                        row["stage1_error"] = str(e)
                sources.append(f"{utterance} {SEP} {z}")
    for utterance, output, row in zip(utterances, outputs, rows):
        try:
            row["prediction"] = transforms.program(stages[-1].target, output, utterance)
        except IRError as e:
            row.update(prediction="", correct=False, error=f"the predicted IR does not invert: {e}")
    return rows, seconds
