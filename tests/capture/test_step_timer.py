"""The chosen steps timed bare (TORCH_NSIGHT_TIMING): the file the script writes back, with
each step's time and loss, on a real training loop on the CPU."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from torch_nsight.capture.step import reset_steps, step
from torch_nsight.status import STATUS_ENV, STEPS_ENV, StatusReader
from torch_nsight.switches import TIMING_ENV, read_timing


@pytest.fixture(autouse=True)
def _fresh_count() -> Iterator[None]:
    reset_steps()
    yield
    reset_steps()


def train(environ: dict[str, str], steps: int, *, raise_at: int | None = None) -> list[float]:
    """A tiny MLP's training loop marked with step(); the losses it passed."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    losses = []
    for index in range(steps):
        try:
            with step(environ=environ) as s:
                loss = (model(x) - y).square().mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                s.record_loss(loss)
                losses.append(loss.item())
                if index == raise_at:
                    raise RuntimeError("out of memory")
        except RuntimeError:
            pass
    return losses


def test_the_chosen_steps_are_timed_with_their_losses(tmp_path: Path) -> None:
    path = tmp_path / "steps.json"
    status = tmp_path / "status.jsonl"
    losses = train({TIMING_ENV: str(path), STEPS_ENV: "3:9", STATUS_ENV: str(status)}, 12)
    times = read_timing(path)
    assert [s["index"] for s in times.steps] == list(range(3, 9))  # 3 warm-up steps before
    assert len(times.times_ns) == 6 and all(t > 0 for t in times.times_ns)
    assert times.clock == "perf_counter"  # no CUDA here
    assert times.losses == {i: pytest.approx(losses[i]) for i in range(3, 9)}
    assert times.fixes == [] and times.requested == []
    ended = [e for e in StatusReader(status).poll() if e["event"] == "item_end"]
    assert [e["index"] for e in ended] == list(range(3, 9))  # what stops the bare run


def test_a_step_that_raised_is_written_as_such(tmp_path: Path) -> None:
    path = tmp_path / "steps.json"
    train({TIMING_ENV: str(path), STEPS_ENV: "1:6"}, 8, raise_at=2)
    written = json.loads(path.read_text())
    assert [(s["index"], s["status"]) for s in written["steps"]] == [
        (1, "ok"), (2, "error"), (3, "ok"), (4, "ok"), (5, "ok")]
    assert len(read_timing(path).times_ns) == 4


def test_without_the_variable_nothing_is_timed(tmp_path: Path) -> None:
    train({STEPS_ENV: "1:6"}, 8)
    assert not list(tmp_path.iterdir())


def test_only_rank_0_times_its_steps(tmp_path: Path) -> None:
    path = tmp_path / "steps.json"
    train({TIMING_ENV: str(path), STEPS_ENV: "1:6", "RANK": "1"}, 8)
    assert not path.exists()


def test_a_file_of_another_kind_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"schema": 99, "steps": []}))
    with pytest.raises(ValueError, match="schema 1"):
        read_timing(path)
    path.write_text(json.dumps({"schema": 1, "steps": [{"index": 1}]}))
    with pytest.raises(ValueError, match="index and time_ns"):
        read_timing(path)
