"""Parsing new utterances with a trained run: ``zoo.load`` and ``python -m zoo.parse`` (issue 26, item 5).

    parser = zoo.load("runs/span_cky-spanbasedsp/geo_funql_iid/seed1")    # a run directory, or a checkpoint
    parser.parse(["how many rivers are in texas ?"])        # ["answer ( count ( river ( loc_2 ( ... ) ) ) )"]
    parser.execute(parser.parse([...]))                      # denotations on geobase, where the dataset executes
    parser.parse_with_details([...])                         # Parse(utterance, input, program, details)

What ``load`` takes:

* a run directory (``runs/<model>-<variant>/<data>/seed<seed>``): its tested checkpoint, ``checkpoints/best.ckpt``
  (``last.ckpt`` where validation never ran). The checkpoint records the dataset it was trained on (Lightning keeps
  the datamodule's arguments), whose database ``execute`` runs programs on, found under ``root=`` or ``$ZOO_DATA``
  as in a run;
* a checkpoint file: the same; where it does not record its dataset, ``data=<name>`` names it (for ``execute``);
* an IR pipeline's directory (``ir=...``, it holds ``ir.json``): the stages' checkpoints chained and the final IR
  inverted as at test time (``zoo.ir.pipeline.chain_models``), the IRs fitted again on the run's training split;
* a retrieval run's directory (``retrieval=input|gandr``, it holds ``retrieval.json``): exemplars retrieved from the
  run's training split (``zoo.retrieval.Exemplars``), and for GandR the first stage's prediction as the preliminary
  one, as at test time;
* a subtree-substitution run's directory (``augment=subs``, it holds ``augment.json``): its second parser, an
  ordinary model of the dataset.

A stage of a multi-stage run (its directory or checkpoint) is refused, naming it: its inputs or outputs are not the
dataset's utterances and programs, so the run that chains it is what to load.

Input. Utterances are written the way the dataset writes them, one token per word and punctuation mark (``how many
rivers are in texas ?``; CFQ: ``Who directed M0``). ``normalize`` does the cheap part of that: whitespace, a ``?``
``!`` ``,`` or ``.`` at the end of a word split off it, and lower case where the dataset's utterances are all lower
case (``DatasetSpec.extra["lowercase"]``: SCAN, SCAN-SP, GeoQuery, ATIS). It does not split apostrophes (GeoQuery
writes ``state's``, CFQ ``' s``) nor anonymise SQL values (``state_name0``; their values go to ``execute`` as
``metas=[{"variables": {...}}]``). An utterance the featurizer cannot encode whole raises
``UnencodableUtteranceError``, naming it and why, before any utterance is parsed.

Output. Utterances are parsed in batches of the run's evaluation batch size, so the test set parsed in its order
gives predictions.jsonl's predictions. GGD chooses its decision thresholds on dev just before testing, which the
checkpoint does not keep: they are read from the run's CSV logs or results row (``chosen_thresholds``).
"""
from __future__ import annotations

import csv
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from lightning.pytorch.utilities import move_data_to_device
from omegaconf import DictConfig, OmegaConf

from datamodules import load_world, resolve_root
from datamodules.datamodule import Collate
from zoo import split_variant
from zoo.formalisms import Formalism, FormalismError, get_formalism
from zoo.ir.pipeline import chain_models, check_pipeline
from zoo.parser import Featurizer, Parser, load_checkpoint
from zoo.registry import DatasetSpec, get_dataset
from zoo.results import ResultsFileError, Row, path_from_row, read_rows, runs_file
from zoo.retrieval import Exemplars
from zoo.stages import predict, prepared_data, stage_checkpoint
from zoo.types import Example

log = logging.getLogger(__name__)


class LoadError(ValueError):
    """A path ``load`` cannot parse with; the message names it and what to load instead."""


class UnencodableUtteranceError(ValueError):
    """An utterance the model's featurizer cannot encode whole (empty, longer than the model reads, an entity
    beyond those seen in training...)."""

    def __init__(self, utterance: str, reason: str):
        super().__init__(f"cannot parse {utterance!r}: {reason}")
        self.utterance, self.reason = utterance, reason


class NotExecutableError(ValueError):
    """``execute`` where the programs have nothing to run on; the message says what is missing."""


@dataclass(frozen=True)
class Parse:
    """One utterance's parse: ``program`` is ``""`` where the model found none (span_cky without a valid tree, an IR
    that does not invert). ``details``: span_cky's ``span_tree`` ([first word, last word, category]), GGD's
    ``query_graph``, a pipeline's stage outputs, a retrieval run's ``input`` with its exemplars."""

    utterance: str  # as given
    input: str  # as the model read it (``normalize``)
    program: str
    details: dict[str, Any] = field(default_factory=dict)


_END_PUNCTUATION = re.compile(r"(?<=\S)([?!,.])(?=\s|$)")


def normalize(utterance: str, lowercase: bool = False) -> str:
    """``utterance`` in the datasets' tokenisation, as far as that is cheap (module docstring):
    ``"How many rivers are in Texas?"`` -> ``"how many rivers are in texas ?"`` with ``lowercase``."""
    text = " ".join(_END_PUNCTUATION.sub(r" \1", utterance).split())
    return text.lower() if lowercase else text


def load(path: str | Path, data: str | None = None, root: str | Path | None = None, device: str | None = None,
         batch_size: int | None = None) -> "LoadedParser":
    """A parser from a run directory or a checkpoint (module docstring). ``data``: the dataset, where a checkpoint
    does not record it (execution only; a different one than recorded is refused). ``root``: the data root
    (default: the run's, else ``$ZOO_DATA``). ``device``: default CUDA where available. ``batch_size``: default the
    run's evaluation batch size."""
    path = Path(path)
    if not path.exists():
        raise LoadError(f"{path}: no such run directory or checkpoint")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
        if run_dir is not None:
            _refuse_stage(run_dir, path)
        return ModelParser(path, run_dir, data, root, device, batch_size)
    if (path / "ir.json").is_file():
        return PipelineParser(path, data, root, device, batch_size)
    if (path / "retrieval.json").is_file():
        return RetrievalParser(path, data, root, device, batch_size)
    if (path / "augment.json").is_file():
        final = path_from_row(_read_json(path / "augment.json")["stage_dirs"][-1])
        return ModelParser(stage_checkpoint(final), final, data, root, device, batch_size)
    _refuse_stage(path, path)
    checkpoint = stage_checkpoint(path)
    if not checkpoint.is_file():
        raise LoadError(f"{path}: not a run directory of the zoo: it holds no checkpoints/best.ckpt or last.ckpt, "
                        "and no ir.json or retrieval.json of a multi-stage run")
    return ModelParser(checkpoint, path, data, root, device, batch_size)


class LoadedParser:
    """What ``load`` returns: ``parse``, ``parse_with_details`` and ``execute``. Subclasses load one model, an IR
    pipeline or a retrieval run, and implement ``_parse``."""

    kind = ""  # the model's name (seq2seq, span_cky, ggd), "ir=<pipeline>" or "retrieval=<method>"

    def __init__(self, path: Path, data: str | None, root: str | Path | None, batch_size: int,
                 first: Featurizer, outputs: str | None = None):
        self.path, self.data, self.root, self.batch_size = path, data, root, batch_size
        self.first = first  # the featurizer that reads the utterances
        self.outputs = outputs  # the formalism of the programs returned (None: the dataset's)
        self._world: Any = None

    @property
    def spec(self) -> DatasetSpec | None:
        return get_dataset(self.data) if self.data else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, kind={self.kind!r}, data={self.data!r})"

    # ----- parsing ----------------------------------------------------------------------------------------------
    def parse(self, utterances: Sequence[str]) -> list[str]:
        """One program per utterance (``""`` where the model found none)."""
        return [parse.program for parse in self.parse_with_details(utterances)]

    def parse_with_details(self, utterances: Sequence[str]) -> list[Parse]:
        if isinstance(utterances, str):
            raise TypeError("parse takes a list of utterances, not one string: parse([utterance])")
        inputs = [self.prepare(utterance) for utterance in utterances]  # every one checked before any is parsed
        if not inputs:
            return []
        return [Parse(utterance, text, program, details)
                for utterance, text, (program, details) in zip(utterances, inputs, self._parse(utterances, inputs))]

    def prepare(self, utterance: str) -> str:
        """The text the model reads for ``utterance`` (``normalize``), or ``UnencodableUtteranceError``."""
        if not isinstance(utterance, str):
            raise UnencodableUtteranceError(repr(utterance), f"not a string but {type(utterance).__name__}")
        spec = self.spec
        text = normalize(utterance, lowercase=bool(spec and spec.extra.get("lowercase")))
        if not text:
            raise UnencodableUtteranceError(utterance, "it is empty")
        reason = self.first.unencodable(text)
        if reason:
            raise UnencodableUtteranceError(utterance, reason)
        return text

    def _parse(self, utterances: Sequence[str], inputs: list[str]) -> list[tuple[str, dict[str, Any]]]:
        """(program, details) per input; ``utterances`` (as given) name the one that cannot be encoded."""
        raise NotImplementedError

    # ----- execution --------------------------------------------------------------------------------------------
    @property
    def executable(self) -> bool:
        """Whether the programs denote something: the dataset's formalism executes and they are its programs (its
        database may still be missing: ``execute`` says so)."""
        spec = self.spec
        return (spec is not None and get_formalism(spec.formalism).executable
                and (self.outputs or spec.formalism) == spec.formalism)

    def execute(self, programs: Sequence[str], metas: Sequence[dict[str, Any]] | None = None) -> list[Any]:
        """Each program's denotation on the dataset's database, as scoring computes it (``Formalism.execute``;
        ``metas``: per program, what the dataset keeps in ``Example.meta`` for execution, SQL's ``variables``). A
        program that does not run gives the ``FormalismError`` saying why in its place, so that one bad program
        does not hide the others' denotations. ``NotExecutableError`` where there is nothing to run on."""
        formalism, world = self._runnable()
        metas = list(metas) if metas is not None else [{} for _ in programs]
        if len(metas) != len(programs):
            raise ValueError(f"{len(programs)} programs but {len(metas)} metas")
        denotations: list[Any] = []
        for program, meta in zip(programs, metas):
            try:
                denotations.append(formalism.execute(program, world, meta))
            except FormalismError as e:
                denotations.append(e)
        return denotations

    def _runnable(self) -> tuple[Formalism, Any]:
        spec = self.spec
        if spec is None:
            raise NotExecutableError(f"{self.path} does not record the dataset it was trained on: pass data=<name> "
                                     "to zoo.load (--data to python -m zoo.parse) to execute its programs")
        formalism = get_formalism(spec.formalism)
        if not formalism.executable:
            raise NotExecutableError(f"{spec.name}: its {formalism.name} programs do not execute (scored by exact "
                                     "match only)")
        if (self.outputs or spec.formalism) != spec.formalism:
            raise NotExecutableError(f"{self.path} writes {self.outputs}, not {spec.name}'s {spec.formalism} "
                                     "programs (a stage of a multi-stage run?): load the run that chains it")
        relative = spec.extra.get("world")
        if self._world is None and relative:
            self._world = load_world(spec.name, self.root)
        if formalism.needs_world and self._world is None:
            where = (f"{resolve_root(self.root) / relative}, which is missing (set $ZOO_DATA or root=)" if relative
                     else "none, and none ships with it here")
            raise NotExecutableError(f"{spec.name}: its programs run on a database: {where}")
        return formalism, self._world


class ModelParser(LoadedParser):
    """One model from one checkpoint."""

    def __init__(self, checkpoint_path: Path, run_dir: Path | None, data: str | None, root: str | Path | None,
                 device: torch.device, batch_size: int | None):
        checkpoint = load_checkpoint(checkpoint_path)
        recorded = checkpoint.get("datamodule_hyper_parameters") or {}
        if data and recorded.get("name") and data != recorded["name"]:
            raise LoadError(f"{checkpoint_path} was trained on data={recorded['name']}, not data={data}")
        self.model = Parser.from_checkpoint(checkpoint).to(device)
        self.device = device
        if run_dir is not None and getattr(self.model.hparams, "tune_threshold", False):
            self._use_chosen_thresholds(run_dir)
        super().__init__(checkpoint_path, recorded.get("name") or data, root or recorded.get("root"),
                         batch_size or recorded.get("eval_batch_size") or recorded.get("batch_size") or 32,
                         self.model.featurizer, outputs=self.model.formalism.name)
        self.kind = self.model.model_name

    def _use_chosen_thresholds(self, run_dir: Path) -> None:
        thresholds = chosen_thresholds(run_dir)
        if thresholds is None:
            log.warning("%s: no record of the decision thresholds its test chose on dev (test/threshold in its logs "
                        "or results row): decoding with the checkpoint's %s", run_dir, self.model.thresholds)
            return
        self.model.hparams.threshold, self.model.hparams.attribute_threshold = thresholds

    @torch.no_grad()
    def _parse(self, utterances: Sequence[str], inputs: list[str]) -> list[tuple[str, dict[str, Any]]]:
        featurizer = self.model.featurizer
        examples = [Example(text, "") for text in inputs]  # no gold program: a target the model never reads
        featurizer.prepare(examples)  # (GGD: spaCy tags them all at once)
        items = []
        for utterance, example in zip(utterances, examples):
            try:
                items.append((example, featurizer.encode(example)))
            except ValueError as e:  # every featurizer's way of refusing an input (GGD: FeaturizationError)
                raise UnencodableUtteranceError(utterance, str(e)) from None
        collate, parsed = Collate(featurizer), []
        for start in range(0, len(items), self.batch_size):
            batch = collate(items[start:start + self.batch_size])
            batch_examples = batch.pop("examples")  # (frozen dataclasses stay on the host)
            batch = move_data_to_device(batch, self.device)
            batch["examples"] = batch_examples
            programs, details = self.model.explain(batch)
            parsed += zip(programs, details)
        return parsed


class PipelineParser(LoadedParser):
    """An IR pipeline (``zoo.ir.pipeline``): its stages chained, the final IR inverted."""

    def __init__(self, run_dir: Path, data: str | None, root: str | Path | None, device: torch.device,
                 batch_size: int | None):
        ir, definition, stage_dirs = pipeline_record(run_dir)
        cfg = stage_config(stage_dirs[0], data, root)
        self.stages, self.transforms = check_pipeline(ir, get_dataset(cfg.data.name).formalism, definition)
        if len(stage_dirs) != len(self.stages):
            raise LoadError(f"{run_dir}: ir={ir} has {len(self.stages)} stages, but {len(stage_dirs)} are recorded")
        self.transforms.fit(prepared_data(cfg).train)  # (SPARQL's RIR learns its short relation names there)
        self.models = [stage_model(d, device) for d in stage_dirs]
        super().__init__(run_dir, cfg.data.name, cfg.data.root,
                         batch_size or cfg.data.eval_batch_size or cfg.data.batch_size, self.models[0].featurizer)
        self.kind = f"ir={ir}"

    def _parse(self, utterances: Sequence[str], inputs: list[str]) -> list[tuple[str, dict[str, Any]]]:
        rows, _ = chain_models(self.stages, self.models, self.transforms, inputs, self.batch_size)
        return [(row["prediction"], {k: v for k, v in row.items() if k not in ("prediction", "correct")})
                for row in rows]


class RetrievalParser(LoadedParser):
    """Exemplar retrieval (``zoo.retrieval``): stage 1 reads the utterance with its input-relevance exemplars; with
    GandR, stage 2 reads it with the exemplars that stage 1's prediction brings (hybrid relevance)."""

    def __init__(self, run_dir: Path, data: str | None, root: str | Path | None, device: torch.device,
                 batch_size: int | None):
        recorded = _read_json(run_dir / "retrieval.json")
        try:
            settings, stage_dirs = recorded["settings"], [path_from_row(d) for d in recorded["stage_dirs"]]
            method, k, p, alpha = settings["name"], settings["k"], settings["p"], settings["alpha"]
        except (KeyError, TypeError) as e:
            raise LoadError(f"{run_dir / 'retrieval.json'}: no {e} (expected the settings and stage_dirs that "
                            "zoo.retrieval writes)") from None
        cfg = stage_config(stage_dirs[0], data, root)
        train = prepared_data(cfg).train
        self.method = method
        self.exemplars = [Exemplars(train, None, k, p, cfg.seed)]
        self.models = [stage_model(stage_dirs[0], device)]
        if method == "gandr":  # stage 2 is the last stage (the fold models between train only)
            formalism = get_formalism(get_dataset(cfg.data.name).formalism)
            self.exemplars.append(Exemplars(train, formalism, k, p, cfg.seed, alpha))
            self.models.append(stage_model(stage_dirs[-1], device))
        super().__init__(run_dir, cfg.data.name, cfg.data.root,
                         batch_size or cfg.data.eval_batch_size or cfg.data.batch_size, self.models[0].featurizer)
        self.kind = f"retrieval={method}"

    def _parse(self, utterances: Sequence[str], inputs: list[str]) -> list[tuple[str, dict[str, Any]]]:
        queries = [Example(text, "") for text in inputs]
        details: list[dict[str, Any]] = [{} for _ in inputs]
        programs: list[str] = []
        for stage, (exemplars, model) in enumerate(zip(self.exemplars, self.models)):
            if stage:  # GandR: relevance also compares stage 1's prediction with the training programs
                exemplars.predictions = {"parse": programs}
                for detail, preliminary in zip(details, programs):
                    detail["preliminary"] = preliminary
            sources = [e.utterance for e in exemplars.top("parse", queries)]
            programs = predict(model, sources, self.batch_size)
            for detail, source in zip(details, sources):
                detail["input"] = source  # x || x'_1 & y'_1 || ...: what the last stage read
        return list(zip(programs, details))


# ----- what a run directory records -----------------------------------------------------------------------------
def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LoadError(f"{path}: not readable JSON ({e})") from None


def _refuse_stage(run_dir: Path, path: Path) -> None:
    """A stage's directory holds the ``config.yaml`` that ``zoo.stages.stage_config`` writes, variant ``stage:*``."""
    config = run_dir / "config.yaml"
    if not config.is_file():
        return
    variant = str(OmegaConf.select(OmegaConf.load(config), "model.variant", default=""))
    if variant.startswith("stage:"):
        raise LoadError(f"{path} is the stage {variant[len('stage:'):]!r} of a multi-stage run (an IR pipeline or "
                        "retrieval), whose inputs or outputs are not the dataset's utterances and programs alone: "
                        "load the run directory that chains it (runs/seq2seq-<ir or retrieval variant>/<data>/"
                        "seed<seed>, holding ir.json or retrieval.json)")


def stage_config(stage_dir: Path, data: str | None, root: str | Path | None) -> DictConfig:
    """The run configuration a stage trained with (``config.yaml``, resolved): its data, seed and batch sizes."""
    config = stage_dir / "config.yaml"
    if not config.is_file():
        raise LoadError(f"{stage_dir}: stage directory without its config.yaml (moved or deleted?)")
    cfg = OmegaConf.load(config)
    if data and data != cfg.data.name:
        raise LoadError(f"{stage_dir} was trained on data={cfg.data.name}, not data={data}")
    if root:
        cfg.data.root = str(root)
    return cfg


def stage_model(stage_dir: Path, device: torch.device) -> Parser:
    checkpoint = stage_checkpoint(stage_dir)
    if not checkpoint.is_file():
        raise LoadError(f"{stage_dir}: stage directory without checkpoints/best.ckpt or last.ckpt")
    return Parser.load(str(checkpoint)).to(device)


def results_row(run_dir: Path) -> Row | None:
    """The last results row of ``run_dir``: in its own runs.csv (``results_file=null``), else the results file
    (``$ZOO_RESULTS``, else results/runs.csv)."""
    for table in (run_dir / "runs.csv", runs_file()):
        try:
            rows = read_rows(table) if table.is_file() else []
        except ResultsFileError as e:
            log.warning("%s", e)
            continue
        mine = [row for row in rows
                if row.get("run_dir") and path_from_row(row["run_dir"]).resolve() == run_dir.resolve()]
        if mine:
            return mine[-1]
    return None


def pipeline_record(run_dir: Path) -> tuple[str, str, list[Path]]:
    """The pipeline of an IR run directory, its IR definition and its stage directories: from ``ir.json``, or for
    runs from before ``ir.json`` recorded them, from the run's results row."""
    recorded = _read_json(run_dir / "ir.json")
    if isinstance(recorded, dict) and "stage_dirs" in recorded:
        return recorded["ir"], recorded["ir_definition"], [path_from_row(d) for d in recorded["stage_dirs"]]
    row = results_row(run_dir)
    if row is None or not row.get("stage_dirs"):
        raise LoadError(f"{run_dir}: its ir.json does not name the pipeline's stages (a run from before they were "
                        f"recorded there), and no results row of it is in {run_dir / 'runs.csv'} or {runs_file()}: "
                        "set $ZOO_RESULTS to the results file it was recorded in")
    # rows from before ir_definition existed were measured under the zoo's definitions
    return (split_variant(row["variant"])[0], row.get("ir_definition") or "zoo",
            [path_from_row(d) for d in row["stage_dirs"].split()])


def chosen_thresholds(run_dir: Path) -> tuple[float, float] | None:
    """The (edge, attribute) decision thresholds GGD's test chose on dev (``GroundedGraphDecoder.on_test_start``)
    and logged as ``test/threshold`` and ``test/attribute_threshold``: from the run's latest CSV logs that have
    them, else its results row; None where neither records them."""
    logs = sorted(run_dir.glob("logs/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[-1]))
    for metrics in reversed(logs):
        with open(metrics, newline="", encoding="utf-8") as f:
            tested = [row for row in csv.DictReader(f) if row.get("test/threshold")]
        if tested:
            return float(tested[-1]["test/threshold"]), float(tested[-1]["test/attribute_threshold"])
    row = results_row(run_dir)
    if row is not None and row.get("test_threshold"):
        return float(row["test_threshold"]), float(row["test_attribute_threshold"])
    return None
