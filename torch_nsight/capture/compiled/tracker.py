"""The state of compiled-graph tracking, one per process (:data:`TRACKER`): whether
Inductor's hooks are installed and its settings engaged, how many instrumentations track
compiles, the graphs seen, the forward calls whose backward graph has not run yet, which
kernel maps were carried, and the warnings already given.

:mod:`torch_nsight.capture.compiled.inductor` (tracking on and off, the hooks) and
:mod:`torch_nsight.capture.compiled.ranges` (each graph call) share it.
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from typing import Any

from torch_nsight.capture.compiled.kernel_map import CompiledGraph

logger = logging.getLogger(__name__)

__all__ = ["CompileTracker", "TRACKER"]


class CompileTracker:
    """The installed Inductor hooks and the run-time state (one per process: :data:`TRACKER`)."""

    def __init__(self) -> None:
        self.installed = False
        self.engaged = False  # Inductor's settings switched on for the users
        self.users = 0
        self.previous_level: int | None = None
        self.previous_pass: Any = None
        self.pending: dict[str, dict[str, Any]] = {}
        self.graphs: dict[int, CompiledGraph | None] = {}  # id(CompiledFxGraph) -> graph
        self.owners: dict[int, weakref.ref[Any]] = {}  # the object behind each id above
        self.forwards: collections.deque[tuple[frozenset[str], Any, str]] = (
            collections.deque(maxlen=4096))
        self.carried: set[tuple[str, bool]] = set()
        self.window = 0
        self.called = False  # a compiled graph ran since the first instrumentation
        self.compile_requested = False  # torch.compile was called while compiles were tracked
        self.warmed: set[int] = set()  # ids of the graphs called once (their first call warms)
        self.lock = threading.Lock()
        self.warned: set[str] = set()

    def warn_once(self, text: str) -> None:
        if text not in self.warned:
            self.warned.add(text)
            logger.warning("torch_nsight: %s", text)


TRACKER = CompileTracker()
