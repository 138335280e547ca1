"""The autograd node hooks: kept while their graph lives, detached by remove(), and set
without touching the user's own tensor hooks."""

from __future__ import annotations

import threading

import torch
from capture_models import STACK_FORWARD, Recorder, Stack
from torch import nn

from torch_nsight.capture.ranges.hooks import HOOKS_KEY, NODE_HOOKS
from torch_nsight.capture.ranges.stack import STACK


def live_hooks_of(owner: object) -> list[object]:
    """The attached node hooks holding a frame of ``owner``."""
    return [hook for hook in NODE_HOOKS.live() if hook and any(
        frame.range.owner is owner for frame in (*hook.closes, *hook.opens))]


def test_remove_detaches_the_hooks_of_a_graph_built_before(recorder: Recorder) -> None:
    model = Stack()
    handle = recorder.instrument(model)
    out = model(torch.randn(3, 4, requires_grad=True)).sum()
    hooks = live_hooks_of(handle)
    assert hooks and all(not hook.handle for hook in hooks)  # set through the tensor
    handle.remove()
    assert not live_hooks_of(handle)
    assert all(not hook for hook in hooks)  # emptied: PyTorch calls an empty hooks dict
    recorder.clear()
    out.backward()
    assert recorder.events == []
    assert STACK.snapshot() == []
    assert model.inp.weight.grad is not None  # the backward itself ran as usual


def test_remove_keeps_the_hooks_of_another_instrumentation(recorder: Recorder) -> None:
    # Two handles share the nodes between their modules: removing one leaves the other's
    # frames on those nodes, and its backward ranges.
    model = Stack()
    first = recorder.instrument(model.layers[0], backward=True)
    second = recorder.instrument(model.layers[1], backward=True)
    out = model(torch.randn(3, 4, requires_grad=True)).sum()
    first.remove()
    recorder.clear()
    out.backward()
    assert recorder.lines() == [
        "bwd:MLP", "  bwd:down", "  bwd:up", "  bwd:act", "  bwd:gate",
    ]
    assert live_hooks_of(second)


def test_hooks_die_with_their_graph(recorder: Recorder) -> None:
    # The registry holds hooks weakly: a long run keeps only the graphs still alive.
    model = Stack()
    handle = recorder.instrument(model)
    for _ in range(20):
        model(torch.randn(3, 4, requires_grad=True)).sum().backward()
    assert live_hooks_of(handle) == []  # freed with their graph, by reference counting
    kept = model(torch.randn(3, 4, requires_grad=True))
    per_graph = len(live_hooks_of(handle))
    assert per_graph > 0
    for _ in range(20):
        model(torch.randn(3, 4, requires_grad=True)).sum().backward()
    assert len(live_hooks_of(handle)) == per_graph
    del kept


def test_backward_false_sets_no_node_hooks(recorder: Recorder) -> None:
    model = Stack()
    handle = recorder.instrument(model, backward=False)
    model(torch.randn(3, 4, requires_grad=True)).sum().backward()
    assert not live_hooks_of(handle)
    assert recorder.lines() == STACK_FORWARD


class Doubler(nn.Module):
    """A linear layer; with ``hook_inside``, its forward registers a hook on its output."""

    def __init__(self, hook_inside: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.hook_inside = hook_inside
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        if self.hook_inside:
            out.register_hook(self.seen.append)
        return out


def test_user_hooks_on_outputs_work_as_without_instrumentation(recorder: Recorder) -> None:
    # Our hook is set through the output tensor's hooks dict and the dict is then reset:
    # the user's hooks, registered before (inside forward) or after, all run once.
    model = Doubler(hook_inside=True)
    recorder.instrument(model)
    x = torch.randn(2, 4, requires_grad=True)
    out = model(x)
    assert out._backward_hooks is not None  # the user's, from inside forward
    after: list[torch.Tensor] = []
    out.register_hook(after.append)
    (out * 3).sum().backward()
    assert len(model.seen) == 1 and len(after) == 1
    torch.testing.assert_close(after[0], torch.full((2, 4), 3.0))
    assert recorder.lines()[-2:] == ["bwd:Doubler", "  bwd:lin"]
    # the output of `lin` had no hooks of its own: ours went through it, and it shows none
    plain = Doubler(hook_inside=False)
    recorder.instrument(plain)
    y = plain(x)
    assert y._backward_hooks is None
    hook = y.grad_fn.metadata[HOOKS_KEY]
    assert hook.handle is None
    z: list[torch.Tensor] = []
    y.register_hook(z.append)
    y.sum().backward()
    assert len(z) == 1


def test_a_hook_on_an_output_with_user_hooks_uses_register_prehook(recorder: Recorder) -> None:
    model = Doubler(hook_inside=True)
    recorder.instrument(model, include="")  # the root only: its output comes hooked
    out = model(torch.randn(2, 4))
    hook = out.grad_fn.metadata[HOOKS_KEY]
    assert hook.handle is not None  # the output's hooks dict is the user's: not borrowed
    out.sum().backward()
    assert recorder.lines() == ["Doubler", "bwd:Doubler"]
    assert len(model.seen) == 1


def test_remove_on_another_thread_than_the_backward(recorder: Recorder) -> None:
    model = Stack()
    handle = recorder.instrument(model)
    out = model(torch.randn(3, 4, requires_grad=True)).sum()
    remover = threading.Thread(target=handle.remove)
    remover.start()
    remover.join()
    recorder.clear()
    out.backward()
    assert recorder.events == []


class GradientInside(nn.Module):
    """Takes a gradient of an inner module inside its own forward (a gradient penalty)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(self.inner(x).square().sum(), x)
        return grad


def test_backward_inside_a_forward_run_without_gradients(recorder: Recorder) -> None:
    # The outer forward runs without gradients (its range is not on the stack); the inner
    # backward's ranges open and close inside it, on this thread, and all balance.
    model = GradientInside()
    recorder.instrument(model)
    with torch.no_grad():
        model(torch.randn(2, 4))
    assert recorder.lines() == ["GradientInside", "  inner", "  bwd:inner"]
    assert STACK.snapshot() == []
