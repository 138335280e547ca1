"""Progress of a sweep: JSON status lines from the child, one line on stderr in the parent.

The child appends one JSON object per line to its status file (:class:`StatusWriter`);
the parent tails the file (:class:`StatusReader`) and shows where the sweep is
(:class:`ProgressLine`): shape i of n, kernels profiled so far, elapsed time and an estimate.
Events: ``start`` (pid, items, device), ``item_start`` / ``item_end`` (index, variant,
shape, status, elapsed_s), ``done``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger(__name__)


class StatusWriter:
    """Appends JSON status lines to a file (child side); never raises on I/O errors."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def emit(self, event: str, **fields: Any) -> None:
        """Append one event line.

        Args:
            event: the event name.
            **fields: JSON-serializable details.
        """
        line = json.dumps({"event": event, "time": time.time(), **fields}, default=str)
        try:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError as err:  # progress is best effort
            logger.debug("could not write status line to %s: %s", self.path, err)


class StatusReader:
    """Reads the status lines a child has appended since the last call (parent side)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[dict[str, Any]]:
        """Return the complete new events (a half-written last line waits for the next call)."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            if not line.strip():
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                logger.debug("ignored a malformed status line: %r", line[:200])
        return events


def format_seconds(seconds: float) -> str:
    """``75.0`` -> ``01:15``; ``3725`` -> ``1:02:05``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class ProgressLine:
    """One status line on stderr: rewritten in place on a terminal, one line per change
    elsewhere (notebooks, CI logs). Silent when ``quiet``."""

    def __init__(self, total: int, *, quiet: bool = False, stream: TextIO | None = None,
                 profiling: bool = True) -> None:
        self.total = total
        self.quiet = quiet
        self.profiling = profiling
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.done = 0
        self.kernels = 0
        self.current: list[str] = []
        self._last = ""
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def text(self) -> str:
        """The line as it would be shown now."""
        elapsed = time.monotonic() - self.started
        if self.done >= self.total:
            parts = [f"torch_nsight sweep: {self.total}/{self.total} shapes done"]
        else:
            parts = [f"torch_nsight sweep: shape {self.done + 1}/{self.total}"]
        if self.current:
            parts[0] += f" ({', '.join(self.current)})"
        parts.append(f"{self.kernels} kernels profiled" if self.profiling else "dry run")
        parts.append(f"{format_seconds(elapsed)} elapsed")
        if 0 < self.done < self.total:
            left = elapsed / self.done * (self.total - self.done)
            parts.append(f"~{format_seconds(left)} left")
        return " | ".join(parts)

    def refresh(self, *, force: bool = False) -> None:
        """Show the line if it changed (on a terminal: also when time moved on)."""
        if self.quiet:
            return
        text = self.text()
        if self._tty:
            self.stream.write("\r" + text.ljust(len(self._last)))
            self.stream.flush()
            self._last = text
        elif force or self._key(text) != self._key(self._last):
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last = text

    @staticmethod
    def _key(text: str) -> str:
        # off a terminal, only a new shape (not a new kernel or second) earns a new line
        return text.split(" | ")[0]

    def finish(self) -> None:
        """End the line (a newline on a terminal)."""
        if not self.quiet and self._tty and self._last:
            self.stream.write("\n")
            self.stream.flush()


def print_summary(profile: Any, *, n: int = 5, stream: TextIO | None = None) -> None:
    """Print the hotspot table of each shape (and variant) of ``profile`` to ``stream``.

    Args:
        profile: a :class:`torch_nsight.Profile`.
        n: rows per shape.
        stream: where to write (default stderr).
    """
    from torch_nsight.render import render_table

    stream = stream if stream is not None else sys.stderr
    kernels = profile.kernels
    if kernels is None or kernels.empty:
        return
    keys = [c for c in ("variant", "shape") if c in kernels and kernels[c].nunique() > 1]
    groups = kernels.groupby(keys, dropna=False, sort=False) if keys else [((), kernels)]
    for key, rows in groups:
        key = key if isinstance(key, tuple) else (key,)
        title = ", ".join(f"{k}={v}" for k, v in zip(keys, key, strict=True)
                          if v is not None and v == v and v != "")
        part = type(profile)(kernels=rows, meta=profile.meta)
        stream.write(f"\nhotspots{' (' + title + ')' if title else ''}:\n")
        stream.write(render_table(part, "hotspots", n=n, by="time") + "\n")
    stream.flush()
