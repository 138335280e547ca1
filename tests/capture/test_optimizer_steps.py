"""An optimizer's step inside a range of its own while a model is instrumented (CPU)."""

from __future__ import annotations

import torch
from torch import nn

import torch_nsight
from torch_nsight.analyze.attribute import attribute_ranges
from torch_nsight.capture import RecordingEmitter
from torch_nsight.capture.ranges import optimizers
from torch_nsight.naming import step_message


def _train(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_a_step_is_a_range_named_by_its_optimizer() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    handle = torch_nsight.instrument(model, enabled=True)
    recording = RecordingEmitter()
    handle.step_sink = recording  # where the optimizer's range goes: the active handle's chain
    try:
        _train(model, optimizer)
    finally:
        handle.remove()
    assert [e[1:] for e in recording.events] == [("push", step_message("AdamW")),
                                                  ("pop", step_message("AdamW"))]
    # the analysis reads it as a module of that name, direction "step"
    attributed = attribute_ranges((step_message("AdamW"),), (), ())
    assert attributed[3:7] == ("AdamW", "AdamW", 0, "step")
    # without an active instrumentation, nothing is pushed
    recording.events.clear()
    _train(model, optimizer)
    assert recording.events == []


def test_a_failing_emitter_never_breaks_the_step() -> None:
    class Broken:
        def push(self, message: str) -> None:
            raise RuntimeError("no range today")

        def pop(self) -> None:
            raise RuntimeError("no range today")

    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = torch_nsight.instrument(model, enabled=True)
    handle.step_sink = Broken()  # type: ignore[assignment]
    before = model.weight.detach().clone()
    try:
        _train(model, optimizer)  # the step runs and updates the weights
    finally:
        handle.remove()
    assert not torch.equal(before, model.weight)
    assert optimizers._WATCH.failed  # off for the process, said once
    optimizers._WATCH.failed = False
