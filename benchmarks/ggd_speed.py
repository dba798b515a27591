"""Where a GGD training step spends its time on this machine, its examples/s, and its share of the matmul rate.

    python benchmarks/ggd_speed.py                                  # experiment=ggd_cfq (3 x 64) at batch 512, cfq_mcd1
    python benchmarks/ggd_speed.py --batch-size 128 --steps 20 model.params.hidden_size=64  # any run.py override
    python benchmarks/ggd_speed.py debug=smoke --batch-size 8 --steps 2 --out /tmp/speed.csv  # what the test runs

The training split's first ``(warmup + steps) x batch`` examples (in a seeded random order; whole pools of
``data.bucket_pool_batches`` batches with ``data.bucket_by_length``, batched as a training run batches them) are
encoded once (``encode``: the first epoch's featurisation, per example; later epochs reuse it), then ``steps``
optimiser steps are timed phase by phase, after ``warmup`` untimed ones:

* ``collate``: ``GGDFeaturizer.collate`` of the encoded examples into tensors, what the dataloader does on every
  step;
* ``forward``: ``GroundedGraphDecoder.loss`` (encoder, grounding, every candidate triple's score, Eq. 2);
* ``backward`` and ``optimizer`` (AdamW).

``validate`` times the scoring and decoding (at the configured threshold) of as many validation examples, in
batches of ``data.eval_batch_size``, without the exact-match comparison. Floating-point operations are counted by
``torch.utils.flop_counter`` on one step, so ``flops_share`` is the achieved FLOP/s over the measured fp32 matmul
FLOP/s (``zoo.speed``); ``lstm_share`` is the LSTM kernels' share of a step's time (``torch.profiler``). Each row
replaces the earlier row of the same (data, backbone, batch, bucketed, encoder chunks, precision, threads, hardware,
commit) in ``results/ggd_speed.csv``, so rows of two commits compare their code.

    python benchmarks/ggd_speed.py data.bucket_by_length=true     # batches of questions with as many nodes
    python benchmarks/ggd_speed.py +trainer.precision=bf16-mixed  # the forward pass under bfloat16 autocast
    python benchmarks/ggd_speed.py trainer=gpu                    # on the GPU (collate on the CPU, then copied)

With ``trainer=gpu`` the model and each collated batch sit on the GPU (the copy counts in ``collate``), every
phase ends with a synchronisation, the matmul rate is the GPU's fp32 rate, and ``lstm_share`` is the cuDNN LSTM's
share of the GPU's kernel time.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from zoo.threads import use_passive_waiting  # noqa: E402

use_passive_waiting()  # measure what runs do (zoo/threads.py)
import torch  # noqa: E402
from lightning.pytorch.utilities import move_data_to_device  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.errors import CompactHydraException  # noqa: E402

from datamodules.datamodule import LengthBucketBatchSampler  # noqa: E402
from zoo.registry import get_dataset, get_model  # noqa: E402
from zoo.results import append_row, check_appendable, results_table  # noqa: E402
from zoo.stages import prepared_data  # noqa: E402
from zoo.speed import counted_flops, flops_share, matmul_flops_per_s  # noqa: E402
from zoo.launch import USER_ERRORS  # noqa: E402
from zoo.train import git_commit, hardware_string, model_settings  # noqa: E402

DEFAULT_OVERRIDES = ["experiment=ggd_cfq"]
KEY = ("data", "backbone", "batch_size", "bucketed", "encoder_chunks", "precision", "threads", "hardware",
       "git_commit")
PHASES = ("collate", "forward", "backward", "optimizer")


def training_batches(featurizer, examples: list, batch_size: int, n_batches: int,
                     pool_batches: int | None, seed: int) -> tuple[list[list[dict]], float]:
    """``n_batches`` encoded training batches, as a training run forms them: consecutive runs of ``examples`` (in
    a random order already), or with ``pool_batches`` (``data.bucket_by_length``) each pool of that many batches
    sorted by ``featurizer.length`` and cut (``LengthBucketBatchSampler``); and the seconds a first encoding of an
    example takes."""
    pool = (pool_batches or 1) * batch_size
    examples = examples[:-(-n_batches * batch_size // pool) * pool]  # whole pools
    start = time.perf_counter()
    encoded = [featurizer.encode(e) for e in examples]
    encode_seconds = (time.perf_counter() - start) / len(examples)
    if pool_batches:
        lengths = [featurizer.length(e) for e in examples]
        order = LengthBucketBatchSampler(lengths, batch_size, seed, pool_batches).batches()
    else:
        order = [range(i, i + batch_size) for i in range(0, len(examples), batch_size)]
    return [[encoded[i] for i in batch] for batch in order[:n_batches]], encode_seconds


def cpu_runs_bf16_lstm() -> bool:
    """Whether torch runs an LSTM under bfloat16 autocast on this CPU: its oneDNN kernel needs AVX-512 (on a CPU
    without, torch raises "could not create a primitive descriptor for the LSTM forward propagation primitive")."""
    lstm = torch.nn.LSTM(2, 2, batch_first=True)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lstm(torch.zeros(1, 1, 2))
    except RuntimeError:
        return False
    return True


def train_profile(model, encoded: list[list[dict]], warmup: int, bf16: bool = False) -> dict[str, float]:
    """Seconds per step of each of ``PHASES`` over the batches after the first ``warmup``, and FLOPs per step;
    with ``bf16`` the forward pass under bfloat16 autocast, as Lightning's ``precision=bf16-mixed`` runs it. The
    model's device is where the steps run; on a GPU each phase ends with a synchronisation."""
    featurizer, device = model.featurizer, model.device

    def mark() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    def step_loss(items):
        batch = move_data_to_device(featurizer.collate(items), device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            return model.loss(batch)[0]

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=model.hparams.lr)
    seconds = dict.fromkeys(PHASES, 0.0)
    for i, items in enumerate(encoded):
        marks = [mark()]
        batch = move_data_to_device(featurizer.collate(items), device)
        marks.append(mark())
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss, _ = model.loss(batch)
        marks.append(mark())
        loss.backward()
        marks.append(mark())
        optimizer.step()
        optimizer.zero_grad()
        marks.append(mark())
        if i >= warmup:
            for phase, begin, end in zip(PHASES, marks, marks[1:]):
                seconds[phase] += end - begin
    timed = len(encoded) - warmup
    timed_examples = sum(map(len, encoded[warmup:]))
    flops = 0  # over every timed batch: bucketed batches differ in size
    for items in encoded[warmup:]:
        flops += counted_flops(lambda: step_loss(items).backward())
    share = lstm_share(encoded[warmup:warmup + 3], step_loss, device)
    optimizer.zero_grad()
    return {**{f"{phase}_ms_per_step": 1e3 * seconds[phase] / timed for phase in PHASES},
            "examples_per_s": timed_examples / sum(seconds.values()), "flops_per_step": flops / timed,
            "lstm_share": share}


def lstm_share(encoded: list[list[dict]], step_loss, device: torch.device) -> float:
    """The LSTM's share of a training step's time (forward and backward), from ``torch.profiler`` over a few of
    the timed batches (profiled apart from the timing, whose numbers its overhead would change), the part of a step
    that only a faster LSTM can shorten: on the CPU the share of CPU time spent in the recurrent kernels, on a GPU
    the share of the GPU's kernel time spent under the cuDNN LSTM's operators."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]) as profiler:
        for items in encoded:
            step_loss(items).backward()
        if on_gpu:
            torch.cuda.synchronize(device)
    events = profiler.key_averages()
    if on_gpu:  # the operators' totals hold the kernels they launch (cuDNN's own GEMMs too)
        cudnn_lstm = ("aten::_cudnn_rnn", "aten::_cudnn_rnn_backward")
        recurrent = sum(e.device_time_total for e in events if e.key in cudnn_lstm)
        return recurrent / max(1e-9, sum(e.self_device_time_total for e in events))
    recurrent = sum(e.self_cpu_time_total for e in events if "rnn" in e.key.lower() or "lstm" in e.key.lower())
    return recurrent / max(1e-9, sum(e.self_cpu_time_total for e in events))


@torch.no_grad()
def validate_profile(model, examples: list, batch_size: int) -> float:
    """Validation examples/s: encoding (memoised after the first pass, as in training), collating, scoring and
    decoding."""
    featurizer = model.featurizer
    model.eval()
    batches = [[featurizer.encode(e) for e in examples[i:i + batch_size]] for i in range(0, len(examples), batch_size)]
    start = time.perf_counter()
    for items in batches:  # decode reads the scores back to the CPU, so nothing is left in flight
        model.decode(model(move_data_to_device(featurizer.collate(items), model.device)), model.hparams.threshold)
    return len(examples) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=512, help="training batch (the reference schedule's)")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps first")
    parser.add_argument("--out", type=Path, default=results_table("ggd_speed.csv"))
    args, overrides = parser.parse_known_args(argv)
    try:
        with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
            cfg = compose("run", overrides=[*DEFAULT_OVERRIDES, *overrides, f"data.batch_size={args.batch_size}"])
    except CompactHydraException as e:  # data=no_such_dataset
        sys.exit(f"error: {e}")
    if cfg.model.name != "ggd":
        sys.exit(f"error: model={cfg.model.name}: this benchmark measures GGD")
    precision = str(cfg.trainer.get("precision", "32-true"))
    if precision not in ("32-true", "32", "bf16-mixed"):
        sys.exit(f"error: trainer.precision={precision}: this benchmark measures 32-true or bf16-mixed")
    on_gpu = cfg.trainer.get("accelerator") == "gpu"
    if on_gpu and not torch.cuda.is_available():
        sys.exit("error: trainer=gpu, but torch sees no CUDA device here; leave trainer at its default to measure "
                 "the CPU")
    if precision == "bf16-mixed" and not on_gpu and not cpu_runs_bf16_lstm():
        sys.exit(f"error: trainer.precision=bf16-mixed: this CPU ({hardware_string()}) cannot run GGD's LSTM under "
                 "bfloat16 autocast (torch's oneDNN kernel needs AVX-512); measure 32-true")
    try:
        check_appendable(args.out)
        torch.manual_seed(cfg.seed)
        datamodule = prepared_data(cfg)
        params, featurizer = model_settings(cfg)
        model = get_model("ggd").build(datamodule.train, get_dataset(cfg.data.name).formalism, featurizer=featurizer,
                                       **params)
        datamodule.attach(model.featurizer)  # tags every split in bulk, as a training run does
        device = torch.device("cuda" if on_gpu else "cpu")
        model.to(device)
    except USER_ERRORS as e:  # a damaged speed table, data files missing...
        sys.exit(f"error: {e}")
    batch_size = datamodule.batch_size
    train = list(datamodule.train)
    random.Random(cfg.seed).shuffle(train)
    needed = (args.warmup + args.steps) * batch_size
    if len(train) < needed:
        sys.exit(f"error: {args.warmup} + {args.steps} steps of batch {batch_size} need {needed} training examples, "
                 f"{cfg.data.name} has {len(train)}: lower --steps, --warmup or --batch-size")
    pool_batches = datamodule.bucket_pool_batches if datamodule.bucket_by_length else None
    batches, encode_seconds = training_batches(model.featurizer, train, batch_size, args.warmup + args.steps,
                                               pool_batches, cfg.seed)
    profile = {"encode_ms_per_example": 1e3 * encode_seconds,
               **train_profile(model, batches, args.warmup, bf16=precision == "bf16-mixed")}
    peak = matmul_flops_per_s(device=device)
    seconds_per_step = batch_size / profile["examples_per_s"]
    row = {"data": cfg.data.name, "backbone": model.backbone, "batch_size": batch_size,
           "bucketed": bool(pool_batches), "encoder_chunks": model.encoder.chunks, "precision": precision,
           "params": sum(p.numel() for p in model.parameters()), "threads": torch.get_num_threads(),
           "hardware": f"1x {torch.cuda.get_device_name(device)}" if on_gpu else hardware_string(),
           "git_commit": git_commit(), "steps": args.steps,
           **{key: round(value, 3) for key, value in profile.items() if key not in ("flops_per_step", "lstm_share")},
           "validate_examples_per_s": round(validate_profile(model, list(datamodule.val)[:needed],
                                                             datamodule.eval_batch_size), 1),
           "gflops_per_step": round(profile["flops_per_step"] / 1e9, 3),
           "matmul_gflops": round(peak / 1e9, 2),
           "flops_share": flops_share(profile["flops_per_step"], seconds_per_step, peak),
           "lstm_share": round(profile["lstm_share"], 3)}
    append_row(args.out, row, replacing=KEY)
    breakdown = ", ".join(f"{phase} {row[f'{phase}_ms_per_step']:.0f}" for phase in PHASES)
    print(f"ggd {row['backbone']} batch {batch_size}, {row['threads']} threads: {row['examples_per_s']:.0f} training "
          f"examples/s (ms a step: {breakdown}; first encoding {row['encode_ms_per_example']:.2f} ms an example), "
          f"{row['validate_examples_per_s']:.0f} validation examples/s, {100 * row['flops_share']:.2f}% of the "
          f"{row['matmul_gflops']} GFLOP/s matmul rate; the LSTM's kernels {100 * row['lstm_share']:.0f}% of a step")
    return row


if __name__ == "__main__":
    main()
