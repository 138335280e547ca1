"""Backward ranges: nesting, modules whose inputs need no gradient, partial backward passes,
activation checkpointing. ``w:<module>`` lines are markers written where autograd computes
that module's weight gradient: they must sit inside the module's backward range."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from capture_models import STACK_FORWARD, ProbedLinear, Recorder, Stack, probe
from torch import nn
from torch.utils.checkpoint import checkpoint

from torch_nsight.capture.stack import STACK


def layer_backward(i: int) -> list[str]:
    return [
        f"  bwd:layers.{i}",
        f"    bwd:layers.{i}.down",
        f"      w:layers.{i}.down",
        f"    bwd:layers.{i}.up",
        f"      w:layers.{i}.up",
        f"    bwd:layers.{i}.act",
        f"    bwd:layers.{i}.gate",
        f"      w:layers.{i}.gate",
    ]


STACK_BACKWARD = ["bwd:Stack", *layer_backward(1), *layer_backward(0), "  bwd:inp", "    w:inp"]


@pytest.mark.parametrize("input_requires_grad", [True, False])
def test_backward_ranges_nest_and_hold_weight_gradients(
    recorder: Recorder, input_requires_grad: bool
) -> None:
    # Without a gradient for the input, PyTorch fires the post-hooks of the root and of
    # `inp` before their weight gradients are computed; their ranges must stay open.
    model = Stack()
    probe(model, recorder.emitter)
    recorder.instrument(model)
    model(torch.randn(3, 4, requires_grad=input_requires_grad)).sum().backward()
    assert recorder.lines() == STACK_FORWARD + STACK_BACKWARD
    assert STACK.snapshot() == []


def test_deferred_range_closes_when_a_sibling_starts(recorder: Recorder) -> None:
    class TwoBranches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = ProbedLinear(4, 4)
            self.b = ProbedLinear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(x)

    model = TwoBranches()
    probe(model, recorder.emitter)
    recorder.instrument(model)
    model(torch.randn(2, 4)).sum().backward()
    assert recorder.lines() == [
        "TwoBranches", "  a", "  b",
        "bwd:TwoBranches", "  bwd:b", "    w:b", "  bwd:a", "    w:a",
    ]


@pytest.mark.parametrize("how", ["autograd.grad", "backward(inputs=...)"])
def test_partial_backward_closes_ranges_whose_post_hook_never_fires(
    recorder: Recorder, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    model = Stack()
    probe(model, recorder.emitter)
    recorder.instrument(model)
    weight = model.layers[1].down.weight
    out = model(torch.randn(3, 4, requires_grad=True)).sum()
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        if how == "autograd.grad":
            torch.autograd.grad(out, [weight])
        else:
            out.backward(inputs=[weight])
    assert recorder.lines()[len(STACK_FORWARD):] == [
        "bwd:Stack", "  bwd:layers.1", "    bwd:layers.1.down", "      w:layers.1.down",
    ]
    assert not caplog.records
    # a full backward pass afterwards is unaffected
    recorder.clear()
    model(torch.randn(3, 4, requires_grad=True)).sum().backward()
    assert recorder.lines() == STACK_FORWARD + STACK_BACKWARD


class Checkpointed(Stack):
    def __init__(self, use_reentrant: bool) -> None:
        super().__init__()
        self.use_reentrant = use_reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for layer in self.layers:
            h = checkpoint(layer, h, use_reentrant=self.use_reentrant)
        return h


def layer_forward(i: int, indent: str) -> list[str]:
    return [indent + line for line in
            [f"layers.{i}"] + [f"  layers.{i}.{p}" for p in ("gate", "act", "up", "down")]]


@pytest.mark.parametrize("input_requires_grad", [True, False])
def test_reentrant_checkpoint_recomputes_inside_backward(
    recorder: Recorder, input_requires_grad: bool
) -> None:
    model = Checkpointed(use_reentrant=True)
    reference = Checkpointed(use_reentrant=True)
    reference.load_state_dict(model.state_dict())
    probe(model, recorder.emitter)
    recorder.instrument(model)
    x = torch.randn(3, 4, requires_grad=input_requires_grad)
    model(x).sum().backward()
    reference(x.detach().requires_grad_(input_requires_grad)).sum().backward()
    assert recorder.lines() == [
        "Checkpointed", "  inp", *layer_forward(0, "  "), *layer_forward(1, "  "),
        "bwd:Checkpointed",
        *layer_forward(1, "  "), *layer_backward(1),
        *layer_forward(0, "  "), *layer_backward(0),
        "  bwd:inp", "    w:inp",
    ]
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)


@pytest.mark.parametrize("input_requires_grad", [True, False])
def test_non_reentrant_checkpoint_recomputes_inside_backward(
    recorder: Recorder, input_requires_grad: bool
) -> None:
    model = Checkpointed(use_reentrant=False)
    probe(model, recorder.emitter)
    recorder.instrument(model)
    model(torch.randn(3, 4, requires_grad=input_requires_grad)).sum().backward()

    def layer(i: int) -> list[str]:
        lines = layer_backward(i)
        # the recomputation runs when the first saved tensor (of `down`) is needed
        return lines[:2] + layer_forward(i, "      ") + lines[2:]

    assert recorder.lines() == [
        "Checkpointed", "  inp", *layer_forward(0, "  "), *layer_forward(1, "  "),
        "bwd:Checkpointed", *layer(1), *layer(0), "  bwd:inp", "    w:inp",
    ]


def test_no_backward_work_without_gradients(recorder: Recorder) -> None:
    model = Stack()
    recorder.instrument(model)
    with torch.no_grad():
        out = model(torch.randn(3, 4))
    assert out.grad_fn is None
    out = model(torch.randn(3, 4))  # grad on: the output goes through the hook node
    assert out.grad_fn is not None and "BackwardHook" in out.grad_fn.name()
    recorder.clear()
    out.sum().backward()
    assert recorder.lines() == [line for line in STACK_BACKWARD if "w:" not in line]


def test_backward_false_adds_no_backward_ranges(recorder: Recorder) -> None:
    model = Stack()
    recorder.instrument(model, backward=False)
    out = model(torch.randn(3, 4, requires_grad=True))
    assert "BackwardHook" not in out.grad_fn.name()
    out.sum().backward()
    assert recorder.lines() == STACK_FORWARD


def test_pytorch_early_hook_warning_is_silenced(recorder: Recorder) -> None:
    model = Stack()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle = recorder.instrument(model)
        model(torch.randn(3, 4)).sum().backward()
        assert not [w for w in caught if "Full backward hook" in str(w.message)]
        handle.remove()
        # after remove() PyTorch's own hooks warn as usual again
        model.register_full_backward_hook(lambda *args: None)
        model(torch.randn(3, 4)).sum().backward()
        assert [w for w in caught if "Full backward hook" in str(w.message)]


class InplaceResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        out += x  # like torchvision's ResNet blocks
        return out


def test_inplace_on_module_output_needs_backward_false(recorder: Recorder) -> None:
    # PyTorch's full backward hooks forbid in-place changes to a module's output; this
    # pins that known limitation and its workaround.
    model = InplaceResidual()
    handle = recorder.instrument(model)
    with pytest.raises(RuntimeError, match="modified inplace"):
        model(torch.randn(2, 4, requires_grad=True))
    handle.remove()
    recorder.instrument(model, backward=False)
    model(torch.randn(2, 4, requires_grad=True)).sum().backward()
    assert recorder.lines()[-2:] == ["InplaceResidual", "  lin"]
