"""The chosen steps of a user's own script under PyTorch's profiler (``profile --timeline``).

``torch-nsight profile --timeline --steps 10:12 -- python train.py`` runs the script plainly
with :data:`~torch_nsight.environment.TIMELINE_ENV` set to the output folder. Then
:func:`torch_nsight.instrument` sends its ranges to PyTorch's profiler (not NVTX), and
:class:`torch_nsight.step` drives one :class:`TimelineSession` per process: the profiler
starts when the first chosen step starts; each chosen step runs inside its labelled range
and ends with a synchronisation (its window then ends with its last GPU activity); after the
last chosen step (or at exit) the trace is written, gzip'd, with the folder's manifest, as
:func:`torch_nsight.timeline` writes them.

The profiler and the synchronisation lengthen the recorded steps, so the steps around the
window are timed as they run: a CUDA event is recorded (never waited on) when each of the
steps before the window starts, when the first chosen step starts, and when each of up to
:data:`PACED_STEPS` steps after the window starts. A period is the time from one step's
start to the next on the GPU's stream. The early steps still pay one-time costs (the
allocator growing, cuDNN's autotuning, lazy initialisation) and the steps after it the
profiler's residue, so the step timed without the profiler (``bare_ns`` in the manifest) is
the median of the warm periods chosen by :func:`steady_period`; with their spread (``bare_min_ns``,
``bare_max_ns``) and whether they agree (``bare_stable``). The manifest is written when the
window ends and again once the steps after it are timed (or at exit). The GPU busy share of
the verdict is the recorded steps' GPU work over ``bare_ns``.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from pathlib import Path
from typing import Any

from torch_nsight import formats
from torch_nsight.files import gzip_file
from torch_nsight.naming import format_measure_range
from torch_nsight.status import current_rank

logger = logging.getLogger(__name__)

__all__ = ["TimelineSession", "session", "after_window", "steady_period"]

_LOCK = threading.Lock()
_SESSIONS: dict[str, TimelineSession] = {}
#: How many of the steps just before the window are timed: the earliest ones run while the
#: GPU's clocks, the allocator and the libraries' caches are still warming up.
PACED_STEPS = 10
#: Per output folder, (step index, CUDA event at its start) of the steps before the window,
#: and of those after it.
_PACE: dict[str, list[tuple[int, Any]]] = {}
_AFTER: dict[str, list[tuple[int, Any]]] = {}


def pace(folder: str, index: int, *, after: bool = False) -> None:
    """Record a CUDA event at the start of step ``index`` (no wait; nothing where CUDA is
    not in use), a step before the window or, with ``after``, after it."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    with _LOCK:
        (_AFTER if after else _PACE).setdefault(str(Path(folder)), []).append((index, event))


#: Steps timed without the profiler that differ more than this share of their median
#: (max - min) do not agree: the verdict says its busy share is uncertain.
UNSTABLE_SPREAD = 0.3


def _periods(marks: list[tuple[int, Any]], first: int) -> list[float]:
    """The start-to-start periods (ns) of consecutive marked steps from step ``first`` on."""
    marks[-1][1].synchronize()
    return [1e6 * a.elapsed_time(b) for (i, a), (j, b) in zip(marks, marks[1:], strict=False)
            if j == i + 1 and i >= first]


def steady_period(before: list[float], after: list[float]) -> dict[str, Any]:
    """The step time without the profiler from the periods (ns) of the steps before and
    after the window, in step order.

    Both sides only ever lengthen a step: the earliest steps before the window pay one-time
    costs, so only the later half of them counts; the steps after it can run slower for a
    while (measured on an H200: +28% on an MLP and +53% on a ViT-S training step, the
    profiler's residue), and the first of them takes its teardown. Each side's median is an
    upper estimate, and the lower of the two is taken (the later half before the window
    alone where fewer than three steps followed it). Returns ``bare_ns``, ``bare_steps``,
    ``bare_min_ns``, ``bare_max_ns`` (of the side taken), ``bare_basis`` (``before`` or
    ``after``) and ``bare_stable`` (their spread under :data:`UNSTABLE_SPREAD` of the
    median); empty when no period was timed.
    """
    import statistics

    sides = [(warm, basis) for warm, basis in ((before[len(before) // 2:], "before"),
                                               (after[1:] if len(after) >= 3 else [], "after"))
             if warm]
    if not sides:
        return {}
    warm, basis = min(sides, key=lambda side: statistics.median(side[0]))
    median = statistics.median(warm)
    return {"bare_ns": median, "bare_steps": len(warm), "bare_min_ns": min(warm),
            "bare_max_ns": max(warm), "bare_basis": basis,
            "bare_stable": bool(median > 0 and
                                (max(warm) - min(warm)) / median <= UNSTABLE_SPREAD)}


def unprofiled_period(folder: str) -> dict[str, Any]:
    """:func:`steady_period` of the steps timed around the window (see the module
    docstring), from step 1 on (step 0 pays one-time costs); empty where none was timed."""
    with _LOCK:  # taken: a second recording in this process times its own steps
        marks = _PACE.pop(str(Path(folder)), [])
        later = _AFTER.pop(str(Path(folder)), [])
    before = _periods(marks[-PACED_STEPS - 1:], 1) if len(marks) >= 2 else []
    after = _periods(later, 0) if len(later) >= 2 else []
    return steady_period(before, after)


def _trace_name(environ: os._Environ[str] | dict[str, str]) -> str:
    rank = current_rank(environ)
    return "trace.json" if rank is None else f"trace-rank{rank}.json"


class TimelineSession:
    """PyTorch's profiler around the chosen steps of this process.

    Args:
        folder: where the trace and the manifest go.
        last: the index of the last chosen step (the trace is written after it); None: no
            last one (``--steps A:``: the trace is written at exit).
    """

    def __init__(self, folder: Path, last: int | None) -> None:
        self.folder = folder
        self.last = last
        self.trace = folder / _trace_name(os.environ)
        self._profiler: Any = None
        self._emitter: Any = None
        self._done = False
        self._packed: Path | None = None
        self._before: list[tuple[int, Any]] = []
        self._retimed = False
        atexit.register(self.retime)
        atexit.register(self.finish)  # runs first (last registered)

    def enter(self, index: int) -> None:
        """Start the profiler if needed, then open step ``index``'s labelled range."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        from torch_nsight.capture.ranges.emitter import RecordFunctionEmitter

        if self._done:
            return
        if self._profiler is None:
            pace(str(self.folder), index)  # the end of the last step timed unprofiled
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            self._profiler = profile(activities=activities)
            self._profiler.__enter__()
            self._emitter = RecordFunctionEmitter()
            logger.info("torch_nsight: recording the timeline of steps up to %s",
                        "the end" if self.last is None else self.last)
        self._emitter.push(format_measure_range(run=index))

    def exit(self, index: int) -> None:
        """Close step ``index``'s range, wait for its GPU work; after the last, write."""
        import torch

        if self._done or self._profiler is None:
            return
        self._emitter.pop()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if self.last is not None and index >= self.last:
            self.finish()

    def finish(self) -> None:
        """Stop the profiler and write the trace and manifest (once; at exit at the latest).
        The steps before the window are not forgotten: the manifest is written again with
        the steps after it (:meth:`after`), or at exit."""
        if self._done or self._profiler is None:
            return
        self._done = True
        self._profiler.__exit__(None, None, None)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._profiler.export_chrome_trace(str(self.trace))
        packed = gzip_file(self.trace)
        self._packed = packed
        with _LOCK:  # kept for the second writing, with the steps after the window
            self._before = list(_PACE.get(str(self.folder), []))
        write_manifest(self.folder, {packed.name: unprofiled_period(str(self.folder))})
        logger.info("torch_nsight: wrote the timeline %s", packed)

    def after(self, index: int) -> None:
        """Step ``index`` after the window starts: time it, and once :data:`PACED_STEPS`
        of them (and the one after) have started, write the manifest with them."""
        if not self._done or self._retimed or self._packed is None:
            return
        pace(str(self.folder), index, after=True)
        with _LOCK:
            count = len(_AFTER.get(str(self.folder), []))
        if count > PACED_STEPS:
            self.retime()

    def retime(self) -> None:
        """Write the manifest again with the steps timed after the window (once)."""
        if self._retimed or self._packed is None:
            return
        self._retimed = True
        with _LOCK:
            if len(_AFTER.get(str(self.folder), [])) < 3:
                _AFTER.pop(str(self.folder), None)
                return  # too few after the window: the first writing stands
            _PACE[str(self.folder)] = self._before
        try:
            write_manifest(self.folder, {self._packed.name: unprofiled_period(str(self.folder))})
        except Exception as err:  # noqa: BLE001 - never into the user's program
            logger.warning("torch_nsight: could not time the steps after the window (%s)", err)


def write_manifest(folder: Path, timed: dict[str, dict[str, Any]] | None = None) -> None:
    """Write the folder's manifest, naming every trace in it (each rank rewrites it, keeping
    what the others timed).

    Args:
        folder: the output folder.
        timed: per trace file name, this process's unprofiled step time (``bare_ns``...).
    """
    import json

    import torch

    from torch_nsight.capture.calls.settings import describe_settings, read_settings

    settings = read_settings()
    try:
        before = {item.get("trace"): item for item in json.loads(
            (folder / formats.TIMELINE_MANIFEST).read_text(encoding="utf-8")).get("items", [])}
    except (OSError, ValueError, AttributeError):
        before = {}
    traces = sorted(p.name for p in folder.glob("trace*.json.gz"))
    timed = timed or {}
    # this process's trace gets what it timed now; another rank's keeps what it wrote
    items = [{"variant": "", "shape": "", "trace": name, "status": "ok",
              **(timed[name] if name in timed else before.get(name, {}))} for name in traces]
    formats.write_json(folder / formats.TIMELINE_MANIFEST, {
        "kind": formats.TIMELINE_KIND, "format": formats.TIMELINE_FORMAT,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "items": items, "settings": {**settings, "summary": describe_settings(settings)}})


def after_window(folder: str, index: int) -> None:
    """Step ``index``, after the window of ``folder``'s session, starts: time it."""
    with _LOCK:
        found = _SESSIONS.get(folder)
    if found is not None:
        found.after(index)


def session(folder: str, last: int | None) -> TimelineSession:
    """This process's session for ``folder`` (made on first use)."""
    with _LOCK:
        found = _SESSIONS.get(folder)
        if found is None:
            found = _SESSIONS[folder] = TimelineSession(Path(folder), last)
        return found
