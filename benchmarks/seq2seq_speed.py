"""How fast the seq2seq backbone trains and decodes here, and what share of the machine's matmul rate that is.

    python benchmarks/seq2seq_speed.py                                    # the CPU recipe on scan_simple
    python benchmarks/seq2seq_speed.py data=cfq_mcd1 --steps 20           # any run.py override
    python benchmarks/seq2seq_speed.py debug=smoke --out /tmp/speed.csv   # seconds (what the test runs)
    python benchmarks/seq2seq_speed.py --checkpoint runs/seq2seq-baseline/scan_simple/seed1/checkpoints/best.ckpt

Measured on the run's data and model settings (``experiment=seq2seq_scratch_cpu`` unless overridden):

* ``matmul_gflops`` (a column of every row): the machine's fp32 matmul rate, ``torch.mm`` of two square matrices at
  torch's thread count, the best of a few repetitions: the ceiling the other numbers are a share of.
* ``train``: optimiser steps (forward, backward, AdamW) on training batches, once length-bucketed and once at random
  (``data.bucket_by_length``), after a few warm-up steps.
* ``decode``: greedy decoding (``Seq2Seq.parse``) of the validation examples. Decoding stops at </s>, so it is
  measured best on a trained checkpoint (``--checkpoint``); untrained weights decode to the length limit.

Floating-point operations are counted by ``torch.utils.flop_counter`` on the same batches (matmuls and attention:
the work that costs), so ``flops_share`` is the achieved FLOP/s over the measured matmul FLOP/s (padding positions
count as work done). Each row replaces the earlier row of the same (phase, data, backbone, weights, batch,
bucketing, threads, hardware) in ``results/seq2seq_speed.csv``.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.threads import use_passive_waiting  # noqa: E402

use_passive_waiting()  # measure what runs do (zoo/threads.py)
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.errors import CompactHydraException  # noqa: E402

from zoo.parser import Parser  # noqa: E402
from zoo.registry import get_dataset, get_model  # noqa: E402
from zoo.results import append_row, check_appendable, results_table  # noqa: E402
from zoo.speed import counted_flops, flops_share, matmul_flops_per_s  # noqa: E402
from zoo.stages import prepared_data  # noqa: E402
from zoo.launch import USER_ERRORS  # noqa: E402
from zoo.train import hardware_string, model_settings  # noqa: E402

DEFAULT_OVERRIDES = ["experiment=seq2seq_scratch_cpu", "data=scan_simple"]
KEY = ("phase", "data", "backbone", "weights", "batch_size", "bucketed", "threads", "hardware")


def composed(overrides: list[str]):
    """The run configuration of ``overrides`` on top of this benchmark's defaults."""
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("run", overrides=[*DEFAULT_OVERRIDES, *overrides])
    if cfg.model.name != "seq2seq":
        sys.exit(f"error: model={cfg.model.name}: this benchmark measures the seq2seq backbone")
    return cfg


def model_and_data(cfg, checkpoint: Path | None = None):
    """The run's datamodule and its seq2seq model: fresh weights, or ``checkpoint``'s."""
    torch.manual_seed(cfg.seed)
    datamodule = prepared_data(cfg)
    if checkpoint:
        model = Parser.load(str(checkpoint))
    else:
        params, featurizer = model_settings(cfg)
        model = get_model("seq2seq").build(datamodule.train, get_dataset(cfg.data.name).formalism,
                                           featurizer=featurizer, **params)
    datamodule.attach(model.featurizer)
    return model, datamodule


def train_speed(model, loader, steps: int, warmup: int, count_flops: bool = True) -> tuple[int, float, int]:
    """(examples, seconds, flops) of ``steps`` optimiser steps after ``warmup`` untimed ones (flops 0 unless
    ``count_flops``)."""
    network = model.network.train()
    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-4)

    def step(batch):
        network(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss \
            .backward()
        optimizer.step()
        optimizer.zero_grad()

    batches = list(itertools.islice(itertools.cycle(loader), warmup + steps))
    for batch in batches[:warmup]:
        step(batch)
    measured = batches[warmup:]
    start = time.perf_counter()
    for batch in measured:
        step(batch)
    seconds = time.perf_counter() - start
    flops = 0
    for batch in measured if count_flops else ():  # counted apart: the counter slows what it watches
        flops += counted_flops(lambda: network(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                               labels=batch["labels"]).loss.backward())
        optimizer.zero_grad()
    return sum(len(b["input_ids"]) for b in measured), seconds, flops


def decode_speed(model, loader) -> tuple[int, float, int]:
    """(examples, seconds, flops) of greedy decoding every batch of ``loader``."""
    model.eval()
    batches = list(loader)
    start = time.perf_counter()
    for batch in batches:
        model.parse(batch)
    seconds = time.perf_counter() - start
    flops = sum(counted_flops(lambda: model.parse(batch)) for batch in batches)
    return sum(len(b["input_ids"]) for b in batches), seconds, flops


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="timed training steps per batching")
    parser.add_argument("--warmup", type=int, default=5, help="untimed training steps first")
    parser.add_argument("--out", type=Path, default=results_table("seq2seq_speed.csv"))
    parser.add_argument("--checkpoint", type=Path, help="a trained seq2seq checkpoint to measure instead of fresh "
                        "weights (an untrained decoder runs every output to the length limit)")
    args, overrides = parser.parse_known_args(argv)
    if args.checkpoint and not args.checkpoint.is_file():
        parser.error(f"no checkpoint at {args.checkpoint}")
    try:
        cfg = composed(overrides)
        check_appendable(args.out)
        model, datamodule = model_and_data(cfg, args.checkpoint)
    except (CompactHydraException, *USER_ERRORS) as e:  # data=no_such_dataset, data files missing...
        sys.exit(f"error: {e}")

    peak = matmul_flops_per_s()
    common = {"data": cfg.data.name, "backbone": model.backbone, "weights": str(args.checkpoint or "untrained"),
              "params": sum(p.numel() for p in model.parameters()),
              "threads": torch.get_num_threads(),
              "hardware": hardware_string(),
              "matmul_gflops": round(peak / 1e9, 2)}
    rows = []

    def row(phase: str, batch_size: int, bucketed: bool | str, measured: tuple[int, float, int]) -> None:
        examples, seconds, flops = measured
        rows.append({"phase": phase, "batch_size": batch_size, "bucketed": bucketed, **common,
                     "examples": examples, "seconds": round(seconds, 3),
                     "examples_per_s": round(examples / seconds, 1),
                     "gflops_per_example": round(flops / max(examples, 1) / 1e9, 4),
                     "achieved_gflops": round(flops / seconds / 1e9, 2),
                     "flops_share": flops_share(flops, seconds, peak)})

    for bucketed in (True, False):
        datamodule.bucket_by_length = bucketed
        row("train", datamodule.batch_size, bucketed,
            train_speed(model, datamodule.train_dataloader(), args.steps, args.warmup))
    row("decode", datamodule.eval_batch_size, "", decode_speed(model, datamodule.val_dataloader()))
    for r in rows:
        append_row(args.out, r, replacing=KEY)
        print(f"{r['phase']:6} bucketed={str(r['bucketed']):5} batch {r['batch_size']:4}: "
              f"{r['examples_per_s']:8.1f} examples/s, {r['achieved_gflops']:6.2f} GFLOP/s = "
              f"{100 * r['flops_share']:.1f}% of the {r['matmul_gflops']} GFLOP/s matmul rate")
    return rows


if __name__ == "__main__":
    main()
