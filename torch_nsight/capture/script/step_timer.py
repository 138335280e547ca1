"""Bare step times: the chosen steps timed in the user's own script, for
``torch-nsight profile --verify``.

When the command names a file (:attr:`~torch_nsight.environment.ScriptEnv.timing`) and
chooses steps (:attr:`~torch_nsight.environment.ScriptEnv.steps`), :func:`torch_nsight.step`
times each chosen step (the steps before them are the warm-up): with CUDA events on the
current stream when CUDA is in use (their elapsed times read once, after the last chosen
step), else with ``time.perf_counter`` (a CPU run, where the plumbing is tested). The file
(:func:`~torch_nsight.verify_exchange.read_timing`) is written when the last chosen step ends, before
its status line (the command stops the script on that line), and at exit if the steps did
not all run. It also holds the loss each step passed (:meth:`torch_nsight.step.record_loss`)
and what became of the fixes :func:`torch_nsight.instrument` was asked to apply.

Under :attr:`~torch_nsight.environment.ScriptEnv.alternate` the fixes applied are switched
off and on before each step's work (:class:`Alternation`, in the ABBA order of
:func:`~torch_nsight.verify_exchange.fix_on_at`, the warm-up included: both forms are warm when
timed), outside the timed region, and each timed step says whether they were on.

In a run of several processes only rank 0 (``RANK``, else ``LOCAL_RANK``) times its steps;
every rank alternates its fixes, in the same order.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import time
from typing import Any, Protocol

from torch_nsight.environment import APPLY_ENV, ScriptEnv, Steps
from torch_nsight.files import atomic_output
from torch_nsight.status import StatusWriter
from torch_nsight.verify_exchange import TIMING_SCHEMA, fix_on_at

logger = logging.getLogger(__name__)

__all__ = ["Alternation", "StepTimer", "alternate", "stop_alternating", "switch_fixes",
           "timer_for"]


class Toggle(Protocol):
    """Fixes applied that switch off and on (:class:`torch_nsight.capture.fixes.switches.Toggle`)."""

    def on(self) -> None: ...

    def off(self) -> None: ...


class Alternation:
    """The fixes switched off and on before each step, in the ABBA order of
    :func:`~torch_nsight.verify_exchange.fix_on_at` counted from the first chosen step; on after
    the last. A switch that raises is logged and kept (:attr:`error`, written with the step
    times), and the fixes stay as they are from then on.

    Args:
        toggle: the fixes, on when given.
        chosen: the steps timed.
    """

    def __init__(self, toggle: Toggle, chosen: Steps) -> None:
        self.toggle = toggle
        self.chosen = chosen
        self.error: str | None = None
        self._on = True

    def switch(self, index: int) -> bool | None:
        """Switch the fixes for step ``index`` (before its work); whether they are on
        (None: no longer alternating)."""
        if self.error is not None:
            return None
        last = self.chosen.last
        wanted = (last is not None and index > last) or fix_on_at(index, self.chosen.first)
        if wanted != self._on:
            try:
                (self.toggle.on if wanted else self.toggle.off)()
            except Exception as err:  # noqa: BLE001 - reported, the script goes on
                self.error = f"{type(err).__name__}: {err}"
                logger.warning("torch_nsight: could not switch the fixes %s before step %d "
                               "(they stay as they are): %s", "on" if wanted else "off",
                               index, self.error)
                return None
            self._on = wanted
        return wanted


#: This process's alternation (at most one: the fixes apply to the first model only).
_ALTERNATION: list[Alternation] = []


def alternate(toggle: Toggle, script: ScriptEnv) -> Alternation | None:
    """Switch ``toggle`` off and on before each step from now on, when the command asks for
    it (:attr:`~torch_nsight.environment.ScriptEnv.alternate`, with steps chosen); else
    None."""
    if not script.alternate:
        return None
    if script.steps is None:
        logger.warning("torch_nsight: not alternating the fixes: asked to, with no steps "
                       "chosen")
        return None
    _ALTERNATION[:] = [Alternation(toggle, script.steps)]
    return _ALTERNATION[0]


def switch_fixes(index: int) -> bool | None:
    """Before step ``index``'s work: the fixes switched for it, and whether they are on
    (None: they do not alternate)."""
    return _ALTERNATION[0].switch(index) if _ALTERNATION else None


def stop_alternating() -> None:
    """Leave the fixes as they are from now on (for tests: a fresh process)."""
    _ALTERNATION.clear()


class StepTimer:
    """Times the chosen steps of this process and writes them to one JSON file.

    Args:
        path: the file to write.
        chosen: the steps to time.
        status: where the timed steps' status lines go (None: nowhere).
        requested: the fixes asked for, as JSON objects (``{"error": ...}``: what the
            command asked for could not be read).
    """

    def __init__(self, path: str, chosen: Steps, status: StatusWriter | None = None,
                 requested: list[dict[str, Any]] | None = None) -> None:
        self.path = path
        self.chosen = chosen
        self.status = status
        self.requested = requested or []
        self.fixes: list[dict[str, Any]] = []
        self.written = False
        self._clock: str | None = None
        self._open: dict[int, Any] = {}
        self._steps: dict[int, dict[str, Any]] = {}
        self._fix_on: dict[int, bool | None] = {}
        self._losses: dict[int, Any] = {}
        self._last = -1

    def times(self, index: int) -> bool:
        """Whether step ``index`` is one this timer times."""
        return index in self.chosen and not self.written

    def _mark(self) -> Any:
        if self._clock is None:
            import torch

            cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
            self._clock = "cuda_events" if cuda else "perf_counter"
        if self._clock == "perf_counter":
            return time.perf_counter_ns()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def started(self, index: int, *, fix_on: bool | None = None) -> None:
        """Step ``index`` starts (call last thing before the step's own work), the fixes
        on or off for it (None: not alternating)."""
        if self.status is not None:
            self.status.emit("item_start", index=index, shape=f"step {index}")
        self._fix_on[index] = fix_on
        self._open[index] = self._mark()

    def ended(self, index: int, *, failed: bool) -> None:
        """Step ``index`` ended (call first thing after its work); the last chosen one writes
        the file, then says it ended."""
        start = self._open.pop(index, None)
        if start is None:
            return
        self._steps[index] = {"index": index, "start": start, "end": self._mark(),
                              "status": "error" if failed else "ok"}
        self._last = index
        last = index == self.chosen.last
        if last:
            self.write()
        if self.status is not None:
            self.status.emit("item_end", index=index, shape=f"step {index}",
                             status="error" if failed else "ok")

    def record_loss(self, index: int, loss: Any) -> None:
        """Keep step ``index``'s loss (a tensor is read when the file is written: no sync
        per step)."""
        detach = getattr(loss, "detach", None)
        self._losses[index] = detach() if callable(detach) else loss

    def note_fixes(self, outcomes: list[dict[str, Any]]) -> None:
        """What became of the fixes asked for (one JSON object each)."""
        self.fixes.extend(outcomes)

    def _elapsed_ns(self, step: dict[str, Any]) -> float:
        start, end = step["start"], step["end"]
        if isinstance(start, int):
            return float(end - start)
        end.synchronize()
        return float(start.elapsed_time(end)) * 1e6

    def _loss(self, index: int) -> float | None:
        value = self._losses.get(index)
        if value is None:
            return None
        try:
            return float(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError, RuntimeError) as err:
            logger.warning("torch_nsight: step %d's loss is not a number: %s", index, err)
            return None

    def document(self) -> dict[str, Any]:
        """The file's content (reads the CUDA events: synchronizes once)."""
        steps = [{"index": i, "time_ns": self._elapsed_ns(s), "status": s["status"],
                  "loss": self._loss(i), "fix_on": self._fix_on.get(i)}
                 for i, s in sorted(self._steps.items())]
        return {"schema": TIMING_SCHEMA, "clock": self._clock or "perf_counter",
                "pid": os.getpid(), "steps": steps, "requested": self.requested,
                "fixes": self.fixes,
                "toggle_error": _ALTERNATION[0].error if _ALTERNATION else None}

    def write(self) -> None:
        """Write the file whole (once); a failure is logged, never raised into the script."""
        if self.written:
            return
        self.written = True
        try:
            with atomic_output(self.path) as temp:
                temp.write_text(json.dumps(self.document(), default=str), encoding="utf-8")
        except Exception as err:  # noqa: BLE001 - never break the user's script
            logger.warning("torch_nsight: could not write the step times to %s: %s",
                           self.path, err)


_TIMERS: dict[str, StepTimer | None] = {}


def timer_for(script: ScriptEnv, rank: int | None = None) -> StepTimer | None:
    """This process's timer, made on first use from what the command told it; None when no
    file is asked for, no steps are chosen, or this is not rank 0 (``rank``, as
    :func:`~torch_nsight.status.current_rank` reads it)."""
    if script.timing is None:
        return None
    path = str(script.timing)
    if path not in _TIMERS:
        _TIMERS[path] = _make(path, script, rank)
    return _TIMERS[path]


def _make(path: str, script: ScriptEnv, rank: int | None) -> StepTimer | None:
    if rank:
        return None
    if script.steps is None:
        logger.warning("torch_nsight: not timing steps: a file for their times is given "
                       "(%s), no steps are chosen", path)
        return None
    refused = script.refusal(APPLY_ENV)
    requested = ([{"error": refused}] if refused is not None
                 else [f.to_json() for f in script.fixes])
    timer = StepTimer(path, script.steps,
                      None if script.status is None else StatusWriter(script.status),
                      requested)
    atexit.register(timer.write)  # the steps did not all run: what ran, and the fixes
    return timer
