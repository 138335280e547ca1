"""Forward ranges: names, nesting, balance and threads, as recorded by the emitter."""

from __future__ import annotations

import threading

import pytest
import torch
from capture_models import MLP, STACK_FORWARD, Recorder, Stack
from torch import nn

from torch_nsight.capture.ranges.stack import STACK


def test_forward_ranges_nest_by_qualified_name(recorder: Recorder) -> None:
    model = Stack()
    handle = recorder.instrument(model, backward=False)
    with torch.no_grad():
        model(torch.randn(3, 4))
    assert recorder.lines() == STACK_FORWARD
    assert recorder.threads() == {threading.get_ident()}
    assert handle.messages[""] == "Stack"
    assert handle.messages["layers.1.down"] == "layers.1.down"
    assert handle.names == tuple(name for name, _ in model.named_modules())


def test_every_call_gets_its_own_range(recorder: Recorder) -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(self.lin(x))

    model = Twice()
    recorder.instrument(model, backward=False)
    with torch.no_grad():
        model(torch.randn(2, 4))
        model(torch.randn(2, 4))
    assert recorder.lines() == ["Twice", "  lin", "  lin"] * 2


def test_shared_submodule_gets_its_first_name(recorder: Recorder) -> None:
    class Wrapper(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            lin = nn.Linear(4, 4)
            self.a = Wrapper(lin)
            self.b = Wrapper(lin)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    model = Shared()
    handle = recorder.instrument(model)
    x = torch.randn(2, 4, requires_grad=True)
    model(x).sum().backward()
    assert handle.names == ("", "a", "a.inner", "b")
    assert recorder.lines() == [
        "Shared", "  a", "    a.inner", "  b", "    a.inner",
        "bwd:Shared", "  bwd:b", "    bwd:a.inner", "  bwd:a", "    bwd:a.inner",
    ]


def test_keyword_inputs(recorder: Recorder) -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
            return self.lin(x) * scale

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scaled = Scaled()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.scaled(x=x, scale=2.0)

    model = Outer()
    x = torch.randn(2, 4, requires_grad=True)
    expected = model(x)
    recorder.instrument(model)
    out = model(x=x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    # Keyword inputs are invisible to PyTorch's backward hooks, so the backward of `scaled`
    # starts deferred and closes at the end of the pass: still balanced and nested.
    assert recorder.lines() == [
        "Outer", "  scaled", "    scaled.lin",
        "bwd:Outer", "  bwd:scaled", "    bwd:scaled.lin",
    ]


class Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom")


class Raising(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.inner = nn.Sequential(nn.Linear(4, 4), Boom())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(self.lin(x))


@pytest.mark.parametrize("ops", [False, True])
def test_ranges_balance_when_forward_raises(recorder: Recorder, ops: bool) -> None:
    model = Raising()
    recorder.instrument(model, ops=ops)
    with pytest.raises(ValueError, match="boom"):
        model(torch.randn(2, 4, requires_grad=True))
    assert recorder.lines() == ["Raising", "  lin", "  inner", "    inner.0", "    inner.1"]
    assert STACK.snapshot() == []
    assert torch.overrides._get_current_function_mode() is None
    # the next call starts from a clean stack
    recorder.clear()
    with pytest.raises(ValueError):
        model(torch.randn(2, 4))
    assert recorder.lines()[0] == "Raising"


def test_depth_limit(recorder: Recorder) -> None:
    model = Stack()
    handle = recorder.instrument(model, depth=2, backward=False)
    with torch.no_grad():
        model(torch.randn(3, 4))
    assert handle.names == ("", "inp", "layers", "layers.0", "layers.1")
    assert recorder.lines() == ["Stack", "  inp", "  layers.0", "  layers.1"]


def test_depth_zero_is_the_root_only(recorder: Recorder) -> None:
    model = Stack()
    recorder.instrument(model, depth=0, backward=False)
    with torch.no_grad():
        model(torch.randn(3, 4))
    assert recorder.lines() == ["Stack"]


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"include": "layers.*.down"}, ("layers.0.down", "layers.1.down")),
        ({"include": nn.SiLU}, ("layers.0.act", "layers.1.act")),
        ({"include": ["", "inp"]}, ("", "inp")),
        ({"include": MLP, "exclude": "layers.1"}, ("layers.0",)),
        ({"exclude": ["layers.*", nn.ModuleList]}, ("", "inp")),
        ({"depth": 1, "exclude": ""}, ("inp", "layers")),
    ],
)
def test_include_and_exclude(recorder: Recorder, options: dict, names: tuple) -> None:
    model = Stack()
    handle = recorder.instrument(model, backward=False, **options)
    assert handle.names == names
    with torch.no_grad():
        model(torch.randn(3, 4))
    called = [line.strip() for line in recorder.lines()]
    assert called == [handle.messages[name] for name in names if name != "layers"]


def test_ranges_are_kept_per_thread(recorder: Recorder) -> None:
    models = [Stack(), Stack()]
    for model in models:
        recorder.instrument(model)
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def train(model: nn.Module) -> None:
        try:
            start.wait()
            for _ in range(5):
                model(torch.randn(3, 4, requires_grad=True)).sum().backward()
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=train, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    tids = {thread.ident for thread in threads}
    assert recorder.threads() == tids
    for tid in tids:
        lines = recorder.lines(tid)
        assert lines[: len(STACK_FORWARD)] == STACK_FORWARD
        assert lines.count("Stack") == 5
        assert lines.count("bwd:Stack") == 5
