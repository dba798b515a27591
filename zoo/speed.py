"""What the speed benchmarks (``benchmarks/*_speed.py``) share: the machine's measured matmul rate, the ceiling
their achieved FLOP/s are a share of, and the floating-point operations of a piece of work."""
from __future__ import annotations

import math
import time

import torch
from torch.utils.flop_counter import FlopCounterMode


def matmul_flops_per_s(size: int = 1024, repeats: int = 5, device: str | torch.device = "cpu") -> float:
    """fp32 ``size x size`` matmuls on ``device``: 2 size^3 operations each, best of ``repeats`` timings of 8
    products (on a GPU 4096 x 4096, so that a product outlasts its launch, and synchronised before each reading)."""
    device = torch.device(device)
    on_gpu = device.type == "cuda"
    size = 4096 if on_gpu and size == 1024 else size
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)

    def now() -> float:
        if on_gpu:
            torch.cuda.synchronize(device)
        return time.perf_counter()

    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = now()
        for _ in range(8):
            torch.mm(a, b)
        best = min(best, now() - start)
    return 8 * 2 * size ** 3 / best


def flops_share(flops: float, seconds: float, peak: float) -> float:
    """The achieved FLOP/s as a share of ``peak`` (``matmul_flops_per_s``), to three significant figures: a fixed
    number of decimals would round a tiny model on a loaded machine (under 0.005%) to 0."""
    return float(f"{flops / seconds / peak:.3g}")


def _recurrent_flops(input_shape, weight_shapes) -> int:
    """An LSTM's (GRU's, RNN's) matrix products: each token of the input meets every input-to-hidden and
    hidden-to-hidden weight matrix once, 2 operations a weight; the gates' elementwise work, like any elementwise
    work, is not counted."""
    tokens = math.prod(input_shape[:-1])  # [T, B, in], [B, T, in] or packed [sum of lengths, in]
    return 2 * tokens * sum(math.prod(shape) for shape in weight_shapes if len(shape) == 2)


def _mkldnn_rnn_layer(input, weight0, weight1, *args, **kwargs) -> int:
    return _recurrent_flops(input, [weight0, weight1])


def _mkldnn_rnn_layer_backward(input, weight1, weight2, *args, **kwargs) -> int:
    return 2 * _recurrent_flops(input, [weight1, weight2])  # gradients of the inputs and of the weights


def _cudnn_rnn(input, weight, *args, **kwargs) -> int:
    return _recurrent_flops(input, weight)


def _cudnn_rnn_backward(input, weight, *args, **kwargs) -> int:
    return 2 * _recurrent_flops(input, weight)


# torch's counter knows no formula for the fused recurrent kernels, and counted an LSTM as 0 operations
RECURRENT_FLOPS = {torch.ops.aten.mkldnn_rnn_layer: _mkldnn_rnn_layer,
                   torch.ops.aten.mkldnn_rnn_layer_backward: _mkldnn_rnn_layer_backward,
                   torch.ops.aten._cudnn_rnn: _cudnn_rnn, torch.ops.aten._cudnn_rnn_backward: _cudnn_rnn_backward}


def counted_flops(function) -> int:
    """Floating-point operations of ``function``'s matrix products (``torch.utils.flop_counter``), the fused
    recurrent kernels of CPU (oneDNN) and GPU (cuDNN) LSTMs included."""
    with FlopCounterMode(display=False, custom_mapping=RECURRENT_FLOPS) as counter:
        function()
    return counter.get_total_flops()
