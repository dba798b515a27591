"""How fast SpanBasedSP's CKY decodes (Herzig & Berant 2021, §3.2): time per sentence against its length.

Two measurements, both after the encoder pass (the span scores are computed first and timed apart):

* a trained checkpoint on a dataset's test set: per sentence, the K-best chart (``models.cky.parse``) and the search
  for the best tree whose program composes (``SpanBasedParser.decode``), grouped by sentence length; and the whole
  test set's decoding time (the issue's bar: GeoQuery's 280 test sentences in under 10 s on this CPU);
* synthetic sentences longer than the data has: random span scores over the checkpoint's Σ, the chart alone and
  the chart with the search.

    python benchmarks/span_cky_speed.py runs/span_cky-spanbasedsp/geo_funql_iid/seed1/checkpoints/best.ckpt

It rewrites ``results/span_cky_speed.csv`` (atomically, ``zoo.results.write_rows``): one row per (source, length)
and one ``all`` row per source; times in milliseconds unless the column says seconds.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.threads import use_passive_waiting  # noqa: E402

use_passive_waiting()  # measure what runs do (zoo/threads.py)
import torch  # noqa: E402

from datamodules import read_splits  # noqa: E402
from zoo.parser import Parser  # noqa: E402
from zoo.results import results_table, write_rows  # noqa: E402
from zoo.launch import USER_ERRORS  # noqa: E402


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def length_rows(source: str, timings: dict[int, list[tuple[float, float]]], common: dict) -> list[dict]:
    """One row per length and an ``all`` row: sentences, mean and max ms of the chart and of chart + search."""
    rows = []
    every = [t for length in sorted(timings) for t in timings[length]]
    for length, times in [*((n, timings[n]) for n in sorted(timings)), ("all", every)]:
        charts, totals = [1000 * c for c, _ in times], [1000 * t for _, t in times]
        rows.append({"source": source, "length": length, "sentences": len(times),
                     "chart_ms_mean": round(statistics.mean(charts), 2),
                     "decode_ms_mean": round(statistics.mean(totals), 2), "decode_ms_max": round(max(totals), 2),
                     "decode_s_total": round(sum(totals) / 1000, 3), **common})
    return rows


def measure_test_set(model, examples: list, batch_size: int) -> tuple[dict[int, list[tuple[float, float]]], float]:
    """Per test sentence (chart seconds, chart + search seconds) by length, and the encoder pass's seconds."""
    featurizer = model.featurizer
    timings: dict[int, list[tuple[float, float]]] = defaultdict(list)
    encoder_seconds = 0.0
    for start in range(0, len(examples), batch_size):
        batch = featurizer.collate([featurizer.encode(e) for e in examples[start:start + batch_size]])
        scores, seconds = timed(model, batch)
        encoder_seconds += seconds
        for example, n in enumerate(batch["lengths"].tolist()):
            constraints = batch["constraints"][example]
            _, chart_seconds = timed(model._chart, scores[example], n, constraints)
            _, decode_seconds = timed(model.decode, scores[example], n, constraints)
            timings[n].append((chart_seconds, decode_seconds))
    return timings, encoder_seconds


def measure_synthetic(model, lengths: list[int], repeats: int) -> dict[int, list[tuple[float, float]]]:
    generator = torch.Generator().manual_seed(0)
    categories = len(model.featurizer.categories) + 2
    timings: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for n in lengths:
        for _ in range(repeats):
            scores = torch.randn(n + 1, n + 1, categories, generator=generator)
            _, chart_seconds = timed(model._chart, scores, n)
            _, decode_seconds = timed(model.decode, scores, n)
            timings[n].append((chart_seconds, decode_seconds))
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a span_cky checkpoint (best.ckpt of a run directory)")
    parser.add_argument("--data", default=None, help="dataset whose test set is decoded (default: the run's, "
                                                     "read from the checkpoint path runs/<model>/<data>/...)")
    parser.add_argument("--lengths", type=int, nargs="*", default=[10, 20, 30, 40, 50], help="synthetic lengths")
    parser.add_argument("--repeats", type=int, default=5, help="synthetic sentences per length")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", default=str(results_table("span_cky_speed.csv")))
    args = parser.parse_args(argv)
    checkpoint = Path(args.checkpoint)
    if not checkpoint.is_file():
        parser.error(f"no checkpoint at {checkpoint}")
    run_path = checkpoint.absolute().parents
    data = args.data or (run_path[2].name if len(run_path) > 2 else "")
    try:
        test = read_splits(data)["test"]  # before the model loads: a wrong dataset is said at once
    except USER_ERRORS as e:
        sys.exit(f"error: {e}" + ("" if args.data else " (the dataset named by the checkpoint's path; --data gives "
                                                       "another)"))
    try:
        model = Parser.load(str(checkpoint))
    except USER_ERRORS as e:  # not a checkpoint of this zoo
        sys.exit(f"error: {e}")
    if model.model_name != "span_cky":
        parser.error(f"{checkpoint} is a {model.model_name!r} checkpoint; this benchmark times span_cky")
    common = {"checkpoint": str(checkpoint), "encoder": model.backbone, "k": model.hparams.k,
              "ternary": model.hparams.ternary, "sigma": len(model.featurizer.categories),
              "torch_threads": torch.get_num_threads()}
    with torch.no_grad():
        timings, encoder_seconds = measure_test_set(model, test, args.batch_size)
        rows = length_rows(f"{data} test", timings, {**common, "encoder_s_total": round(encoder_seconds, 3)})
        rows += length_rows("synthetic", measure_synthetic(model, args.lengths, args.repeats), common)
    write_rows(args.out, rows)
    for row in rows:
        print(f"{row['source']:>22} length {row['length']!s:>3}: {row['sentences']:>4} sentences, chart "
              f"{row['chart_ms_mean']:8.2f} ms, decode {row['decode_ms_mean']:8.2f} ms (max {row['decode_ms_max']:.2f})")
    total = next(r for r in rows if r["length"] == "all")
    print(f"{data} test: {total['sentences']} sentences decoded in {total['decode_s_total']:.2f} s after an encoder "
          f"pass of {encoder_seconds:.2f} s; wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
