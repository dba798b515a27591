"""How fast SpanBasedSP's CKY decodes (Herzig & Berant 2021, §3.2): time per sentence against its length.

Two measurements, both after the encoder pass (the span scores are computed first and timed apart):

* a trained checkpoint on a dataset's test set: per sentence, the K-best chart (``models.cky.parse``) and the search
  for the best tree whose program composes (``SpanBasedParser.decode``), grouped by sentence length; and the whole
  test set's decoding time (the issue's bar: GeoQuery's 280 test sentences in under 10 s on this CPU);
* synthetic sentences longer than the data has: random span scores over the checkpoint's Σ, the chart alone and
  the chart with the search.

    python benchmarks/span_cky_speed.py runs/span_cky-spanbasedsp/geo_funql_iid/seed1/checkpoints/best.ckpt

Before and after a change to ``models/cky.py``: ``--against REV`` times the file as of git revision REV as well,
on the same span scores. Per sentence the two alternate (and which goes first alternates too), each length is
decoded once by both before its timings count (caches filled), and torch runs one thread unless ``--threads`` says
otherwise, so that a loaded machine slows both alike. The rows then hold REV's times too (``old_*``), the speed-ups
(old / new) and the number of sentences whose best trees score differently, which should be none (both are exact
K-best CKY), or whose decoded programs differ (ties between trees may do that).

    python benchmarks/span_cky_speed.py CHECKPOINT --against HEAD~1 --out /tmp/span_cky_speed_against.csv

It rewrites ``results/span_cky_speed.csv`` (atomically, ``zoo.results.write_rows``): one row per (source, length)
and one ``all`` row per source; times in milliseconds unless the column says seconds.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
import types
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.threads import use_passive_waiting  # noqa: E402

use_passive_waiting()  # measure what runs do (zoo/threads.py)
import torch  # noqa: E402

import models.span_cky as span_cky  # noqa: E402
from datamodules import read_splits  # noqa: E402
from zoo.parser import Parser  # noqa: E402
from zoo.results import results_table, write_rows  # noqa: E402
from zoo.launch import USER_ERRORS  # noqa: E402

NEW, OLD = "new", "old"  # the checkout's models/cky.py, and --against's


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def load_cky(revision: str) -> types.ModuleType:
    """``models/cky.py`` as of git ``revision``, as a module of its own (the checkout's stays ``models.cky``)."""
    shown = subprocess.run(["git", "show", f"{revision}:models/cky.py"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode:
        sys.exit(f"error: --against {revision}: {shown.stderr.strip()}")
    module = types.ModuleType("cky_at_" + re.sub(r"\W", "_", revision))
    module.__file__ = f"{revision}:models/cky.py"
    sys.modules[module.__name__] = module  # dataclasses look up the module of the classes they decorate
    exec(compile(shown.stdout, module.__file__, "exec"), module.__dict__)
    return module


@contextmanager
def using(cky: types.ModuleType) -> Iterator[None]:
    """``SpanBasedParser``'s chart and search (``_chart``, ``decode``) with ``cky`` as their ``models.cky``."""
    saved, span_cky.cky = span_cky.cky, cky
    try:
        yield
    finally:
        span_cky.cky = saved


class Timing(NamedTuple):
    """One sentence decoded by one version of models/cky.py."""

    chart_s: float  # the chart alone
    decode_s: float  # chart + search (SpanBasedParser.decode)
    best: float | None  # the best tree's score (None: no tree)
    program: str  # what decode returned


class Timer:
    """Times sentences with each version of models/cky.py in ``versions`` ({NEW: ..., OLD: ...}), alternating
    which goes first, after an untimed warm-up of each version on the first sentence of every length."""

    def __init__(self, model, versions: dict[str, types.ModuleType]):
        self.model, self.versions = model, versions
        self.warm: set[int] = set()
        self.sentences = 0

    def one(self, cky: types.ModuleType, scores: torch.Tensor, n: int, constraints: dict | None) -> Timing:
        with using(cky):
            chart, chart_seconds = timed(self.model._chart, scores, n, constraints)
            (program, _), decode_seconds = timed(self.model.decode, scores, n, constraints)
            best = next(chart.trees(), None)
        return Timing(chart_seconds, decode_seconds, None if best is None else best[0], program)

    def __call__(self, scores: torch.Tensor, n: int, constraints: dict | None = None) -> dict[str, Timing]:
        if n not in self.warm:  # layouts and tables are cached per length: fill them before timing
            for cky in self.versions.values():
                self.one(cky, scores, n, constraints)
            self.warm.add(n)
        names = list(self.versions)[::-1 if self.sentences % 2 else 1]
        self.sentences += 1
        return {name: self.one(self.versions[name], scores, n, constraints) for name in names}


Timings = dict[str, dict[int, list[Timing]]]  # version -> length -> one Timing per sentence


def measure_test_set(timer: Timer, examples: list, batch_size: int) -> tuple[Timings, float]:
    """Per test sentence the Timings of each version, by length, and the encoder pass's seconds."""
    model = timer.model
    featurizer = model.featurizer
    timings: Timings = {name: defaultdict(list) for name in timer.versions}
    encoder_seconds = 0.0
    for start in range(0, len(examples), batch_size):
        batch = featurizer.collate([featurizer.encode(e) for e in examples[start:start + batch_size]])
        scores, seconds = timed(model, batch)
        encoder_seconds += seconds
        for example, n in enumerate(batch["lengths"].tolist()):
            for name, timing in timer(scores[example], n, batch["constraints"][example]).items():
                timings[name][n].append(timing)
    return timings, encoder_seconds


def measure_synthetic(timer: Timer, lengths: list[int], repeats: int) -> Timings:
    generator = torch.Generator().manual_seed(0)
    categories = len(timer.model.featurizer.categories) + 2
    timings: Timings = {name: defaultdict(list) for name in timer.versions}
    for n in lengths:
        for _ in range(repeats):
            scores = torch.randn(n + 1, n + 1, categories, generator=generator)
            for name, timing in timer(scores, n).items():
                timings[name][n].append(timing)
    return timings


def length_rows(source: str, timings: Timings, common: dict) -> list[dict]:
    """One row per length and an ``all`` row: sentences, mean and max ms of the chart and of chart + search; with
    an OLD version, its means too, the speed-ups and the sentences where the two disagree."""
    rows = []
    new, old = timings[NEW], timings.get(OLD)
    pairs = {n: list(zip(new[n], old[n] if old else new[n])) for n in sorted(new)}  # (new, old) per sentence
    for length, sentences in [*pairs.items(), ("all", [pair for n in pairs for pair in pairs[n]])]:
        charts, totals = [1000 * t.chart_s for t, _ in sentences], [1000 * t.decode_s for t, _ in sentences]
        row = {"source": source, "length": length, "sentences": len(sentences),
               "chart_ms_mean": round(statistics.mean(charts), 2),
               "decode_ms_mean": round(statistics.mean(totals), 2), "decode_ms_max": round(max(totals), 2),
               "decode_s_total": round(sum(totals) / 1000, 3)}
        if old:
            old_chart = statistics.mean(1000 * t.chart_s for _, t in sentences)
            old_decode = statistics.mean(1000 * t.decode_s for _, t in sentences)
            row.update(old_chart_ms_mean=round(old_chart, 2), old_decode_ms_mean=round(old_decode, 2),
                       chart_speedup=round(old_chart / statistics.mean(charts), 2),
                       decode_speedup=round(old_decode / statistics.mean(totals), 2),
                       best_score_mismatches=sum(a.best != b.best for a, b in sentences),
                       program_mismatches=sum(a.program != b.program for a, b in sentences))
        rows.append({**row, **common})
    return rows


def mismatches(source: str, timings: Timings) -> list[str]:
    """A line per sentence whose best tree scores differently under the two versions."""
    if OLD not in timings:
        return []
    return [f"{source}, length {n}, sentence {i}: best tree {old.best} with the old models/cky.py, {new.best} now"
            for n in sorted(timings[NEW])
            for i, (new, old) in enumerate(zip(timings[NEW][n], timings[OLD][n])) if new.best != old.best]


def print_rows(rows: list[dict]) -> None:
    if "old_chart_ms_mean" not in rows[0]:
        for row in rows:
            print(f"{row['source']:>22} length {row['length']!s:>3}: {row['sentences']:>4} sentences, chart "
                  f"{row['chart_ms_mean']:8.2f} ms, decode {row['decode_ms_mean']:8.2f} ms "
                  f"(max {row['decode_ms_max']:.2f})")
        return
    print(f"old: models/cky.py at {rows[0]['against']}; new: the checkout's. Means in ms; x = old / new")
    print(f"{'source':>22} {'length':>6} {'sentences':>9} | {'chart old':>9} {'new':>8} {'x':>6} | "
          f"{'decode old':>10} {'new':>8} {'x':>6} | best-score mismatches")
    for row in rows:
        print(f"{row['source']:>22} {row['length']!s:>6} {row['sentences']:>9} | {row['old_chart_ms_mean']:9.2f} "
              f"{row['chart_ms_mean']:8.2f} {row['chart_speedup']:6.2f} | {row['old_decode_ms_mean']:10.2f} "
              f"{row['decode_ms_mean']:8.2f} {row['decode_speedup']:6.2f} | {row['best_score_mismatches']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a span_cky checkpoint (best.ckpt of a run directory)")
    parser.add_argument("--data", default=None, help="dataset whose test set is decoded (default: the run's, "
                                                     "read from the checkpoint path runs/<model>/<data>/...)")
    parser.add_argument("--sentences", type=int, default=None, help="decode only the first this many test "
                                                                     "sentences (default: all)")
    parser.add_argument("--lengths", type=int, nargs="*", default=[10, 20, 30, 40, 50], help="synthetic lengths")
    parser.add_argument("--repeats", type=int, default=5, help="synthetic sentences per length")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--against", metavar="REV", default=None,
                        help="also time models/cky.py as of this git revision, alternating with the checkout's on "
                             "the same scores, and compare their best trees")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's own, or 1 with --against)")
    parser.add_argument("--out", default=str(results_table("span_cky_speed.csv")))
    args = parser.parse_args(argv)
    checkpoint = Path(args.checkpoint)
    if not checkpoint.is_file():
        parser.error(f"no checkpoint at {checkpoint}")
    run_path = checkpoint.absolute().parents
    data = args.data or (run_path[2].name if len(run_path) > 2 else "")
    try:
        test = read_splits(data)["test"][:args.sentences]  # before the model loads: a wrong dataset is said at once
    except USER_ERRORS as e:
        sys.exit(f"error: {e}" + ("" if args.data else " (the dataset named by the checkpoint's path; --data gives "
                                                       "another)"))
    versions = {NEW: span_cky.cky, **({OLD: load_cky(args.against)} if args.against else {})}
    try:
        model = Parser.load(str(checkpoint))
    except USER_ERRORS as e:  # not a checkpoint of this zoo
        sys.exit(f"error: {e}")
    if model.model_name != "span_cky":
        parser.error(f"{checkpoint} is a {model.model_name!r} checkpoint; this benchmark times span_cky")
    threads = args.threads or (1 if args.against else None)
    if threads:
        torch.set_num_threads(threads)
    common = {"checkpoint": str(checkpoint), "encoder": model.backbone, "k": model.hparams.k,
              "ternary": model.hparams.ternary, "sigma": len(model.featurizer.categories),
              "torch_threads": torch.get_num_threads(), **({"against": args.against} if args.against else {})}
    timer = Timer(model, versions)
    with torch.no_grad():
        timings, encoder_seconds = measure_test_set(timer, test, args.batch_size)
        synthetic = measure_synthetic(timer, args.lengths, args.repeats)
    rows = length_rows(f"{data} test", timings, {**common, "encoder_s_total": round(encoder_seconds, 3)})
    rows += length_rows("synthetic", synthetic, common)
    write_rows(args.out, rows)
    print_rows(rows)
    total = next(r for r in rows if r["length"] == "all")
    print(f"{data} test: {total['sentences']} sentences decoded in {total['decode_s_total']:.2f} s after an encoder "
          f"pass of {encoder_seconds:.2f} s; wrote {len(rows)} rows to {args.out}")
    if args.against:
        differ = mismatches(f"{data} test", timings) + mismatches("synthetic", synthetic)
        print("\n".join(differ) if differ else f"every best tree scores the same with models/cky.py at "
                                                 f"{args.against} and now")
    return 0


if __name__ == "__main__":
    sys.exit(main())
