"""Kernels a trace shows launched in no torch_nsight range, named after the PyTorch call that
launched them (report/launch_ops.py), on recorded traces."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from torch_nsight import naming
from torch_nsight.report.launch_ops import forward_op, launch_message
from torch_nsight.vocabulary import UNATTRIBUTED, in_module_range, outside_module

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize(("node", "op"), [
    ("NllLossBackward0", "nll_loss"),
    ("LogSoftmaxBackward0", "log_softmax"),
    ("ToCopyBackward0", "to_copy"),
    ("torch::autograd::AccumulateGrad", "accumulate_grad"),
    ("CudnnRnnBackward0", "cudnn_rnn"),
    ("ScaledDotProductFlashAttentionBackward0", "scaled_dot_product_flash_attention"),
    ("CUDAGraphBackward", "cuda_graph"),
])
def test_a_backward_node_is_named_after_its_forward_op(node: str, op: str) -> None:
    assert forward_op(node) == op


def test_the_message_is_the_one_the_capture_writes_for_that_call() -> None:
    evaluate = "autograd::engine::evaluate_function: NllLossBackward0"
    assert launch_message((), ("aten::cross_entropy_loss", "aten::_log_softmax")) \
        == naming.op_message("cross_entropy_loss")  # the outermost: what the user called
    assert launch_message((), (evaluate, "NllLossBackward0", "aten::nll_loss_backward")) \
        == naming.backward_op_message("nll_loss")
    # PyTorch's annotation of an optimizer step wins: the optimizer's own step range
    assert launch_message(("ProfilerStep#3", "Optimizer.step#AdamW.step"),
                          ("aten::_fused_adamw_",)) == naming.step_message("AdamW")
    assert launch_message(("ProfilerStep#3",), ()) is None  # a bare launch: nothing known


@pytest.fixture(scope="module")
def compiled_timeline() -> torch_nsight.Profile:
    return torch_nsight.load(DATA / "compile" / "vit_timeline")


def test_the_eager_loss_and_optimizer_of_a_compiled_step_get_their_rows(
        compiled_timeline: torch_nsight.Profile) -> None:
    """timm ViT-S compiled, its loss (cross-entropy on the logits cast to float32) and fused
    AdamW eager outside the model, recorded before the capture named them: every kernel now
    has a name, the same ones in both steps."""
    k = compiled_timeline.kernels
    assert UNATTRIBUTED not in set(k["module"])
    outside = k[~k["module"].map(in_module_range) | (k["direction"] == "step")]
    for _, step in outside.groupby("run"):
        rows = {(module, direction): sorted(group["kernel"])
                for (module, direction), group in step.groupby(["module", "direction"])}
        assert rows == {
            (outside_module("cross_entropy_loss"), "fwd"): [
                "nll_loss_forward_reduce_cuda_kernel_2d", "softmax_warp_forward",
                "unrolled_elementwise_kernel"],
            (outside_module("ones_like"), "fwd"): ["vectorized_elementwise_kernel"],
            (outside_module("to_copy"), "bwd"): ["vectorized_elementwise_kernel"],
            (outside_module("log_softmax"), "bwd"): ["softmax_warp_backward"],
            (outside_module("nll_loss"), "bwd"): ["nll_loss_backward_reduce_cuda_kernel_2d",
                                                  "vectorized_elementwise_kernel"],
            ("AdamW", naming.OPTIMIZER_DIRECTION): ["multi_tensor_apply_kernel"] * 7,
        }
    # the optimizer counts inside module ranges as its step range does; the loss does not
    loss = k.loc[~k["module"].map(in_module_range), "duration_ns"].sum()
    assert compiled_timeline.coverage == pytest.approx(1 - loss / k["duration_ns"].sum())
    assert 0.998 < compiled_timeline.coverage < 0.999


def test_a_graph_replay_has_no_launching_op_and_stays_unattributed() -> None:
    k = torch_nsight.load(DATA / "graph_captured_timeline").kernels
    replayed = k["context"].fillna("").str.contains("CUDA graph replay")
    assert replayed.sum() == 8 and (k.loc[replayed, "module"] == UNATTRIBUTED).all()
    assert k.loc[~replayed, "module"].map(in_module_range).all()
