"""The chosen steps of a user's own script under PyTorch's profiler (``profile --timeline``).

``torch-nsight profile --timeline --steps 10:12 -- python train.py`` runs the script plainly
with :data:`~torch_nsight.capture.detect.TIMELINE_ENV` set to the output folder. Then
:func:`torch_nsight.instrument` sends its ranges to PyTorch's profiler (not NVTX), and
:class:`torch_nsight.step` drives one :class:`TimelineSession` per process: the profiler
starts when the first chosen step starts; each chosen step runs inside its labelled range
and ends with a synchronisation (its window then ends with its last GPU activity); after the
last chosen step (or at exit) the trace is written, gzip'd, with the folder's manifest, as
:func:`torch_nsight.timeline` writes them.

The profiler and the synchronisation lengthen the recorded steps, so the steps before the
window are timed as they run: a CUDA event is recorded (never waited on) when each of them
starts, and when the first chosen step starts. Their median period, the time from one step's
start to the next on the GPU's stream, is the step timed without the profiler (``bare_ns``
in the manifest, from step 1 on: step 0 pays one-time costs); the GPU busy share of the
verdict is the recorded steps' GPU work over it.
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

logger = logging.getLogger(__name__)

__all__ = ["TimelineSession", "session"]

_LOCK = threading.Lock()
_SESSIONS: dict[str, TimelineSession] = {}
#: How many of the steps just before the window are timed: the earliest ones run while the
#: GPU's clocks, the allocator and the libraries' caches are still warming up.
PACED_STEPS = 10
#: Per output folder, (step index, CUDA event at its start) of the steps before the window.
_PACE: dict[str, list[tuple[int, Any]]] = {}


def pace(folder: str, index: int) -> None:
    """Record a CUDA event at the start of step ``index`` (no wait; nothing where CUDA is
    not in use)."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    with _LOCK:
        _PACE.setdefault(str(Path(folder)), []).append((index, event))


def unprofiled_period(folder: str) -> dict[str, Any]:
    """The median start-to-start period of the (up to :data:`PACED_STEPS`) steps just before
    the window (from step 1 on), in ns, and how many steps it is over; empty where none
    was timed."""
    import statistics

    with _LOCK:  # taken: a second recording in this process times its own steps
        marks = _PACE.pop(str(Path(folder)), [])
    if len(marks) < 2:
        return {}
    marks[-1][1].synchronize()  # long done: the chosen steps ran after it
    periods = [1e6 * first.elapsed_time(second)
               for (i, first), (j, second) in zip(marks, marks[1:], strict=False)
               if j == i + 1 and i >= 1][-PACED_STEPS:]  # the warmest: nearest the window
    if not periods:
        return {}
    return {"bare_ns": statistics.median(periods), "bare_steps": len(periods)}


def _trace_name(environ: os._Environ[str] | dict[str, str]) -> str:
    rank = environ.get("RANK") or environ.get("LOCAL_RANK")
    return f"trace-rank{int(rank)}.json" if rank and rank.isdigit() else "trace.json"


class TimelineSession:
    """PyTorch's profiler around the chosen steps of this process.

    Args:
        folder: where the trace and the manifest go.
        last: the index of the last chosen step (the trace is written after it).
    """

    def __init__(self, folder: Path, last: int) -> None:
        self.folder = folder
        self.last = last
        self.trace = folder / _trace_name(os.environ)
        self._profiler: Any = None
        self._emitter: Any = None
        self._done = False
        atexit.register(self.finish)

    def enter(self, index: int) -> None:
        """Start the profiler if needed, then open step ``index``'s labelled range."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        from torch_nsight.capture.emitter import RecordFunctionEmitter

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
            logger.info("torch_nsight: recording the timeline of steps up to %d", self.last)
        self._emitter.push(format_measure_range(run=index))

    def exit(self, index: int) -> None:
        """Close step ``index``'s range, wait for its GPU work; after the last, write."""
        import torch

        if self._done or self._profiler is None:
            return
        self._emitter.pop()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if index >= self.last:
            self.finish()

    def finish(self) -> None:
        """Stop the profiler and write the trace and manifest (once; at exit at the latest)."""
        if self._done or self._profiler is None:
            return
        self._done = True
        self._profiler.__exit__(None, None, None)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._profiler.export_chrome_trace(str(self.trace))
        packed = gzip_file(self.trace)
        write_manifest(self.folder, {packed.name: unprofiled_period(str(self.folder))})
        logger.info("torch_nsight: wrote the timeline %s", packed)


def write_manifest(folder: Path, timed: dict[str, dict[str, Any]] | None = None) -> None:
    """Write the folder's manifest, naming every trace in it (each rank rewrites it, keeping
    what the others timed).

    Args:
        folder: the output folder.
        timed: per trace file name, this process's unprofiled step time (``bare_ns``...).
    """
    import json

    import torch

    from torch_nsight.capture.settings import describe_settings, read_settings

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


def session(folder: str, last: int) -> TimelineSession:
    """This process's session for ``folder`` (made on first use)."""
    with _LOCK:
        found = _SESSIONS.get(folder)
        if found is None:
            found = _SESSIONS[folder] = TimelineSession(Path(folder), last)
        return found
