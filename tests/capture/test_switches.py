"""Fixes switched on through TORCH_NSIGHT_APPLY by instrument(), on small real models: each
changes what it should and nothing else; a fix that cannot apply is undone and reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import torch_nsight
from torch_nsight.capture.fixes import switches
from torch_nsight.capture.fixes.padded import PaddedLinear
from torch_nsight.capture.fixes.switches import apply_fixes, find_targets
from torch_nsight.capture.script.step import reset_steps
from torch_nsight.environment import APPLY_ENV, STEPS_ENV, TIMING_ENV
from torch_nsight.verify_exchange import FixSpec, parse_fixes


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen_input_format = x.is_contiguous(memory_format=torch.channels_last)
        return self.head(self.stem(x).mean((2, 3)))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 24)
        self.lm_head = nn.Linear(24, 37)  # 37 output features: not a multiple of 8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(torch.relu(self.up(x)))


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.backends: list[tuple[bool, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.backends.append((torch.backends.cuda.flash_sdp_enabled(),
                              torch.backends.cuda.math_sdp_enabled()))
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 8)).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attn(x)


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test is a fresh script: no fix applied yet, TF32 as it was, steps from 0."""
    monkeypatch.setattr(switches, "_DONE", set())
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    reset_steps()
    yield
    reset_steps()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def instrument_with(monkeypatch: pytest.MonkeyPatch, model: nn.Module, fixes: str,
                    **env: str) -> torch_nsight.Instrumentation:
    """instrument() as the user's script calls it, under the command's variables."""
    monkeypatch.setenv(APPLY_ENV, fixes)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return torch_nsight.instrument(model, enabled=False)


def test_channels_last_converts_the_weights_and_the_inputs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = ConvNet().eval()
    x = torch.randn(2, 3, 8, 8)
    expected = model(x)
    assert not model.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
    instrument_with(monkeypatch, model, "channels_last")
    assert model.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
    out = model(x)  # an NCHW input, converted by the pre-hook
    assert model.seen_input_format
    torch.testing.assert_close(out, expected)


def test_a_padded_linear_computes_the_same_outputs_and_gradients(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model, reference = Mlp(), Mlp()
    reference.load_state_dict(model.state_dict())
    keys = list(model.state_dict())
    params = list(model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # made before the fix
    instrument_with(monkeypatch, model, "pad_linear@lm_head:multiple=64")
    assert isinstance(model.lm_head, PaddedLinear) and model.lm_head.padded_features == 64
    assert model.lm_head.out_features == 37 and list(model.state_dict()) == keys
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert model.lm_head.weight.shape == (64, 24) and model.lm_head.bias.shape == (64,)
    x = torch.randn(4, 16)
    out, want = model(x), reference(x)
    assert out.shape == want.shape == (4, 37)
    torch.testing.assert_close(out, want)
    out.square().sum().backward()
    want.square().sum().backward()
    grad = model.lm_head.weight.grad
    torch.testing.assert_close(grad[:37], reference.lm_head.weight.grad)
    torch.testing.assert_close(model.lm_head.bias.grad[:37], reference.lm_head.bias.grad)
    assert not grad[37:].any() and not model.lm_head.bias.grad[37:].any()
    before = model.lm_head.weight.detach().clone()
    optimizer.step()  # the optimizer still holds the parameters the padded forward uses
    assert not torch.equal(model.lm_head.weight, before)


def test_tf32_turns_on_both_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    instrument_with(monkeypatch, Mlp(), "tf32")
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32


def test_an_sdpa_backend_holds_around_the_forward_only(monkeypatch: pytest.MonkeyPatch) -> None:
    model = Block()
    instrument_with(monkeypatch, model, '[{"fix": "sdpa_backend", "target": "attn", '
                                        '"backend": "math"}]')
    before = torch.backends.cuda.flash_sdp_enabled()
    model(torch.randn(2, 4, 16)).sum().backward()
    assert model.attn.backends == [(False, True)]  # inside: the math backend alone
    assert torch.backends.cuda.flash_sdp_enabled() == before  # restored after


def test_compile_a_module_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    model = Mlp()
    x = torch.randn(3, 16)
    expected = model(x)
    instrument_with(monkeypatch, model, "compile@up:backend=eager")
    # a built-in (nn.Linear): a compiled forward of the instance, in place (nn.Module.compile
    # of a built-in traces nothing: tests/capture/test_switch_toggles.py)
    assert "forward" in vars(model.up) and "forward" not in vars(model.lm_head)
    assert model.up._compiled_call_impl is None is model.lm_head._compiled_call_impl
    torch.testing.assert_close(model(x), expected)


def test_targets_match_each_dotted_part() -> None:
    model = nn.Sequential(Block(), Block())
    assert [n for n, _ in find_targets(model, "*.attn")] == ["0.attn", "1.attn"]
    assert [n for n, _ in find_targets(model, "*.attn.qkv")] == ["0.attn.qkv", "1.attn.qkv"]
    assert find_targets(model, "")[0][1] is model
    with pytest.raises(ValueError, match="no module named 'attn'"):
        find_targets(model, "attn")


def test_a_fix_that_cannot_apply_is_reported_and_undone(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    model = nn.Sequential(nn.Linear(8, 37), nn.Conv2d(3, 3, 1))
    # the second target of a glob is no Linear: the first is left unpadded too
    outcomes = apply_fixes(model, parse_fixes("pad_linear@*"))
    assert [o.status for o in outcomes] == ["failed"]
    assert "Conv2d, not an nn.Linear" in str(outcomes[0].error)
    assert type(model[0]) is nn.Linear
    timing = tmp_path / "steps.json"
    instrument_with(monkeypatch, model, "pad_linear@5;tf32", **{TIMING_ENV: str(timing),
                                                                 STEPS_ENV: "0:5"})
    assert "fix pad_linear@5 NOT applied" in caplog.text
    for _ in range(5):
        with torch_nsight.step():
            model[0](torch.randn(2, 8))
    written = json.loads(timing.read_text())
    assert [(f["fix"], f["status"]) for f in written["fixes"]] == [("pad_linear", "failed"),
                                                                    ("tf32", "applied")]
    assert "no module named '5'" in written["fixes"][0]["error"]
    assert [f["fix"] for f in written["requested"]] == ["pad_linear", "tf32"]


def test_fixes_apply_once_to_the_first_model(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = Mlp(), Mlp()
    instrument_with(monkeypatch, first, "pad_linear@lm_head")
    torch_nsight.instrument(second, enabled=False)
    assert isinstance(first.lm_head, PaddedLinear)
    assert type(second.lm_head) is nn.Linear


def test_an_already_aligned_linear_is_not_padded() -> None:
    (outcome,) = apply_fixes(Mlp(), [FixSpec("pad_linear", "up", {"multiple": 8})])
    assert outcome.status == "failed" and "already a multiple of 8" in str(outcome.error)


def test_a_wrapper_is_named_when_the_target_is_inside_it() -> None:
    from torch_nsight.capture.fixes.switches import find_targets

    class Wrapper(nn.Module):  # as DistributedDataParallel names its model
        def __init__(self, module: nn.Module) -> None:
            super().__init__()
            self.module = module

    wrapped = Wrapper(nn.Sequential(nn.Linear(4, 4)))
    with pytest.raises(ValueError, match=r"named module\.<name>, so it wraps the model"):
        find_targets(wrapped, "0")
    assert [n for n, _ in find_targets(wrapped.module, "0")] == ["0"]


class NewGelu(nn.Module):
    """The tanh GELU written out, as Hugging Face's GPT-2 has it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def test_the_tanh_gelu_formula_becomes_the_fused_op_with_the_same_outputs() -> None:
    model = nn.Sequential(nn.Linear(8, 16), NewGelu(), nn.Linear(16, 4))
    x = torch.randn(32, 8)
    before = model(x)
    (outcome,) = apply_fixes(model, [FixSpec("gelu_tanh", "1")])
    assert outcome.status == "applied" and outcome.modules == ("1",)
    assert model[1].forward(x) is not None and "forward" in vars(model[1])
    torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("module", [nn.ReLU(), nn.GELU(), nn.Linear(4, 4)])
def test_gelu_tanh_refuses_what_is_not_the_tanh_gelu(module: nn.Module) -> None:
    model = nn.Sequential(module)
    (outcome,) = apply_fixes(model, [FixSpec("gelu_tanh", "0")])
    assert outcome.status == "failed"
    assert "forward" not in vars(model[0])  # nothing changed


class Experts(nn.Module):
    """A mixture of experts' GEMMs as Hugging Face runs them: ``torch._grouped_mm`` over
    the routed tokens, which autocast leaves in the dtype it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 16, 8))
        self.dtypes: list[torch.dtype] = []

    by_keyword = False

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        out = (torch._grouped_mm(input=x, mat2=self.weight, offs=offs) if self.by_keyword
               else torch._grouped_mm(x, self.weight, offs))
        self.dtypes.append(out.dtype)
        return out


def test_a_cast_runs_the_grouped_gemm_in_16_bit_and_gives_float32_back() -> None:
    model = Experts()
    x = torch.randn(32, 16, requires_grad=True)
    offs = torch.tensor([8, 16, 24, 32], dtype=torch.int32)
    plain = model(x, offs)
    (outcome,) = apply_fixes(model, parse_fixes("cast"))
    assert outcome.status == "applied" and outcome.toggle is not None
    cast = model(x, offs)
    cast.sum().backward()
    assert model.dtypes == [torch.float32, torch.float32]  # the module's output as before
    by_hand = torch._grouped_mm(x.bfloat16(), model.weight.bfloat16(), offs).float()
    assert torch.equal(cast, by_hand) and not torch.equal(cast, plain)
    # above autograd: the gradients come back to the float32 leaves
    assert x.grad is not None and x.grad.dtype == torch.float32
    assert model.weight.grad is not None and model.weight.grad.dtype == torch.float32
    outcome.toggle.off()  # off: the call as the model makes it
    assert torch.equal(model(x, offs), plain)
    outcome.toggle.on()
    assert torch.equal(model(x, offs), by_hand)
    # operands given by keyword: cast, and the result back in float32 all the same
    model.by_keyword = True
    assert torch.equal(model(x, offs), by_hand) and model.dtypes[-1] == torch.float32


def test_a_cast_to_anything_but_16_bit_is_refused() -> None:
    (outcome,) = apply_fixes(Experts(), [FixSpec("cast", "", {"dtype": "float64"})])
    assert outcome.status == "failed" and "float64" in str(outcome.error)
