"""Progress lines between processes: a child appends JSON events to a status file, the
parent tails it.

The writer is a sweep's child (:mod:`torch_nsight.collect.child.worker`) or, under
``torch-nsight profile``, the user's own script (:func:`torch_nsight.step` writes where
:data:`STATUS_ENV` says). Events: ``start`` (pid, items, device), ``item_start`` /
``item_end`` (index, variant, shape, status, elapsed_s), ``done``. Also the step selection
that both sides read (:func:`parse_steps`): the ``profile`` command never imports torch.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# What ``torch-nsight profile`` tells the script it runs, read by torch_nsight.step() and
# torch_nsight.instrument():
#: the steps to profile (``10:12``);
STEPS_ENV = "TORCH_NSIGHT_STEPS"
#: the status file the chosen steps write to;
STATUS_ENV = "TORCH_NSIGHT_STATUS"
#: ``1``: identical siblings are checked on the step before the chosen ones and profiled once.
REPLICATE_ENV = "TORCH_NSIGHT_REPLICATE"
#: ``1``: a rehearsal (``profile --dry-run``): the script runs as under ncu but without it (the
#: steps, the calls table and the sibling check run, nothing is carried), and its steps say
#: what they did in their status lines.
REHEARSAL_ENV = "TORCH_NSIGHT_REHEARSAL"
#: ``1``/``0``: instrument() installs its hooks, or not, whatever else the environment says
#: (``0`` in ``profile --verify``'s bare runs: the step as the user runs it).
INSTRUMENT_ENV = "TORCH_NSIGHT_INSTRUMENT"


def current_rank(environ: Mapping[str, str]) -> int | None:
    """This process's rank as torchrun sets it (``RANK``, else ``LOCAL_RANK``), or None."""
    for name in ("RANK", "LOCAL_RANK"):
        value = environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def parse_steps(text: str) -> range:
    """Read a step selection: ``12`` (one step), ``10:12`` (10 and 11), ``10:`` (10 on).

    Raises:
        ValueError: the text is not of that form (the message quotes it).
    """
    start, sep, stop = text.strip().partition(":")
    if not start and not sep:
        raise ValueError(f"steps {text!r}: expected N, A:B or A: (step indices from 0, "
                         "B excluded)")
    try:
        first = int(start) if start else 0
        if not sep and first >= 0:
            return range(first, first + 1)
        last = int(stop) if stop else 2**62 if sep else first + 1
    except ValueError:
        raise ValueError(f"steps {text!r}: expected N, A:B or A: (step indices from 0, "
                         "B excluded)") from None
    if first < 0:
        raise ValueError(f"steps {text!r}: step indices start at 0 (torch_nsight.step() "
                         "numbers the loop's steps 0, 1, 2...); there is no step from the end")
    if last <= first:
        raise ValueError(f"steps {text!r}: need 0 <= A < B")
    return range(first, last)


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
