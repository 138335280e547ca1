"""Backward ranges: nesting, modules whose inputs need no gradient, partial backward passes,
activation checkpointing. ``w:<module>`` lines are markers written where autograd computes
that module's weight gradient: they must sit inside the module's backward range."""

from __future__ import annotations

import copy
import logging
import threading
import warnings

import pytest
import torch
from capture_models import (
    STACK_FORWARD,
    BasicBlock,
    ConvNet,
    ProbedLinear,
    Recorder,
    Stack,
    TinyResNet,
    probe,
)
from torch import nn
from torch.utils.checkpoint import checkpoint

from torch_nsight.capture.ranges.stack import STACK


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


class TwoBranches(nn.Module):
    """Two probed linears on the same input, summed."""

    def __init__(self) -> None:
        super().__init__()
        self.a = ProbedLinear(4, 4)
        self.b = ProbedLinear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x)


def test_deferred_range_closes_when_a_sibling_starts(recorder: Recorder) -> None:
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


def test_outputs_in_dicts_and_lists_get_backward_ranges(recorder: Recorder) -> None:
    class DictOut(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = ProbedLinear(4, 4)

        def forward(self, x: torch.Tensor) -> dict[str, object]:
            return {"hidden": self.lin(x), "cache": [x * 2], "steps": 3}

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = DictOut()
            self.head = ProbedLinear(4, 1)

        def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
            out = self.body(x)
            return [self.head(out["hidden"]), out["cache"][0]]

    model = Model()
    probe(model, recorder.emitter)
    recorder.instrument(model)
    x = torch.randn(2, 4, requires_grad=True)
    out = model(x)
    assert isinstance(out, list) and out[1].shape == (2, 4)
    (out[0].sum() + out[1].sum()).backward()
    expected = (model.head.weight @ model.body.lin.weight + 2).detach().expand_as(x)
    torch.testing.assert_close(x.grad, expected)
    assert recorder.lines() == [
        "Model", "  body", "    body.lin", "  head",
        "bwd:Model", "  bwd:head", "    w:head", "  bwd:body", "    bwd:body.lin",
        "      w:body.lin",
    ]


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
    out = model(torch.randn(3, 4))  # grad on: the output's own node carries the hook
    assert out.grad_fn.name() == "AddmmBackward0" and "torch_nsight" in out.grad_fn.metadata
    recorder.clear()
    out.sum().backward()
    assert recorder.lines() == [line for line in STACK_BACKWARD if "w:" not in line]


def test_backward_false_adds_no_backward_ranges(recorder: Recorder) -> None:
    model = Stack()
    recorder.instrument(model, backward=False)
    out = model(torch.randn(3, 4, requires_grad=True))
    assert "torch_nsight" not in out.grad_fn.metadata
    out.sum().backward()
    assert recorder.lines() == STACK_FORWARD


def test_no_pytorch_hook_warnings(recorder: Recorder) -> None:
    # No module backward hook is used, so PyTorch has nothing to warn about (its full
    # backward hooks warn at every backward of a module whose inputs need no gradient).
    model = Stack()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recorder.instrument(model)
        model(torch.randn(3, 4)).sum().backward()
    assert not caught


class InplaceResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        out += x  # like torchvision's ResNet blocks
        return out


def run_both(model: nn.Module, recorder: Recorder, x: torch.Tensor, *,
             probed: bool = False) -> None:
    """Train one step of ``model`` instrumented and of an uninstrumented copy; compare."""
    reference = copy.deepcopy(model)
    if probed:
        probe(model, recorder.emitter)
    recorder.instrument(model)
    model(x).square().sum().backward()
    x_reference = x.detach().requires_grad_(x.requires_grad)
    reference(x_reference).square().sum().backward()
    for (name, got), want in zip(model.named_parameters(), reference.parameters(),
                                 strict=True):
        torch.testing.assert_close(got.grad, want.grad, msg=name)
    if x.requires_grad:
        torch.testing.assert_close(x.grad, x_reference.grad)
    for got, want in zip(model.buffers(), reference.buffers(), strict=True):
        torch.testing.assert_close(got, want)  # batch-norm running statistics


@pytest.mark.parametrize("input_requires_grad", [True, False])
def test_inplace_add_on_module_output(recorder: Recorder, input_requires_grad: bool) -> None:
    model = InplaceResidual()
    run_both(model, recorder, torch.randn(2, 4, requires_grad=input_requires_grad))
    assert recorder.lines() == ["InplaceResidual", "  lin", "bwd:InplaceResidual", "  bwd:lin"]
    assert STACK.snapshot() == []


def test_resnet_basic_block(recorder: Recorder) -> None:
    # In-place ReLU on a submodule's output and on its own input, `out += identity` on the
    # block's input, batch norm in training mode; the ReLU module is called twice.
    model = BasicBlock().train()
    run_both(model, recorder, torch.randn(2, 4, 6, 6, requires_grad=True))
    forward = ["conv1", "bn1", "relu", "conv2", "bn2", "relu"]
    backward = ["relu", "bn2", "conv2", "relu", "bn1", "conv1"]
    assert recorder.lines() == ["BasicBlock", *(f"  {m}" for m in forward),
                                "bwd:BasicBlock", *(f"  bwd:{m}" for m in backward)]
    assert recorder.threads() == {threading.get_ident()}


def test_resnet_with_downsampling_block(recorder: Recorder) -> None:
    model = TinyResNet().train()
    run_both(model, recorder, torch.randn(2, 3, 8, 8))
    backward = [line for line in recorder.lines() if "bwd:" in line]
    assert backward[:4] == ["bwd:TinyResNet", "  bwd:fc", "  bwd:pool", "  bwd:layer2"]
    assert backward[4:9] == [
        "    bwd:layer2.relu", "    bwd:layer2.downsample", "      bwd:layer2.downsample.1",
        "      bwd:layer2.downsample.0", "    bwd:layer2.bn2",
    ]
    assert backward[-4:] == ["  bwd:stem", "    bwd:stem.2", "    bwd:stem.1", "    bwd:stem.0"]
    assert STACK.snapshot() == []


def test_conv_net_with_inplace_relu_in_training_mode(recorder: Recorder) -> None:
    # Conv2d, BatchNorm2d, ReLU(inplace=True) in nn.Sequential, three times; the model
    # that raised "a view and is being modified inplace" with full backward hooks.
    model = ConvNet().train()
    run_both(model, recorder, torch.randn(2, 3, 16, 16))

    def stage(i: int, indent: str, prefix: str = "", order: tuple[int, ...] = (0, 1, 2)) -> list[str]:
        return [f"{indent}{prefix}features.{i}"] + [
            f"{indent}  {prefix}features.{i}.{j}" for j in order]

    assert recorder.lines() == [
        "ConvNet", "  features", *stage(0, "    "), *stage(1, "    "), *stage(2, "    "),
        "  pool", "  fc",
        "bwd:ConvNet", "  bwd:fc", "  bwd:pool", "  bwd:features",
        *(line for i in (2, 1, 0) for line in stage(i, "    ", "bwd:", (2, 1, 0))),
    ]


def test_input_used_after_the_module_closes_at_the_next_call_outside(
    recorder: Recorder,
) -> None:
    # `x` gets its gradient only when both branches are done: `b`'s range closes when `a`'s
    # opens, as `a` did not run inside `b`.
    run_both(TwoBranches(), recorder, torch.randn(2, 4, requires_grad=True), probed=True)
    assert recorder.lines()[3:] == [
        "bwd:TwoBranches", "  bwd:b", "    w:b", "  bwd:a", "    w:a",
    ]


def test_retained_graph_gets_ranges_at_every_backward(recorder: Recorder) -> None:
    model = Stack()
    probe(model, recorder.emitter)
    recorder.instrument(model)
    out = model(torch.randn(3, 4, requires_grad=True)).sum()
    out.backward(retain_graph=True)
    out.backward()
    assert recorder.lines() == STACK_FORWARD + STACK_BACKWARD + STACK_BACKWARD
    assert STACK.snapshot() == []


def test_backward_on_another_thread_gets_its_ranges_there(recorder: Recorder) -> None:
    # The hooks run on the thread that runs the backward nodes (on CPU, the one calling
    # backward()); the weight-gradient markers, written by autograd nodes, sit inside.
    model = Stack()
    probe(model, recorder.emitter)
    recorder.instrument(model)
    out = model(torch.randn(3, 4, requires_grad=True)).sum()
    worker = threading.Thread(target=out.backward)
    worker.start()
    worker.join()
    assert recorder.lines() == STACK_FORWARD
    assert recorder.lines(worker.ident) == STACK_BACKWARD
