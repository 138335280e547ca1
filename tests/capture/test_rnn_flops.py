"""cuDNN's recurrent layers' FLOPs (``_cudnn_rnn``, which torch's FLOP registry does not
count): the count from the op's argument shapes equals what ``FlopCounterMode`` counts for the
same layer run on the CPU, where torch runs it as GEMMs it counts (a GRU, an LSTM with a
projection; the CPU's plain LSTM runs in oneDNN, uncounted); the backward twice it; and the
recorded cuDNN LSTM step's gate GEMMs get them, under their roof."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tests.recorded import load_recorded
from torch_nsight.capture.calls.op_flops import op_flops
from torch_nsight.shape_flops import shape_flops

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize(("cell", "options"), [
    (torch.nn.GRU, {}), (torch.nn.GRU, {"bias": False}), (torch.nn.GRU, {"bidirectional": True}),
    (torch.nn.LSTM, {"proj_size": 8}), (torch.nn.LSTM, {"proj_size": 8, "bias": False}),
])
def test_a_recurrent_layer_counts_its_gemms(cell: type[torch.nn.Module],
                                            options: dict[str, object]) -> None:
    layer = cell(32, 24, num_layers=2, batch_first=True, **options)
    x = torch.randn(4, 5, 32)
    with FlopCounterMode(display=False) as counter:
        layer(x)
    weights: list[torch.Tensor] = list(layer._flat_weights)  # type: ignore[arg-type]
    # (as cuDNN's op gets them: one list argument)
    groups = 2 * (2 if options.get("bidirectional") else 1)
    hidden = int(options.get("proj_size") or 24)  # type: ignore[call-overload]
    buffer = torch.empty(sum(w.numel() for w in weights))
    hx, cx = torch.zeros(groups, 4, hidden), torch.zeros(groups, 4, 24)
    args = (x, weights, 4, buffer, hx, cx)
    counted = op_flops(torch.ops.aten._cudnn_rnn, args, {}, None)
    assert counted is not None and counted == counter.get_total_flops() > 0
    backward = [list(t.shape) for t in (x, *weights, buffer, hx, cx, x, x)]
    assert shape_flops("_cudnn_rnn_backward", backward) == 2 * counted


def test_shapes_that_do_not_read_as_a_recurrent_layer_give_no_count() -> None:
    assert shape_flops("_cudnn_rnn", [[4, 5, 32]]) is None
    assert shape_flops("_cudnn_rnn", [[4, 5, 32], [96, 32], [96, 24], [7], [2, 4, 24]]) is None


def test_the_recorded_lstm_gemms_have_flops_under_their_roof() -> None:
    """The recorded LSTM language model (cuDNN, fp16): its gate GEMMs once had 0 FLOPs."""
    profile = load_recorded(DATA / "outside_lstm" / "profile.ncu-rep.xz")
    k = profile.kernels
    lstm = k[k["module"] == "lstm"]
    gemm = lstm["kernel"].str.startswith("nvjet")
    assert gemm.sum() > 100 and (lstm.loc[gemm, "flops"] > 0).all()
    calls = profile.calls
    assert calls is not None
    rnn = calls[calls["aten_op"].isin(["_cudnn_rnn", "_cudnn_rnn_backward"])]
    assert (lstm["flops"].sum() == pytest.approx((rnn["flops"] * rnn["count"]).sum()))
    assert not lstm["above_roof"].astype(bool).any()
