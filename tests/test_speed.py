"""zoo.speed: FLOPs of the fused recurrent kernels, which torch's own counter leaves at zero."""
import pytest
import torch

from zoo.speed import _cudnn_rnn, _cudnn_rnn_backward, counted_flops


@pytest.mark.parametrize("layers,bidirectional", [(1, False), (3, True)])
def test_lstm_flops_agree_with_the_counted_decomposition(layers, bidirectional):
    """oneDNN's fused LSTM against torch's unfused one, whose matrix products torch counts itself: the same
    forward, and a backward that differs only by the input gradient the fused kernel computes anyway."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(16, 8, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    inputs = torch.randn(4, 5, 16)
    hidden_size, directions = 8, 2 if bidirectional else 1
    forward = 0
    for layer in range(layers):  # by hand: tokens x 2 x (input-to-hidden + hidden-to-hidden weights)
        width = 16 if layer == 0 else hidden_size * directions
        forward += directions * 2 * 20 * 4 * hidden_size * (width + hidden_size)
    with torch.backends.mkldnn.flags(enabled=True):
        assert counted_flops(lambda: lstm(inputs)) == forward
        fused = counted_flops(lambda: lstm(inputs)[0].sum().backward())
    with torch.backends.mkldnn.flags(enabled=False):
        assert counted_flops(lambda: lstm(inputs)) == forward
        unfused = counted_flops(lambda: lstm(inputs)[0].sum().backward())
    assert fused == 3 * forward and 0.7 < unfused / fused <= 1  # (1 layer: 0.76, 3 layers: 0.90)


def test_cudnn_formulas_count_every_layer_and_direction():
    """cuDNN takes all weights in one list (biases 1-D, not counted): a 2-layer LSTM over 7 tokens of width 3."""
    weights = [(8, 3), (8, 2), (8,), (8,), (8, 2), (8, 2), (8,), (8,)]  # hidden 2: 4 gates x 2 rows
    assert _cudnn_rnn((7, 1, 3), weights) == 2 * 7 * (24 + 16 + 16 + 16)
    assert _cudnn_rnn_backward((7, 1, 3), weights) == 2 * _cudnn_rnn((7, 1, 3), weights)
