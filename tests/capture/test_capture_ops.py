"""Op ranges (``ops=``): which functional ops get a name, and where."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from capture_models import MLP, Block, Recorder
from torch import nn

from torch_nsight.capture import DEFAULT_OPS, normalize_op_name
from torch_nsight.capture.ranges.ops import check_ops

BLOCK_FORWARD_WITH_OPS = [
    "Block",
    "  input_layernorm",
    "  self_attn",
    "    self_attn.q_proj",
    "    self_attn.k_proj",
    "    self_attn.v_proj",
    "    op:scaled_dot_product_attention",
    "    self_attn.o_proj",
    "  op:add",
    "  post_attention_layernorm",
    "  mlp",
    "    mlp.gate",
    "    mlp.act",
    "    mlp.up",
    "    op:mul",
    "    mlp.down",
    "  op:add",
]


def test_llama_block_ops_are_named_inside_their_module(recorder: Recorder) -> None:
    # nn.RMSNorm, nn.Linear and nn.SiLU are PyTorch leaf modules: their range already names
    # their one op, so rms_norm, linear and silu get no op range of their own there.
    model = Block()
    x = torch.randn(2, 5, 8)
    expected = model(x)
    recorder.instrument(model, ops=True, backward=False)
    with torch.no_grad():
        out = model(x)
    torch.testing.assert_close(out, expected)
    assert recorder.lines() == BLOCK_FORWARD_WITH_OPS


def test_functional_ops_in_user_code_are_named(recorder: Recorder) -> None:
    class FunctionalMLP(MLP):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.down(F.silu(self.gate(x)) * self.up(x))

    class CustomNorm(nn.Module):  # a user's leaf module: its ops are worth naming
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.layer_norm(x, x.shape[-1:]) + 1

    model = nn.Sequential(FunctionalMLP(), CustomNorm())
    recorder.instrument(model, ops=True, backward=False)
    with torch.no_grad():
        model(torch.randn(2, 8))
    assert recorder.lines() == [
        "Sequential",
        "  0", "    0.gate", "    op:silu", "    0.up", "    op:mul", "    0.down",
        "  1", "    op:layer_norm", "    op:add",
    ]


def test_user_op_set(recorder: Recorder) -> None:
    model = Block()
    recorder.instrument(model, ops={"mul", "transpose"}, backward=False)
    with torch.no_grad():
        model(torch.randn(2, 5, 8))
    ops = [line.strip() for line in recorder.lines() if "op:" in line]
    # q, k, v are transposed to heads and the attention output back once
    assert ops == ["op:transpose"] * 4 + ["op:mul"]


def test_ops_are_only_named_while_the_model_runs(recorder: Recorder) -> None:
    model = Block()
    recorder.instrument(model, ops=True, backward=False)
    x = torch.randn(2, 5, 8)
    torch.add(x, x)
    F.silu(x)
    assert recorder.events == []
    assert torch.overrides._get_current_function_mode() is None
    with torch.no_grad():
        model(x)
    assert torch.overrides._get_current_function_mode() is None
    recorder.clear()
    x * 2
    assert recorder.events == []


def test_ops_with_backward_and_checkpointing_stay_balanced(recorder: Recorder) -> None:
    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)

    model = Checkpointed()
    recorder.instrument(model, ops=True)
    model(torch.randn(2, 5, 8, requires_grad=True)).sum().backward()
    lines = recorder.lines()
    backward = lines[lines.index("bwd:Checkpointed"):]
    # the recomputed forward inside backward names its ops too
    assert any(line.strip() == "op:scaled_dot_product_attention" for line in backward)
    assert sum(line.strip() == "op:mul" for line in lines) == 2


@pytest.mark.parametrize(
    ("func", "name"),
    [
        (F.silu, "silu"),
        (F.scaled_dot_product_attention, "scaled_dot_product_attention"),
        (torch.Tensor.__mul__, "mul"),
        (torch.Tensor.__rmul__, "mul"),
        (torch.Tensor.__iadd__, "add"),
        (torch.Tensor.add_, "add"),
        (torch.Tensor.__matmul__, "matmul"),
        (torch.Tensor.__truediv__, "div"),
        (torch.multiply, "mul"),
        (torch.Tensor.softmax, "softmax"),
        (torch.Tensor.__rshift__, "rshift"),
        (torch.Tensor.__getitem__, "getitem"),
    ],
)
def test_normalize_op_name(func: object, name: str) -> None:
    assert normalize_op_name(func) == name  # type: ignore[arg-type]


def test_check_ops() -> None:
    assert check_ops(False) is None
    assert check_ops(True) is DEFAULT_OPS
    assert check_ops("silu") == {"silu"}  # one name, not its letters
    assert check_ops(["silu", "mul"]) == {"silu", "mul"}
    assert {"silu", "gelu", "mul", "add", "matmul", "softmax", "scaled_dot_product_attention",
            "layer_norm", "rms_norm", "dropout"} <= DEFAULT_OPS
    with pytest.raises(TypeError, match="ops"):
        check_ops(3)
    with pytest.raises(TypeError, match="ops"):
        check_ops(["silu", 3])
    with pytest.raises(ValueError, match="empty"):
        check_ops([""])
