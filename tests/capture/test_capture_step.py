"""torch_nsight.step(): which steps open the measured ranges, and what they are named."""

from __future__ import annotations

import pytest

import torch_nsight
from torch_nsight.analyze.attribute import attribute_ranges
from torch_nsight.capture.script.step import reset_steps, step
from torch_nsight.environment import STEPS_ENV
from torch_nsight.naming import MEASURE_MESSAGE

UNDER_NCU = {"NVTX_INJECTION64_PATH": "/opt/nvidia/libnvtx-injection.so"}


class Ranges:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.open: dict[int, str] = {}

    def start_range(self, message: str) -> int:
        handle = len(self.events)
        self.open[handle] = message
        self.events.append(("start", message))
        return handle

    def end_range(self, handle: int) -> None:
        self.events.append(("end", self.open.pop(handle)))


@pytest.fixture(autouse=True)
def _fresh_count():
    reset_steps()
    yield
    reset_steps()


def test_only_the_chosen_steps_open_the_measured_ranges() -> None:
    ranges = Ranges()
    env = {**UNDER_NCU, STEPS_ENV: "1:3"}
    measured = []
    for _ in range(5):
        with step(environ=env, emitter=ranges) as current:
            measured.append(current.measured)
    assert measured == [False, True, True, False, False]
    starts = [m for kind, m in ranges.events if kind == "start"]
    assert starts == [MEASURE_MESSAGE, "sweep;variant=;shape=;run=1",
                      MEASURE_MESSAGE, "sweep;variant=;shape=;run=2"]
    assert not ranges.open  # every range ended
    # the reporter reads the step index back as the kernels' run
    _, _, run, *_ = attribute_ranges((), tuple(starts[:2]), ())
    assert run == 1


def test_no_ranges_without_a_selection_or_without_a_profiler() -> None:
    ranges = Ranges()
    for env in ({STEPS_ENV: "0:5"}, UNDER_NCU, {}):
        reset_steps()
        with step(environ=env) as current:
            assert not current.measured
    with step(environ={STEPS_ENV: "0:9"}, emitter=ranges):
        pass
    assert len(ranges.events) == 4  # an explicit emitter stands for the profiler (tests)


def test_explicit_indices_and_a_range_closed_by_an_exception() -> None:
    ranges = Ranges()
    env = {**UNDER_NCU, STEPS_ENV: "7"}
    with pytest.raises(RuntimeError), step(7, environ=env, emitter=ranges):
        raise RuntimeError("the step failed")
    assert [kind for kind, _ in ranges.events] == ["start", "start", "end", "end"]
    with pytest.raises(ValueError, match="index"):
        step(-1)


def test_public_name() -> None:
    assert torch_nsight.step is step


def test_a_step_inside_a_step_is_part_of_it(caplog: pytest.LogCaptureFixture) -> None:
    """Gradient accumulation marked twice (the micro-batches inside the optimizer step): the
    outer steps keep their numbers 0, 1, 2, ... and the inner ones open no range, with one
    warning for the process."""
    ranges = Ranges()
    env = {**UNDER_NCU, STEPS_ENV: "1:3"}
    seen = []
    for _ in range(4):
        with step(environ=env, emitter=ranges) as outer:
            for _ in range(3):
                with step(environ=env, emitter=ranges) as inner:
                    seen.append((outer.index, inner.index, inner.measured))
    assert [o for o, _, _ in seen[::3]] == [0, 1, 2, 3]
    assert all(o == i and not measured for o, i, measured in seen)
    starts = [m for kind, m in ranges.events if kind == "start"]
    assert starts == [MEASURE_MESSAGE, "sweep;variant=;shape=;run=1",
                      MEASURE_MESSAGE, "sweep;variant=;shape=;run=2"]
    assert caplog.text.count("step() entered while step 0 is open") == 1  # once
    with step(environ=env) as after:  # the loop's steps go on counting
        assert after.index == 4


def test_a_step_whose_start_fails_leaves_no_step_open(monkeypatch) -> None:
    from torch_nsight.capture.script import step as step_module

    def fail(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the status file's disk is full")

    monkeypatch.setattr(step_module, "_status", fail)
    with pytest.raises(RuntimeError, match="disk is full"), step(environ={}):
        pass
    monkeypatch.undo()
    with step(environ={}) as next_step:
        assert next_step.index == 1  # not inert: no step is left open


def test_only_an_open_step_of_this_thread_holds_a_new_one() -> None:
    """A step open on another thread, or one entered and dropped without leaving it (a
    callback that raised), leaves this thread's next steps counted."""
    import gc
    import threading

    entered, release = threading.Event(), threading.Event()

    def other_loop() -> None:
        with step(environ={}):
            entered.set()
            release.wait(5)

    worker = threading.Thread(target=other_loop)
    worker.start()
    entered.wait(5)
    with step(environ={}) as mine:
        assert mine.index == 1  # counted: the other thread's open step is not its outer
    release.set()
    worker.join()
    step(environ={}).__enter__()  # never left, then dropped
    gc.collect()
    with step(environ={}) as later:
        assert later.index == 3  # counted: inert, it would be 2, the dropped step's
