"""Generate-and-Retrieve (GandR): exemplar retrieval for seq2seq parsers, after Zemlyanskiy et al. 2022,
"Generate-and-Retrieve: use your predictions to improve retrieval for semantic parsing".

    python benchmarks/run.py model=seq2seq retrieval=input data=geo_sql_iid     # input TF-IDF exemplars
    python benchmarks/run.py model=seq2seq retrieval=gandr data=geo_sql_iid     # GandR (alpha 0.5)
    python benchmarks/run.py model=seq2seq retrieval=gandr retrieval.alpha=0.25 data=atis_sql_iid data.train_limit=1000

Exemplars (§2). Each input x is augmented with K training examples, ``x || x'_1 & y'_1 || ... || x'_K & y'_K``
(K = 4). Evaluation takes the K most relevant; training samples them by rank, rank r with probability
proportional to p(1-p)^r, one after the other without replacement (``sample_ranks``), anew each time an example is
drawn. An example never retrieves itself.

Relevance (§2). ``R_ij = (1 - alpha) TF-IDF(x_i, x_j) + alpha TF-IDF(y^_i, y_j)``: cosine similarities of TF-IDF
vectors (scikit-learn), over the lower-cased words of utterances and over the *structure* of programs
(``Formalism.structure``: SPARQL relations and types, SQL tables, columns and operators, FunQL predicates, SCAN
actions, COGS predicates; the paper's intents and slots), y^_i being a preliminary prediction.

Two stages (§2.1). Stage 1 (M1) trains with input relevance; on its own it is the ``retrieval=input`` run. It
predicts val and test with input exemplars, and, as §2.1 has it ("M_1 is used to generate GandR preliminary
predictions during training and evaluation"), its own training examples (``folds: null``). With ``folds`` = F (the
zoo's option) training examples get predictions from models that did not train on them instead: F more stage-1
models each train on all but one F-th part of the training set (and retrieve from it) and predict that part. Stage 2
(M2) starts from M1's weights and trains ``continue_steps`` more with hybrid relevance on those predictions; its
test predictions are GandR's. Stages train in directories named by a hash of their settings (``zoo.stages``), so
``retrieval=input`` and every alpha of GandR share stage 1 and the fold models.

Template recall@K (§4.3): the share of evaluation examples for which at least one of the top K exemplars has the
gold program's template (``Formalism.template``: the program with its values masked). A GandR run measures it on
the validation split for input, output (oracle: the gold program as y^) and hybrid retrieval, into
``results/template_recall.csv``.

Departures: the paper retrieves with T5 on MTOP/TOPv2; here any seq2seq backbone of the zoo on its datasets. The
paper's M1 predicts training examples it has learned, so stage 2 trains on preliminary predictions closer to gold
than those it gets at test time; ``folds`` avoids that at the cost of F more trainings. Stage 2 starts a new
optimiser with its own warm-up.
"""
from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf
from sklearn.feature_extraction.text import TfidfVectorizer

from zoo.formalisms import Formalism, FormalismError, get_formalism
from zoo.options import OptionError, check_against_constructor
from zoo.results import append_row, atomic_path, read_predictions, write_jsonl
from zoo.stages import (combined_row, load_stage_model, predict, prepared_data, run_identity, run_stage,
                        stage_checkpoint, stage_directory, test_metrics)
from zoo.types import Example

log = logging.getLogger(__name__)

METHODS = ("none", "input", "gandr")
SAMPLING_DEPTH = 100  # training draws exemplars among the 100 most relevant: p(1-p)^100 is negligible for p >= 0.1
_CHUNK = 512  # queries scored at once (a dense chunk x pool matrix)


class RetrievalError(ValueError):
    """Retrieval settings that cannot work on this dataset; raised before any training."""


def _words(text: str) -> list[str]:
    return text.lower().split()


class Retriever:
    """TF-IDF relevance of the examples of a *pool* (a training set) to queries.

    ``formalism`` (needed for ``alpha > 0``) gives the structure that output similarity compares.
    """

    def __init__(self, pool: Sequence[Example], formalism: Formalism | None = None):
        self.pool = list(pool)
        self.inputs = TfidfVectorizer(analyzer=_words)
        self.pool_inputs = self.inputs.fit_transform([e.utterance for e in self.pool])
        self.outputs = TfidfVectorizer(analyzer=formalism.structure) if formalism else None
        self.pool_outputs = self.outputs.fit_transform([e.program for e in self.pool]) if formalism else None

    def relevance(self, utterances: Sequence[str], outputs: Sequence[str] | None = None,
                  alpha: float = 0.0) -> np.ndarray:
        """``R[i, j] = (1 - alpha) cos(x_i, x_j) + alpha cos(y^_i, y_j)`` for queries i and pool examples j."""
        scores = (1 - alpha) * (self.inputs.transform(utterances) @ self.pool_inputs.T).toarray()
        if alpha > 0:
            if self.outputs is None or outputs is None:
                raise ValueError("output similarity needs the retriever's formalism and the queries' outputs")
            scores += alpha * (self.outputs.transform(outputs) @ self.pool_outputs.T).toarray()
        return scores

    def ranked(self, utterances: Sequence[str], outputs: Sequence[str] | None = None, alpha: float = 0.0,
               exclude: Sequence[int | None] | None = None, depth: int | None = None) -> list[list[int]]:
        """Per query, the ``depth`` most relevant pool indices, most relevant first (ties: pool order), leaving
        out ``exclude[i]`` (the query's own index when the queries are the pool)."""
        depth = min(depth or len(self.pool), len(self.pool) - (exclude is not None))
        result = []
        for start in range(0, len(utterances), _CHUNK):
            end = start + _CHUNK
            scores = self.relevance(utterances[start:end], outputs[start:end] if outputs is not None else None,
                                    alpha)
            for row, own in enumerate(exclude[start:end] if exclude is not None else ()):
                if own is not None:
                    scores[row, own] = -np.inf
            result += [_top(row, depth) for row in scores]
        return result


def _top(scores: np.ndarray, depth: int) -> list[int]:
    """The ``depth`` highest scores' indices, highest first, ties in index order. A partial sort finds the cut
    value in linear time; the examples tied at the cut are then taken in index order, not as the partition left
    them, so a shallower ranking is always a prefix of a deeper one."""
    candidates = np.arange(len(scores))
    if depth < len(scores):
        cut = -np.partition(-scores, depth - 1)[depth - 1]
        above = np.flatnonzero(scores > cut)
        candidates = np.concatenate([above, np.flatnonzero(scores == cut)[:depth - len(above)]])
    return candidates[np.lexsort((candidates, -scores[candidates]))].tolist()


def sample_ranks(rng: np.random.Generator, n: int, k: int, p: float) -> list[int]:
    """``min(k, n)`` distinct ranks among 0..n-1, drawn one after the other with probability proportional to
    p(1-p)^r among those not drawn yet (§2); in increasing order, so exemplars keep their relevance order."""
    weights = p * (1 - p) ** np.arange(n, dtype=float)
    ranks = []
    for _ in range(min(k, n)):
        rank = int(rng.choice(n, p=weights / weights.sum()))
        ranks.append(rank)
        weights[rank] = 0.0
    return sorted(ranks)


def with_exemplars(example: Example, exemplars: Sequence[Example]) -> Example:
    """The example with its utterance augmented: ``x || x'_1 & y'_1 || ...`` (§2); the gold program unchanged."""
    return replace(example, utterance=" || ".join([example.utterance,
                                                   *(f"{e.utterance} & {e.program}" for e in exemplars)]))


class SampledExemplars(Sequence):
    """Training examples whose exemplars are drawn anew each time one is read (``sample_ranks`` over its ranking)."""

    def __init__(self, examples: list[Example], ranked: list[list[int]], k: int, p: float, seed: int):
        self.examples, self.ranked, self.k, self.p = examples, ranked, k, p
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        ranking = self.ranked[index]
        ranks = sample_ranks(self.rng, len(ranking), self.k, self.p)
        return with_exemplars(self.examples[index], [self.examples[ranking[r]] for r in ranks])


class Exemplars:
    """What a retrieval stage trains and evaluates on (a ``zoo.stages.Rewrite``).

    ``train`` is the stage's training set and retrieval pool: the whole training set, or a fold model's part (the
    datamodule's training split is then replaced by it). ``alpha > 0`` ranks by hybrid relevance, on
    ``predictions[split]``: the preliminary predictions of each split (train's held out).
    """

    def __init__(self, train: list[Example], formalism: Formalism | None, k: int, p: float, seed: int,
                 alpha: float = 0.0, predictions: dict[str, list[str]] | None = None):
        self.retriever = Retriever(train, formalism if alpha > 0 else None)
        self.k, self.p, self.seed, self.alpha = k, p, seed, alpha
        self.predictions = predictions or {}

    def _ranked(self, split: str, examples: list[Example], depth: int) -> list[list[int]]:
        exclude = range(len(examples)) if split == "train" else None  # the queries are the pool: never oneself
        return self.retriever.ranked([e.utterance for e in examples], self.predictions.get(split), self.alpha,
                                     exclude, depth)

    def top(self, split: str, examples: list[Example]) -> list[Example]:
        """Each example with its top k exemplars (evaluation)."""
        pool = self.retriever.pool
        return [with_exemplars(e, [pool[j] for j in ranking])
                for e, ranking in zip(examples, self._ranked(split, examples, self.k))]

    def __call__(self, split: str, examples: list[Example]) -> Sequence[Example]:
        if split == "train":
            pool = self.retriever.pool
            return SampledExemplars(pool, self._ranked("train", pool, SAMPLING_DEPTH), self.k, self.p, self.seed)
        return self.top(split, examples)


def template_recall(ranked: list[list[int]], queries: Sequence[Example], pool: Sequence[Example],
                    formalism: Formalism, k: int) -> float:
    """Share of queries with at least one of their top ``k`` exemplars sharing the gold program's template."""
    templates = [formalism.template(e.program) for e in pool]
    hits = sum(formalism.template(q.program) in {templates[j] for j in ranking[:k]}
               for q, ranking in zip(queries, ranked))
    return hits / max(len(queries), 1)


def fold_parts(n: int, folds: int, seed: int) -> list[list[int]]:
    """The training indices cut into ``folds`` parts at random (by ``seed``), each in index order."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return [sorted(order[f::folds]) for f in range(folds)]


def gandr_stage_directory(cfg: DictConfig, root: str | Path, settings: DictConfig) -> Path:
    """The directory of GandR's stage 2 for these retrieval ``settings``."""
    # alpha=1 and alpha=1.0 train the same stage and must share its directory (written as the int, as it first was)
    alpha = int(settings.alpha) if float(settings.alpha).is_integer() else settings.alpha
    return stage_directory(cfg, root, "gandr", {"k": settings.k, "p": settings.p, "alpha": alpha,
                                                "folds": settings.folds, "continue_steps": settings.continue_steps})


def check_settings(settings: DictConfig, train: list[Example], formalism: Formalism, data: str) -> None:
    """Refuse, before any training, settings that cannot work on this training set."""
    name, k, p, alpha, folds = settings.name, settings.k, settings.p, settings.alpha, settings.folds
    if name not in METHODS:
        raise RetrievalError(f"retrieval={name!r}: choose one of {', '.join(METHODS)}")
    if not isinstance(k, int) or k < 1:
        raise RetrievalError(f"retrieval.k={k!r}: expected a positive number of exemplars")
    if k > len(train) - 1:
        raise RetrievalError(f"retrieval.k={k}, but {data} has {len(train)} training examples and an example never "
                             f"retrieves itself: at most {len(train) - 1}")
    if not 0 < p <= 1:
        raise RetrievalError(f"retrieval.p={p}: the sampling parameter must be in (0, 1]")
    if not 0 <= alpha <= 1:
        raise RetrievalError(f"retrieval.alpha={alpha}: the weight of output similarity must be in [0, 1]")
    if name != "gandr":
        return
    try:
        formalism.structure(train[0].program)
    except FormalismError as e:
        raise RetrievalError(f"retrieval=gandr on {data}: {e}; output similarity needs it (use retrieval=input)")
    if folds is not None:
        if not isinstance(folds, int) or folds < 2:
            raise RetrievalError(f"retrieval.folds={folds!r}: expected at least 2 (or null: no held-out models)")
        smallest_pool = len(train) - math.ceil(len(train) / folds)  # the training set less its largest part
        if smallest_pool < k + 1:
            raise RetrievalError(f"retrieval.folds={folds}: a fold model of {data} would train on {smallest_pool} "
                                 f"examples, too few to retrieve k={k} exemplars")
    if settings.continue_steps is not None and settings.continue_steps < 1:
        raise RetrievalError(f"retrieval.continue_steps={settings.continue_steps}: expected a positive step count")


def run_retrieval(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    """``retrieval=input``: stage 1; ``retrieval=gandr``: stage 1, the fold models, stage 2. Records one row."""
    from zoo.registry import get_dataset
    from zoo.train import RunConfigError, git_commit, record, rows_before_training

    if cfg.model.name != "seq2seq":
        raise RunConfigError(f"retrieval={cfg.retrieval.name} augments seq2seq inputs: use model=seq2seq (or "
                             f"model=bert2bert_minilm), not model={cfg.model.name}")
    formalism = get_formalism(get_dataset(cfg.data.name).formalism)
    commit = git_commit()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    datamodule = prepared_data(cfg)
    train, val, test = datamodule.train, datamodule.val, datamodule.test
    settings = cfg.retrieval
    check_settings(settings, train, formalism, cfg.data.name)
    if settings.name == "gandr" and (recall := template_recall_path(cfg.results_file)):
        rows_before_training(recall)  # its row comes between the stages
    k, p, root = settings.k, settings.p, settings.stages_dir
    batch_size = cfg.data.eval_batch_size or cfg.data.batch_size

    first = Exemplars(train, None, k, p, cfg.seed)
    stage1_dir = stage_directory(cfg, root, "input", {"k": k, "p": p})
    stage_rows, stage_dirs = [run_stage(cfg, "input", stage1_dir, first)], [stage1_dir]
    details: dict[str, Any] = {"settings": OmegaConf.to_container(settings, resolve=True)}
    test_seconds = len(test) / max(float(stage_rows[0]["test_examples_per_s"]), 1e-9)
    preliminary = None
    if settings.name == "gandr":
        folds = settings.folds
        fold_dirs = []
        for f, part in enumerate(fold_parts(len(train), folds, cfg.seed) if folds else []):
            held = set(part)
            rewrite = Exemplars([e for i, e in enumerate(train) if i not in held], None, k, p, cfg.seed)
            fold_dir = stage_directory(cfg, root, f"input-fold{f + 1}of{folds}", {"k": k, "p": p})
            stage_rows.append(run_stage(cfg, f"input-fold{f + 1}of{folds}", fold_dir, rewrite))
            stage_dirs.append(fold_dir)
            fold_dirs.append((fold_dir, part, rewrite))
        preliminary, seconds = preliminary_predictions(stage1_dir, first, fold_dirs, train, val, test, batch_size)
        details["template_recall"] = {
            "data": cfg.data.name, "subsample": (cfg.get("subsample") or "").lstrip("-"), "split": "val",
            "n": len(val), "k": k, "alpha": settings.alpha, "seed": cfg.seed, "protocol": cfg.get("protocol") or "",
            **template_recalls(train, val, formalism, k, preliminary["val"], settings.alpha)}
        record_template_recall(cfg.results_file, details["template_recall"])
        hybrid = Exemplars(train, formalism, k, p, cfg.seed, settings.alpha, preliminary)
        stage2_dir = gandr_stage_directory(cfg, root, settings)
        stage_rows.append(run_stage(cfg, "gandr", stage2_dir, hybrid, init_from=str(stage_checkpoint(stage1_dir)),
                                    max_steps=settings.continue_steps))
        stage_dirs.append(stage2_dir)
        test_seconds = seconds + len(test) / max(float(stage_rows[-1]["test_examples_per_s"]), 1e-9)

    predictions = read_predictions(stage_dirs[-1] / "predictions.jsonl")
    for row, guess in zip(predictions, preliminary["test"] if preliminary else ()):
        row["preliminary"] = guess
    write_jsonl(run_dir / "predictions.jsonl", predictions)
    details["stage_dirs"] = [str(d) for d in stage_dirs]
    (run_dir / "retrieval.json").write_text(json.dumps(details, indent=1))

    final = stage_rows[-1]
    row = combined_row(run_identity(cfg), stage_rows, stage_dirs, run_dir, commit, len(train), len(test),
                       test_seconds)
    row.update(test_metrics(final))
    if preliminary:
        row["test_stage1_exact_match"] = float(stage_rows[0]["test_exact_match"])
    record(cfg, run_dir, row)
    log.info("retrieval=%s test exact match %.4f; predictions in %s", settings.name, row["test_exact_match"],
             run_dir / "predictions.jsonl")
    return row


def preliminary_predictions(stage1_dir: Path, first: Exemplars, fold_dirs: list[tuple[Path, list[int], Exemplars]],
                            train: list[Example], val: list[Example], test: list[Example], batch_size: int
                            ) -> tuple[dict[str, list[str]], float]:
    """Stage 1's predictions on val and test, and held-out predictions on train (each fold model on its part, or
    with no folds M1 on its own training examples); with the seconds spent on test. Kept in the stage directories
    (``cache-*.json``), which ``run_stage`` clears when it retrains a stage."""
    def cached(directory: Path, name: str, make) -> tuple[list[str], float]:
        path = directory / f"cache-{name}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            return saved["outputs"], saved["seconds"]
        start = time.perf_counter()
        outputs = make()
        seconds = time.perf_counter() - start
        with atomic_path(path) as tmp:  # a run killed here leaves no half-written cache
            tmp.write_text(json.dumps({"outputs": outputs, "seconds": seconds}))
        return outputs, seconds

    models = {}  # each stage's model, loaded once for all the splits it predicts

    def outputs(directory: Path, examples: list[Example]) -> list[str]:
        if directory not in models:
            models[directory] = load_stage_model(directory)
        return predict(models[directory], [e.utterance for e in examples], batch_size)

    result = {"val": cached(stage1_dir, "val", lambda: outputs(stage1_dir, first.top("val", val)))[0]}
    result["test"], test_seconds = cached(stage1_dir, "test", lambda: outputs(stage1_dir, first.top("test", test)))
    if not fold_dirs:
        result["train"] = cached(stage1_dir, "train", lambda: outputs(stage1_dir, first.top("train", train)))[0]
        return result, test_seconds
    held_out: list[str] = [""] * len(train)
    for fold_dir, part, rewrite in fold_dirs:
        part_outputs = cached(fold_dir, "heldout",
                              lambda: outputs(fold_dir, rewrite.top("heldout", [train[i] for i in part])))[0]
        for i, output in zip(part, part_outputs):
            held_out[i] = output
    result["train"] = held_out
    return result, test_seconds


def template_recalls(train: list[Example], queries: list[Example], formalism: Formalism, k: int,
                     preliminary: list[str] | None = None, alpha: float = 0.5) -> dict[str, float]:
    """Template recall@k (§4.3, Table 4) of input, output (oracle: the gold program as the prediction) and, given
    the queries' ``preliminary`` predictions, hybrid retrieval from ``train``."""
    retriever = Retriever(train, formalism)
    utterances = [e.utterance for e in queries]
    rankings = {"input": retriever.ranked(utterances, depth=k),
                "output_oracle": retriever.ranked(utterances, [e.program for e in queries], 1.0, depth=k)}
    if preliminary is not None:
        rankings["hybrid"] = retriever.ranked(utterances, preliminary, alpha, depth=k)
    return {f"recall_{name}": round(template_recall(r, queries, train, formalism, k), 4)
            for name, r in rankings.items()}


def template_recall_path(results_file: str | None) -> Path | None:
    """``template_recall.csv`` beside the results file; None without one (debug=smoke)."""
    from zoo.train import REPO_ROOT

    if not results_file:
        return None
    results = Path(results_file).parent
    return (results if results.is_absolute() else REPO_ROOT / results) / "template_recall.csv"


def record_template_recall(results_file: str | None, row: dict[str, Any]) -> None:
    """Append a row of template recalls to ``template_recall.csv`` beside the results file (none for debug=smoke),
    replacing the earlier row of the same dataset, subsample, k, alpha, seed and protocol (hybrid recall depends on
    the stage-1 model that the protocol trains; the rows of the ``recall`` command have none)."""
    if path := template_recall_path(results_file):
        append_row(path, row, replacing=("data", "subsample", "k", "alpha", "seed", "protocol"))


def data_entry(entry: str) -> tuple[str, dict[str, int]]:
    """``atis_sql_iid:train_limit=1000`` -> ("atis_sql_iid", {"train_limit": 1000}): a ``--data`` entry of
    ``python -m zoo.retrieval recall``; an option that is not one of ``ParsingDataModule``'s integers is an
    OptionError naming it."""
    from datamodules import ParsingDataModule

    name, *options = entry.split(":")
    data_options = {}
    for option in options:
        key, _, value = option.partition("=")
        try:
            data_options[key] = int(value)
        except ValueError:
            raise OptionError(f"--data {entry}: expected option=integer after the dataset's name, e.g. "
                              f"{name}:train_limit=1000") from None
    check_against_constructor(data_options, "data", ParsingDataModule)
    return name, data_options


def main(argv: list[str] | None = None) -> None:
    """``python -m zoo.retrieval recall``: template recall@k of input and oracle-output retrieval, no training."""
    import argparse
    import sys

    from datamodules import DATA_ERRORS, ParsingDataModule
    from zoo import subsample_suffix
    from zoo.registry import RegistryError, get_dataset
    from zoo.results import ResultsFileError, check_appendable, runs_file

    parser = argparse.ArgumentParser(prog="python -m zoo.retrieval", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    recall = commands.add_parser("recall", help="template recall@k on each dataset's validation split")
    recall.add_argument("--data", nargs="+", required=True,
                        help="registry names, each optionally with data options: atis_sql_iid:train_limit=1000")
    recall.add_argument("--k", type=int, default=4)
    recall.add_argument("--results", default=str(runs_file()),
                        help="template_recall.csv is written beside this file (default: $ZOO_RESULTS, else "
                             "results/runs.csv); '' writes nothing")
    args = parser.parse_args(argv)
    try:
        check_appendable(template_recall_path(args.results))
        # every entry checked before the first is measured: its name, its options and their ranges
        entries = [(name, options, ParsingDataModule(name, **options), get_dataset(name).formalism)
                   for name, options in map(data_entry, args.data)]
        for name, data_options, datamodule, formalism in entries:
            datamodule.setup()
            row = {"data": name, "subsample": subsample_suffix(data_options.get("train_limit"),
                                                         data_options.get("train_limit_seed", 0),
                                                         data_options.get("limit_train"),
                                                         data_options.get("limit_eval")).lstrip("-"),
                   "split": "val", "n": len(datamodule.val), "k": args.k, "alpha": "", "seed": "", "protocol": "",
                   **template_recalls(datamodule.train, datamodule.val, get_formalism(formalism), args.k)}
            record_template_recall(args.results, row)
            print(", ".join(f"{key} {value}" for key, value in row.items()))
    except (ResultsFileError, RegistryError, OptionError, *DATA_ERRORS) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
