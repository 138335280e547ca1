"""The chosen steps of a user's own script under PyTorch's profiler (``profile --timeline``).

``torch-nsight profile --timeline --steps 10:12 -- python train.py`` runs the script plainly
with :data:`~torch_nsight.capture.detect.TIMELINE_ENV` set to the output folder. Then
:func:`torch_nsight.instrument` sends its ranges to PyTorch's profiler (not NVTX), and
:class:`torch_nsight.step` drives one :class:`TimelineSession` per process: the profiler
starts when the first chosen step starts; each chosen step runs inside its labelled range
and ends with a synchronisation (its window then ends with its last GPU activity); after the
last chosen step (or at exit) the trace is written, gzip'd, with the folder's manifest, as
:func:`torch_nsight.timeline` writes them.
"""

from __future__ import annotations

import atexit
import gzip
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from torch_nsight import formats
from torch_nsight.naming import format_measure_range

logger = logging.getLogger(__name__)

__all__ = ["TimelineSession", "session"]

_LOCK = threading.Lock()
_SESSIONS: dict[str, TimelineSession] = {}


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
        packed = self.trace.with_name(self.trace.name + ".gz")
        with open(self.trace, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        self.trace.unlink()
        write_manifest(self.folder)
        logger.info("torch_nsight: wrote the timeline %s", packed)


def write_manifest(folder: Path) -> None:
    """Write the folder's manifest, naming every trace in it (each rank rewrites it)."""
    import torch

    from torch_nsight.capture.settings import describe_settings, read_settings

    settings = read_settings()
    traces = sorted(p.name for p in folder.glob("trace*.json.gz"))
    formats.write_json(folder / formats.TIMELINE_MANIFEST, {
        "kind": formats.TIMELINE_KIND, "format": formats.TIMELINE_FORMAT,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "items": [{"variant": "", "shape": "", "trace": name, "status": "ok"}
                  for name in traces],
        "settings": {**settings, "summary": describe_settings(settings)}})


def session(folder: str, last: int) -> TimelineSession:
    """This process's session for ``folder`` (made on first use)."""
    with _LOCK:
        found = _SESSIONS.get(folder)
        if found is None:
            found = _SESSIONS[folder] = TimelineSession(Path(folder), last)
        return found
