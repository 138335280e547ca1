"""``torch_nsight.step()``: mark the steps of a training or inference loop.

    for batch in loader:
        with torch_nsight.step():
            train_step(batch)

Under ``torch-nsight profile --steps 10:12 -- python train.py`` the chosen steps run inside
the start/end range ``measure`` that ``ncu --nvtx-include torch_nsight@measure`` profiles
(start/end ranges, unlike push/pop ones, also cover the kernels autograd launches from its
own thread), with a label range that gives their rows ``run`` = the step's index. The steps
to measure, and everything else the ``profile`` command tells the script, come from its
environment as one :class:`~torch_nsight.environment.ScriptEnv`, read once per step. Under
``profile --timeline`` (:attr:`~torch_nsight.environment.ScriptEnv.timeline` set) the chosen
steps are recorded by PyTorch's profiler instead (see
:mod:`torch_nsight.capture.script.profiler_steps`).

Under ``profile`` the chosen steps also write status lines (started, ended, how) to the file
:attr:`~torch_nsight.environment.ScriptEnv.status` names, which the command's progress line
reads, and the step before the first chosen one checks the identical siblings that the chosen
ones then leave out of profiling (:class:`~torch_nsight.capture.replicas.replica.ScriptReplication`).
Without a profiler attached, a step costs a few environment lookups and a counter increment.

Under ``torch-nsight profile --verify`` (:attr:`~torch_nsight.environment.ScriptEnv.timing`
set) the chosen steps are timed bare instead (:mod:`torch_nsight.capture.script.step_timer`), with
the loss each passes to :meth:`step.record_loss`; the fixes it applied are switched off or on
before each step's work (:func:`~torch_nsight.capture.script.step_timer.switch_fixes`), outside the
timed region.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from torch_nsight.capture.compiled.inductor import close_window, open_window
from torch_nsight.capture.ranges.detect import detect_profiler
from torch_nsight.capture.ranges.ranged_forward import pause_ranges
from torch_nsight.capture.script.step_timer import StepTimer, switch_fixes, timer_for
from torch_nsight.environment import ScriptEnv
from torch_nsight.naming import DOMAIN, MEASURE_MESSAGE, format_measure_range
from torch_nsight.status import StatusWriter, current_rank

if TYPE_CHECKING:
    from torch_nsight.capture.calls.embed import CallsCarrier
    from torch_nsight.capture.replicas.replica import ScriptReplication
    from torch_nsight.capture.script.profiler_steps import TimelineSession

logger = logging.getLogger(__name__)

__all__ = ["step", "reset_steps"]


_COUNTER = {"next": 0}
_LOCK = threading.Lock()
#: The steps entered and not yet left, per thread (weak: one dropped without leaving it no
#: longer counts): a step made on a thread while one is open there is inert.
_OPEN = threading.local()
_WARNED_NESTED: list[bool] = []


def reset_steps() -> None:
    """Start counting steps from 0 again (for tests, or a second loop to measure)."""
    with _LOCK:
        _COUNTER["next"] = 0
        _open_steps().clear()
        _WARNED_NESTED.clear()


def _open_steps() -> list[weakref.ref[step]]:
    """This thread's open steps, those no longer alive dropped."""
    stack: list[weakref.ref[step]] = _OPEN.__dict__.setdefault("steps", [])
    stack[:] = [ref for ref in stack if ref() is not None]
    return stack


def _warn_nested(outer: int) -> None:
    """Once per process: a step inside another is not counted."""
    if _WARNED_NESTED:
        return
    _WARNED_NESTED.append(True)
    logger.warning("torch_nsight: torch_nsight.step() entered while step %d is open on this "
                   "thread (a step inside a step): it is not counted and opens no range; mark "
                   "one level of the loop (the optimizer steps) with it", outer)


_STATUS: dict[str, StatusWriter | None] = {}


def _status(script: ScriptEnv) -> StatusWriter | None:
    """Where this process's steps report to ``torch-nsight profile`` (None: nowhere); the
    first call announces the process (its pid, for a gentle stop)."""
    if script.status is None:
        return None
    path = str(script.status)
    if path not in _STATUS:
        writer = _STATUS[path] = StatusWriter(path)
        writer.emit("start", pid=os.getpid())
    return _STATUS[path]


def _carriers() -> list[CallsCarrier]:
    """The calls carriers of the active instrumentations (see torch_nsight.capture.calls.embed)."""
    from torch_nsight.capture.ranges.registry import active_instrumentations

    return [h.carrier for h in active_instrumentations() if h.carrier is not None]


def _how_it_ended(kind: type[BaseException] | None,
                  value: BaseException | None) -> dict[str, Any]:
    """A step's end as a status code: ``ok``, ``exited`` (``sys.exit()`` inside it, with
    the exit status the process gets) or ``error`` (it raised)."""
    if kind is None:
        return {"status": "ok"}
    if isinstance(value, SystemExit):
        code = value.code
        return {"status": "exited",
                "exit_status": code if isinstance(code, int) else 0 if code is None else 1}
    return {"status": "error"}


def _what_was_recorded() -> dict[str, int]:
    """For a chosen step's status line: whether CUDA was initialized (a CPU-only step
    launches no kernel), the modules instrumented, the calls carried, the replicas and the
    repeated op calls left out of profiling, whether compiled graphs ran."""
    import torch

    from torch_nsight.capture.compiled.inductor import compiled_graphs_seen
    from torch_nsight.capture.ranges.registry import active_instrumentations

    handles = list(active_instrumentations())
    return {"cuda": int(torch.cuda.is_initialized()),  # 0: no CUDA work could have run
            "modules": sum(len(h.names) for h in handles),
            "compiled": int(compiled_graphs_seen()),
            "calls": sum(h.carrier.rows for h in handles if h.carrier is not None),
            "replicas": sum(h.replication.replicas for h in handles
                            if h.replication is not None),
            "op_replicas": sum(len(h.carrier.recorder.op_replicas.replicas) for h in handles
                               if h.carrier is not None
                               and h.carrier.recorder.op_replicas is not None)}


def _replications() -> list[ScriptReplication]:
    """The sibling replications of the active instrumentations (torch_nsight.capture.replicas.replica:
    under ``torch-nsight profile`` only)."""
    from torch_nsight.capture.ranges.registry import active_instrumentations

    return [h.replication for h in active_instrumentations() if h.replication is not None]


class step:  # noqa: N801 - used like a function: ``with torch_nsight.step():``
    """Mark one step of a loop; the steps chosen by ``torch-nsight profile --steps`` (or
    ``$TORCH_NSIGHT_STEPS``) run inside the ranges that Nsight Compute profiles.

    Steps are numbered from 0 in the order they start, across the whole process.

    Args:
        index: the step's index, if the loop keeps its own count (else the next one).
        environ: where to read the selection from (default ``os.environ``; for tests).
        emitter: where start/end ranges go: an object with ``start_range(message)`` ->
            handle and ``end_range(handle)`` (default: the ``nvtx`` package; for tests).
    """

    __slots__ = ("index", "_handles", "_environ", "_script", "_emitter", "_session", "_window",
                 "_began", "_checking", "_timer", "_inert", "__weakref__")

    def __init__(self, index: int | None = None, *, environ: Mapping[str, str] | None = None,
                 emitter: object | None = None) -> None:
        if index is not None and (not isinstance(index, int) or isinstance(index, bool)
                                  or index < 0):
            raise ValueError(f"index must be an int >= 0 or None, got {index!r}")
        open_steps = _open_steps()
        outer_step = open_steps[-1]() if open_steps else None
        outer: int | None = None if outer_step is None else outer_step.index
        with _LOCK:
            if outer is not None:  # inside another step: part of it, not a step
                index = outer
            elif index is None:
                index = _COUNTER["next"]
            if outer is None:
                _COUNTER["next"] = index + 1
        self._inert = outer is not None
        self.index: int = index
        self._handles: list[object] = []
        self._environ = os.environ if environ is None else environ
        self._script: ScriptEnv | None = None  # read when the step starts
        self._emitter = emitter
        self._session: TimelineSession | None = None
        self._window = False
        self._began = 0.0
        self._checking: list[ScriptReplication] = []
        self._timer: StepTimer | None = None

    @property
    def measured(self) -> bool:
        """Whether this step runs inside the profiled ranges (never a step made inside
        another, which is part of that one)."""
        return not self._inert and self._in_window(self._read())

    def _read(self) -> ScriptEnv:
        """What ``torch-nsight profile`` tells this step (read when it starts)."""
        return self._script if self._script is not None else ScriptEnv.from_env(self._environ)

    def _timer_for(self, script: ScriptEnv) -> StepTimer | None:
        return timer_for(script, current_rank(self._environ))

    def _in_window(self, script: ScriptEnv) -> bool:
        return script.steps is not None and self.index in script.steps and (
            self._emitter is not None or script.timeline is not None
            or detect_profiler(self._environ) is not None)

    def __enter__(self) -> step:
        if self._inert:
            _warn_nested(self.index)
            return self
        _open_steps().append(weakref.ref(self))
        try:
            return self._enter()
        except BaseException:
            self._close()
            raise

    def _close(self) -> None:
        open_steps = _open_steps()
        open_steps[:] = [ref for ref in open_steps if ref() is not self]

    def _enter(self) -> step:
        script = self._script = ScriptEnv.from_env(self._environ)  # read once per step
        folder = None if script.timeline is None else str(script.timeline)
        chosen = script.steps
        status = _status(script)
        if script.probe_launches:  # profile's automatic launch replication: may end the run
            from torch_nsight.capture.script.recurrent import probe

            probe(script, status, self.index)
        self._window = self._in_window(script)
        if folder:  # the steps timed for the verdict run as they would without torch_nsight
            pause_ranges(not self._window)
        if self._window:
            open_window()
        if self._window and status is not None:
            self._began = time.time()
            status.emit("item_start", index=self.index, shape=f"step {self.index}")
        if folder and self._window and chosen is not None:
            from torch_nsight.capture.script.profiler_steps import session

            self._session = session(folder, chosen.last)
            self._session.enter(self.index)
        elif folder and chosen is not None and self.index < chosen.first:  # timed unprofiled,
            from torch_nsight.capture.script.profiler_steps import pace  # for the verdict

            pace(folder, self.index)
        elif (folder and chosen is not None and chosen.last is not None
              and self.index > chosen.last):  # and after the window
            from torch_nsight.capture.script.profiler_steps import after_window

            after_window(folder, self.index)
        elif self._window:
            start = self._start_range
            self._handles = [start(MEASURE_MESSAGE),
                             start(format_measure_range(run=self.index))]
            for carrier in _carriers():
                carrier.step_started()
            for replication in _replications():
                replication.step_started()
        elif chosen is not None and self.index == chosen.first - 1:  # before the first chosen
            self._checking = _replications()
            for replication in self._checking:
                replication.check_started()
        if status is not None and not self._window and script.rehearsal:
            status.emit("step", index=self.index)  # how far the script got, for the dry run
        fix_on = switch_fixes(self.index)  # profile --verify: the fixes off or on, untimed
        timer = self._timer_for(script)
        if timer is not None and timer.times(self.index):  # profile --verify: last thing
            self._timer = timer
            timer.started(self.index, fix_on=fix_on)
        return self

    def record_loss(self, loss: object) -> None:
        """Give this step's loss (a scalar tensor or a number), e.g.
        ``with torch_nsight.step() as s: loss = train_step(batch); s.record_loss(loss)``.

        Under ``torch-nsight profile --verify`` the losses of the timed steps are written
        with their times (a tensor is read once after the last of them, not synchronized
        per step), and a fix that changes them beyond the tolerance is not counted;
        otherwise this does nothing.
        """
        timer = None if self._inert else self._timer_for(self._read())
        if timer is not None and self.index in timer.chosen:
            timer.record_loss(self.index, loss)

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._inert:
            return
        try:
            self._exit(kind, value)
        finally:
            self._close()

    def _exit(self, kind: type[BaseException] | None, value: BaseException | None) -> None:
        if self._timer is not None:  # first thing: the step's own work ends here
            self._timer.ended(self.index, failed=kind is not None)
            self._timer = None
        if self._session is not None:
            self._session.exit(self.index)
            self._session = None
        for replication in self._checking:
            replication.check_ended(failed=kind is not None)
        if self._checking and (checked := _status(self._read())) is not None:
            checked.emit("siblings_checked", index=self.index, failed=kind is not None,
                         groups=sum(len(r.groups) for r in self._checking),
                         replicas=sum(r.replicas for r in self._checking),
                         mismatches=[line for r in self._checking for line in r.mismatches])
        self._checking = []
        if self._handles:
            chosen = self._read().steps
            last = chosen is None or chosen.last is None or self.index >= chosen.last
            for carrier in reversed(_carriers()):  # dispatch modes leave in reverse order
                # inside the measured range, so ncu keeps the carrier; a step that raised
                # while recorded is not carried (the next chosen step is recorded instead)
                carrier.step_ended(failed=kind is not None, last=last)
            for replication in _replications():
                replication.step_ended()
        for handle in reversed(self._handles):
            self._end_range(handle)
        status = _status(self._read()) if self._began else None
        if status is not None:
            status.emit("item_end", index=self.index, shape=f"step {self.index}",
                        elapsed_s=round(time.time() - self._began, 3),
                        **_how_it_ended(kind, value), **_what_was_recorded())
            self._began = 0.0
        self._handles = []
        self._script = None
        if self._window:
            self._window = False
            close_window()

    def _start_range(self, message: str) -> object:
        if self._emitter is not None:
            return self._emitter.start_range(message)  # type: ignore[attr-defined]
        import nvtx

        return nvtx.start_range(message, domain=DOMAIN)

    def _end_range(self, handle: object) -> None:
        if self._emitter is not None:
            self._emitter.end_range(handle)  # type: ignore[attr-defined]
            return
        import nvtx

        nvtx.end_range(handle)
