"""The calls table carried into the report (torch_nsight.capture.calls.embed): which iteration is
recorded, when it is carried, and the message round trip. The carrier kernel itself needs a
GPU (tests/report/test_carried_calls.py reads reports recorded with it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
import torch
from capture_models import Ranges
from torch import nn

import torch_nsight
from torch_nsight import formats
from torch_nsight.capture.calls import embed
from torch_nsight.capture.ranges.detect import NCU_VARIABLE
from torch_nsight.capture.script.step import reset_steps, step
from torch_nsight.environment import CARRY_LAST_ENV, STEPS_ENV


@pytest.fixture
def carried(monkeypatch) -> list[dict]:
    documents: list[dict] = []
    monkeypatch.setattr(embed, "carry_calls", lambda document: documents.append(document))
    monkeypatch.setenv(NCU_VARIABLE, "/opt/nvidia/nsight-compute/sections")
    reset_steps()
    yield documents
    reset_steps()


def _batches(model: nn.Module, count: int) -> None:
    """Iteration i runs a batch of i + 1 rows, forward and backward."""
    for index in range(count):
        with step(emitter=Ranges()):
            model(torch.randn(index + 1, 8)).sum().backward()


def _linear_batches(document: dict) -> set[int]:
    return {row["input_shapes"][1][0] for row in document["rows"]
            if row["op"] == "addmm" and row["range_stack"][-1] == "0"}


def test_under_profile_steps_the_first_chosen_step_is_carried(carried, monkeypatch) -> None:
    monkeypatch.setenv(STEPS_ENV, "2:4")
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    handle = torch_nsight.instrument(model)
    assert handle.carrier is not None and handle.carrier.per_step
    try:
        _batches(model, 5)
        assert len(carried) == 1 and _linear_batches(carried[0]) == {3}  # step 2: batch 3
        document = formats.decode_calls(formats.encode_calls(carried[0]))
        assert document == carried[0] and document["kind"] == formats.CALLS_KIND
    finally:
        handle.remove()
    assert len(carried) == 1  # once


def test_with_launches_numbered_the_first_step_is_carried_after_the_last(
        carried, monkeypatch) -> None:
    """profile --replicate-launches: ncu numbers every launch of the chosen steps from a
    launch list recorded without ncu, so the carrier's own launch comes after all of them."""
    monkeypatch.setenv(STEPS_ENV, "2:5")
    monkeypatch.setenv(CARRY_LAST_ENV, "1")
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    handle = torch_nsight.instrument(model)
    try:
        counts = []
        for index in range(6):
            with step(emitter=Ranges()):
                model(torch.randn(index + 1, 8)).sum().backward()
            counts.append(len(carried))
        assert counts == [0, 0, 0, 0, 1, 1]  # at step 4's end, the last chosen
        assert _linear_batches(carried[0]) == {3}  # what step 2 ran: batch 3
    finally:
        handle.remove()
    assert len(carried) == 1


def test_with_launches_numbered_a_last_step_that_raises_still_carries(
        carried, monkeypatch) -> None:
    """The table recorded over step 2 is carried when step 3, the last chosen, ends by
    raising: still inside the range ncu profiles."""
    monkeypatch.setenv(STEPS_ENV, "2:4")
    monkeypatch.setenv(CARRY_LAST_ENV, "1")
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    handle = torch_nsight.instrument(model)
    try:
        _steps_raising(model, 4, raise_at=3, before=lambda: carried == [])
        assert len(carried) == 1 and _linear_batches(carried[0]) == {3}
    finally:
        handle.remove()


def test_by_hand_the_first_iteration_is_carried_when_the_next_starts(carried) -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    handle = torch_nsight.instrument(model)
    try:
        assert not handle.carrier.per_step
        model(torch.randn(1, 8)).sum().backward()
        assert carried == []
        model(torch.randn(2, 8)).sum().backward()
        assert len(carried) == 1 and _linear_batches(carried[0]) == {1}
    finally:
        handle.remove()


def test_record_calls_false_and_no_ncu_carry_nothing(carried, monkeypatch) -> None:
    model = nn.Linear(8, 8)
    handle = torch_nsight.instrument(model, record_calls=False)
    assert handle.active and handle.carrier is None
    handle.remove()
    monkeypatch.delenv(NCU_VARIABLE)
    handle = torch_nsight.instrument(model, enabled=True)
    assert handle.carrier is None
    handle.remove()


@pytest.mark.parametrize("message", ["calls:not base64!", "calls:" + "eJwDAAAAAAE=", "measure"])
def test_a_damaged_message_is_refused(message: str) -> None:
    with pytest.raises(formats.FormatError):
        formats.decode_calls(message)


def test_a_chosen_step_that_raises_is_not_carried_the_next_is(carried, monkeypatch) -> None:
    monkeypatch.setenv(STEPS_ENV, "1:3")
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    handle = torch_nsight.instrument(model)
    try:
        _steps_raising(model, 4, raise_at=1)
        assert len(carried) == 1 and _linear_batches(carried[0]) == {3}  # step 2, whole
        backward = [r for r in carried[0]["rows"] if r["range_stack"][-1:] == ["bwd:0"]]
        assert backward  # its backward is in it
    finally:
        handle.remove()


def _steps_raising(model: nn.Module, count: int, *, raise_at: int,
                   before: Callable[[], bool] = lambda: True) -> None:
    """Iteration i runs a batch of i + 1 rows; iteration ``raise_at`` raises after its
    forward (its backward never runs), ``before`` holding just then."""
    for index in range(count):
        with pytest.raises(RuntimeError) if index == raise_at else contextlib.nullcontext(), \
                step(emitter=Ranges()):
            loss = model(torch.randn(index + 1, 8)).sum()
            if index == raise_at:
                assert before()
                raise RuntimeError("out of memory, say")
            loss.backward()
