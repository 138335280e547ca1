"""Every fix switches off and on between steps (profile --verify alternates them): on a small
real model, off computes bit for bit what the model computed before the fix, on what it
computed with it, toggle after toggle; compile keeps its compiled code (no recompilation),
a padded Linear toggles after the optimizer stepped."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from torch_nsight.capture.fixes import switches
from torch_nsight.capture.fixes.padded import PaddedLinear
from torch_nsight.capture.fixes.switches import Toggle, apply_fixes
from torch_nsight.verify_exchange import FixSpec

TOGGLES = 5


class TanhGelu(nn.Module):
    """The tanh GELU written out, as Hugging Face's GPT-2 has it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


class Attend(nn.Module):
    """Self-attention over 3 tokens of 2 heads; notes whether flash attention was allowed."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(37, 3 * 48)
        self.flash: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            self.flash.append(torch.backends.cuda.flash_sdp_enabled())
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 3, 8)).unbind(1)
        return F.scaled_dot_product_attention(q, k, v).flatten(1)


def build() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(144, 37),
                         TanhGelu(), Attend(), nn.Linear(48, 5))


@pytest.fixture(autouse=True)
def _tf32_as_it_was() -> Iterator[None]:
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    yield
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
     torch.backends.cudnn.benchmark) = saved


def _flash_off(model: nn.Sequential) -> bool:
    model[4].flash.clear()
    model(torch.randn(1, 3, 6, 6))
    return not model[4].flash[-1]


#: Each fix, and how to tell it is in force.
FIXES: dict[str, tuple[FixSpec, Callable[[nn.Sequential], bool]]] = {
    "compile": (FixSpec("compile", "4", {"backend": "eager"}),
                lambda m: m[4]._compiled_call_impl is not None),
    "channels_last": (FixSpec("channels_last", "0"), lambda m: m[0].weight.is_contiguous(
        memory_format=torch.channels_last) and bool(m[0]._forward_pre_hooks)),
    "tf32": (FixSpec("tf32"), lambda m: torch.backends.cuda.matmul.allow_tf32
             and torch.backends.cudnn.allow_tf32),
    "pad_linear": (FixSpec("pad_linear", "2", {"multiple": 64}),
                   lambda m: isinstance(m[2], PaddedLinear) and "forward" not in vars(m[2])),
    "gelu_tanh": (FixSpec("gelu_tanh", "3"), lambda m: "forward" in vars(m[3])),
    "sdpa_backend": (FixSpec("sdpa_backend", "4", {"backend": "math"}), _flash_off),
    "cudnn_benchmark": (FixSpec("cudnn_benchmark"), lambda m: torch.backends.cudnn.benchmark),
}


def applied(model: nn.Module, spec: FixSpec) -> Toggle:
    (outcome,) = apply_fixes(model, [spec])
    assert outcome.status == "applied", outcome.error
    assert outcome.toggle is not None and outcome.toggle.is_on
    return outcome.toggle


@pytest.mark.parametrize("kind", list(FIXES))
@torch.no_grad()
def test_off_is_the_model_without_the_fix_and_on_the_model_with_it(kind: str) -> None:
    spec, in_force = FIXES[kind]
    model = build().eval()
    x = torch.randn(4, 3, 6, 6)
    without = model(x)
    toggle = applied(model, spec)
    fixed = model(x)
    assert in_force(model)
    for _ in range(TOGGLES):
        toggle.off()
        assert not in_force(model) and not toggle.is_on
        assert torch.equal(model(x), without)
        toggle.off()  # switching it off twice changes nothing
        toggle.on()
        assert in_force(model) and toggle.is_on
        assert torch.equal(model(x), fixed)


def test_gelu_tanh_changes_the_bits_its_toggle_restores() -> None:
    """(So that the test above would see a toggle that did not switch.)"""
    model = build().eval()
    x = torch.randn(64, 144)
    before = model[3](x)
    toggle = applied(model, FIXES["gelu_tanh"][0])
    assert not torch.equal(model[3](x), before)
    toggle.off()
    assert torch.equal(model[3](x), before)


def counting_backend() -> tuple[list[int], Callable[..., Any]]:
    """A compile backend that counts the graphs it is handed (their node counts), with
    TorchDynamo's caches emptied first."""
    compiled: list[int] = []

    def counting(graph: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
        compiled.append(len(graph.graph.nodes))
        return graph.forward

    torch._dynamo.reset()
    return compiled, counting


def test_compile_switches_without_compiling_again() -> None:
    compiled, counting = counting_backend()
    model = build().eval()
    x = torch.randn(4, 3, 6, 6)
    # the backend as a callable, which the switch passes to module.compile as it is
    toggle = applied(model, FixSpec("compile", "4", {"backend": counting}))
    wrapper = model[4]._compiled_call_impl
    model(x)
    first = len(compiled)
    assert first >= 1
    for _ in range(TOGGLES):
        toggle.off()
        model(x)
        toggle.on()
        assert model[4]._compiled_call_impl is wrapper  # the same wrapper, not a new one
        model(x)
    assert len(compiled) == first


@pytest.mark.parametrize("target", ["0", "2", "5", ""])
def test_compiling_a_built_in_module_compiles_it(target: str) -> None:
    """``module.compile()`` on nn.Conv2d, nn.Linear or an nn.Sequential hands TorchDynamo no
    graph (torch.nn's own frame is skipped): the switch compiles a forward of the instance,
    which gives one, switches without compiling again, and keeps the module's parameters."""
    compiled, counting = counting_backend()
    model = build().eval()
    module = model.get_submodule(target) if target else model
    x = torch.randn(4, 3, 6, 6)
    inputs = {"0": x, "2": torch.randn(4, 144), "5": torch.randn(4, 48), "": x}[target]
    with torch.no_grad():
        without = module(inputs)
        module.compile(backend=counting)  # what the switch did before
        assert torch.equal(module(inputs), without)
        # no graph for a leaf built-in; the Sequential's own frame skipped (only its custom
        # children's frames compiled, apart)
        assert len(compiled) == (2 if not target else 0)
        module._compiled_call_impl = None
        torch._dynamo.reset()
        compiled.clear()
        keys = list(model.state_dict())
        toggle = applied(model, FixSpec("compile", target, {"backend": counting}))
        assert torch.equal(module(inputs), without)
        first = len(compiled)
        assert first >= 1
        for _ in range(TOGGLES):
            toggle.off()
            assert "forward" not in vars(module) and torch.equal(module(inputs), without)
            toggle.on()
            assert torch.equal(module(inputs), without)
        assert len(compiled) == first and list(model.state_dict()) == keys


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def unpadded_copy(model: nn.Sequential) -> nn.Sequential:
    """The model as it would be without the padding, with its current weights."""
    reference = build()
    reference.load_state_dict({k: v[:reference.state_dict()[k].shape[0]]
                               for k, v in model.state_dict().items()})
    return reference


def test_a_padded_linear_toggles_after_the_optimizer_stepped() -> None:
    model = build()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    toggle = applied(model, FixSpec("pad_linear", "2", {"multiple": 64}))
    x = torch.randn(4, 3, 6, 6)
    for index in range(6):  # trained with the fix off and on, as --verify alternates it
        (toggle.on if index % 4 in (1, 2) else toggle.off)()
        train_step(model, optimizer, x)
    weight, bias = model[2].weight, model[2].bias
    assert weight.shape == (64, 144) and not weight[37:].any() and not bias[37:].any()
    # padding again would be refused (the optimizer holds state of the padded shape) ...
    (again,) = apply_fixes(copy.deepcopy(model), [FixSpec("pad_linear", "2")])
    assert again.status == "failed"
    with torch.no_grad():  # ... switching it is not
        reference = unpadded_copy(model)(x)
        toggle.on()
        fixed = model(x)
        for _ in range(TOGGLES):
            toggle.off()
            assert torch.equal(model(x), reference)
            toggle.on()
            assert torch.equal(model(x), fixed)
    toggle.off()  # the off form's gradient lands in the padded parameter's first rows
    model(x).square().mean().backward()
    assert weight.grad is not None and weight.grad.shape == (64, 144)
    assert weight.grad[:37].any() and not weight.grad[37:].any()


def test_a_fix_that_fails_half_way_is_undone_for_good() -> None:
    model = nn.Sequential(nn.Linear(8, 37), nn.Linear(37, 37))
    calls: list[str] = []

    def failing(module: nn.Module, targets: Any, options: Any) -> Toggle:
        def do(target: nn.Module) -> Toggle:
            if len(calls) == 1:
                raise RuntimeError("out of memory")
            calls.append("done")
            return Toggle(lambda: calls.append("on"), lambda: calls.append("off"),
                          lambda: calls.append("undo"))
        return switches._each(targets, do)

    switches.SWITCHES["failing"] = failing
    try:
        (outcome,) = apply_fixes(model, [FixSpec("failing", "*")])
    finally:
        del switches.SWITCHES["failing"]
    assert outcome.status == "failed" and outcome.toggle is None
    assert calls == ["done", "undo"]


def test_several_toggles_switch_together() -> None:
    seen: list[str] = []
    toggles = [Toggle(lambda n=n: seen.append(f"on {n}"), lambda n=n: seen.append(f"off {n}"))
               for n in range(2)]
    both = switches.together(toggles)
    both.off()
    both.on()
    both.undo()
    assert seen == ["off 1", "off 0", "on 0", "on 1", "off 1", "off 0"]


@pytest.mark.parametrize("optimizer_kind", [torch.optim.AdamW, torch.optim.SGD])
def test_channels_last_switches_the_optimizer_state_with_the_parameters(
        optimizer_kind: type[torch.optim.Optimizer]) -> None:
    """A fused optimizer on CUDA refuses parameters and moments of different layouts: the
    state of the target's 4-D parameters follows each switch."""
    model = build()
    options = {"momentum": 0.9} if optimizer_kind is torch.optim.SGD else {}
    optimizer = optimizer_kind(model.parameters(), lr=1e-3, **options)
    x = torch.randn(4, 3, 6, 6)
    train_step(model, optimizer, x)  # the state exists, in the parameters' layout
    toggle = applied(model, FixSpec("channels_last", "0"))
    weight = model[0].weight
    for turn in range(TOGGLES):
        for switch in (toggle.off, toggle.on):
            switch()
            train_step(model, optimizer, x)
            held = [v for v in optimizer.state[weight].values()
                    if isinstance(v, torch.Tensor) and v.dim() == 4]
            assert held, turn
            assert all(v.stride() == weight.stride() for v in held), (turn, switch)


def test_channels_last_lays_out_a_3d_convolution_in_3d() -> None:
    """A video network's ``Conv3d`` and ``BatchNorm3d`` (R3D-18's): 5-D weights, inputs and
    momentum become ``channels_last_3d`` (``module.to(memory_format=torch.channels_last)``
    refuses a 5-D tensor), the 4-D ones of a 2-D convolution beside them ``channels_last``;
    the step computes what it computed, and off puts every layout back."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(),
                          nn.Flatten(1, 2), nn.Conv2d(8 * 4, 4, 3, padding=1))
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(2, 3, 4, 6, 6)
    train_step(model, optimizer, x)  # the momentum exists, in the weights' layout
    train_step(reference, torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9), x)
    volume, plane = model[0].weight, model[4].weight
    assert not volume.is_contiguous(memory_format=torch.channels_last_3d)
    assert not plane.is_contiguous(memory_format=torch.channels_last)
    toggle = applied(model, FixSpec("channels_last", ""))  # the whole model
    assert volume.is_contiguous(memory_format=torch.channels_last_3d)
    assert plane.is_contiguous(memory_format=torch.channels_last)
    assert optimizer.state[volume]["momentum_buffer"].stride() == volume.stride()
    seen: list[torch.memory_format] = []
    model[0].register_forward_pre_hook(
        lambda _, args: seen.append(torch.channels_last_3d if args[0].is_contiguous(
            memory_format=torch.channels_last_3d) else torch.contiguous_format))
    torch.testing.assert_close(model(x), reference(x))
    assert seen == [torch.channels_last_3d]
    toggle.off()
    assert volume.is_contiguous() and plane.is_contiguous()
    assert optimizer.state[volume]["momentum_buffer"].is_contiguous()


def test_compile_refuses_a_module_another_fix_gave_a_forward() -> None:
    model = build()
    outcomes = apply_fixes(model, [FixSpec("gelu_tanh", "3"), FixSpec("compile", "3"),
                                   FixSpec("compile", "2"), FixSpec("pad_linear", "2")])
    assert [o.status for o in outcomes] == ["applied", "failed", "applied", "failed"]
    assert "forward set on the instance" in str(outcomes[1].error)
    assert "forward set on the instance" in str(outcomes[3].error)


def test_a_subclass_keeping_a_built_in_forward_is_compiled_through_its_instance() -> None:
    class Net(nn.Sequential):
        pass

    compiled, counting = counting_backend()
    model = Net(nn.Linear(4, 4), nn.GELU())
    x = torch.randn(2, 4)
    with torch.no_grad():
        expected = model(x)
        applied(model, FixSpec("compile", "", {"backend": counting}))
        assert torch.equal(model(x), expected)
    assert compiled


@pytest.mark.parametrize("optimizer_kind", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD])
def test_fused_optimizer_switches_the_flag_and_trains_as_the_unfused_step(
        optimizer_kind: type[torch.optim.Optimizer]) -> None:
    """Made after the fix was applied (as a script makes its optimizer after instrument()),
    the optimizer steps fused while on and with its own flags while off; the step counts
    follow, and the parameters stay those of the same training without the fix."""
    options = {"momentum": 0.9} if optimizer_kind is torch.optim.SGD else {}
    reference, model = build(), build()
    toggle = applied(model, FixSpec("fused_optimizer"))
    optimizers = [optimizer_kind(m.parameters(), lr=1e-3, **options) for m in (reference, model)]
    flags = [(g.get("fused"), g.get("foreach")) for g in optimizers[1].param_groups]
    x = torch.randn(4, 3, 6, 6)
    for turn in range(TOGGLES):
        for switch, fused in ((toggle.on, True), (toggle.off, False)):
            switch()
            for m, optimizer in zip((reference, model), optimizers, strict=True):
                train_step(m, optimizer, x)
            group = optimizers[1].param_groups[0]
            assert (group["fused"], group["foreach"]) == ((True, False) if fused else flags[0])
            for a, b in zip(reference.parameters(), model.parameters(), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=str(turn))
    steps = [held["step"] for held in optimizers[1].state.values() if "step" in held]
    assert all(int(step) == 2 * TOGGLES for step in steps)
    toggle.on()
    toggle.undo()  # the flags as they were, at once, and the hook gone
    assert [(g.get("fused"), g.get("foreach")) for g in optimizers[1].param_groups] == flags
    train_step(model, optimizers[1], x)
    assert [(g.get("fused"), g.get("foreach")) for g in optimizers[1].param_groups] == flags
