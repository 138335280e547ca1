"""The chosen steps timed bare (TORCH_NSIGHT_TIMING): the file the script writes back, with
each step's time and loss, on a real training loop on the CPU; under
TORCH_NSIGHT_VERIFY_ALTERNATE the fixes applied switched off and on before each step, ABBA."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from torch_nsight.capture.fixes import switches
from torch_nsight.capture.fixes.switches import Toggle, apply_requested_fixes
from torch_nsight.capture.script.step import reset_steps, step
from torch_nsight.capture.script.step_timer import stop_alternating
from torch_nsight.environment import ALTERNATE_ENV, APPLY_ENV, STATUS_ENV, STEPS_ENV, TIMING_ENV
from torch_nsight.status import StatusReader
from torch_nsight.verify_exchange import fix_on_at, read_timing


@pytest.fixture(autouse=True)
def _fresh_count(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh script: steps from 0, no fix applied, TF32 as it was."""
    monkeypatch.setattr(switches, "_DONE", set())
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    reset_steps()
    yield
    reset_steps()
    stop_alternating()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def train(environ: dict[str, str], steps: int, *, raise_at: int | None = None,
          seen: list[bool] | None = None) -> list[float]:
    """A tiny MLP's training loop marked with step(), its fixes asked for by ``environ``;
    the losses it passed (and, in ``seen``, whether TF32 was on in each step)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    apply_requested_fixes(model, environ)  # as instrument() does
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    losses = []
    for index in range(steps):
        try:
            with step(environ=environ) as s:
                if seen is not None:
                    seen.append(torch.backends.cuda.matmul.allow_tf32)
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
    assert {s["index"]: s["loss"] for s in times.steps} == {
        i: pytest.approx(losses[i]) for i in range(3, 9)}
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
    with pytest.raises(ValueError, match="schema 1 or 2"):
        read_timing(path)
    path.write_text(json.dumps({"schema": 1, "steps": [{"index": 1}]}))
    with pytest.raises(ValueError, match="index and time_ns"):
        read_timing(path)


def test_the_fixes_alternate_abba_over_the_warm_up_and_the_timed_steps(tmp_path: Path) -> None:
    path = tmp_path / "steps.json"
    torch.backends.cuda.matmul.allow_tf32 = False
    seen: list[bool] = []
    train({TIMING_ENV: str(path), STEPS_ENV: "5:13", APPLY_ENV: "tf32", ALTERNATE_ENV: "1"},
          16, seen=seen)
    # off, on, on, off, ... from the first timed step, back over the warm-up: both warm
    assert seen[:13] == [False, False, True, True, False] + [False, True, True, False] * 2
    assert seen[:13] == [fix_on_at(i, 5) for i in range(13)]
    assert all(seen[13:])  # after the timed steps: the fix as applied
    times = read_timing(path)
    assert [(s["index"], s["fix_on"]) for s in times.steps] == [
        (i, seen[i]) for i in range(5, 13)]
    assert times.toggle_error is None and times.fixes[0]["status"] == "applied"


def test_without_alternating_the_steps_say_nothing_of_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "steps.json"
    seen: list[bool] = []
    train({TIMING_ENV: str(path), STEPS_ENV: "2:6", APPLY_ENV: "tf32"}, 8, seen=seen)
    assert all(seen)
    assert [s["fix_on"] for s in read_timing(path).steps] == [None] * 4


def test_a_toggle_that_raises_stops_the_alternation_and_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def cannot(model: nn.Module, targets: object, options: object) -> Toggle:
        def off() -> None:
            raise RuntimeError("CUDA out of memory")
        return Toggle(lambda: None, off)

    monkeypatch.setitem(switches.SWITCHES, "tf32", cannot)
    path = tmp_path / "steps.json"
    train({TIMING_ENV: str(path), STEPS_ENV: "2:6", APPLY_ENV: "tf32", ALTERNATE_ENV: "1"}, 8)
    times = read_timing(path)
    assert times.toggle_error == "RuntimeError: CUDA out of memory"
    assert [s["fix_on"] for s in times.steps] == [None] * 4


def test_a_file_of_schema_1_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"schema": 1, "clock": "perf_counter", "steps": [
        {"index": 3, "time_ns": 10.0, "status": "ok", "loss": 1.5}]}))
    times = read_timing(path)
    assert times.steps[0]["fix_on"] is None and times.toggle_error is None
    assert times.times_ns == [10.0] and times.steps[0]["loss"] == 1.5
