"""Progress lines between processes: a child appends JSON events to a status file, the
parent tails it.

The writer is a sweep's child (:mod:`torch_nsight.collect.child.worker`) or, under
``torch-nsight profile``, the user's own script (:func:`torch_nsight.step` writes where
:attr:`~torch_nsight.environment.ScriptEnv.status` says). Events: ``start`` (pid, items,
device), ``item_start`` / ``item_end`` (index, variant, shape, status, elapsed_s), ``done``;
under ``profile`` also ``step``, ``siblings_checked`` and :data:`RECURRENT_EVENT`.
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

#: The event of a script's first step that found cuDNN recurrent layers (``modules``), under
#: ``profile``'s probe for automatic launch replication
#: (:mod:`torch_nsight.capture.script.recurrent`).
RECURRENT_EVENT = "recurrent"


def recurrent_modules(value: object) -> list[str]:
    """The module names a :data:`RECURRENT_EVENT`'s ``modules`` (or a manifest's memo of them)
    holds: the non-empty strings of a list; [] for anything else (the file is the script's,
    or an earlier run's, to write)."""
    if not isinstance(value, list):
        return []
    return [m for m in value if isinstance(m, str) and m]


def current_rank(environ: Mapping[str, str]) -> int | None:
    """This process's rank as torchrun sets it (``RANK``, else ``LOCAL_RANK``), or None."""
    for name in ("RANK", "LOCAL_RANK"):
        value = environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


class StatusWriter:
    """Appends JSON status lines to a file (child side); never raises on I/O errors."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def emit(self, event: str, **fields: Any) -> bool:
        """Append one event line.

        Args:
            event: the event name.
            **fields: JSON-serializable details.

        Returns:
            Whether the line was written (False: an I/O error, logged at debug level).
        """
        line = json.dumps({"event": event, "time": time.time(), **fields}, default=str)
        try:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError as err:  # progress is best effort
            logger.debug("could not write status line to %s: %s", self.path, err)
            return False
        return True


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
