"""What the speed benchmarks (``benchmarks/*_speed.py``) share: the machine's measured matmul rate, the ceiling
their achieved FLOP/s are a share of, and the floating-point operations of a piece of work."""
from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode


def matmul_flops_per_s(size: int = 1024, repeats: int = 5) -> float:
    """fp32 ``size x size`` matmuls: 2 size^3 operations each, best of ``repeats`` timings of 8 products."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(8):
            torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 8 * 2 * size ** 3 / best


def counted_flops(function) -> int:
    with FlopCounterMode(display=False) as counter:
        function()
    return counter.get_total_flops()
