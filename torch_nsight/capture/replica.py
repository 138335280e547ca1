"""The range emitter of a sweep's child: module ranges, and replica ranges around replicas.

A sweep profiles one of each group of identical siblings (see
:mod:`torch_nsight.collect.child.siblings`); the others run inside a start/end range
:data:`REPLICA_MESSAGE` that ``ncu --nvtx-exclude`` leaves out of replay.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch_nsight import naming
from torch_nsight.capture import emitter as emitters
from torch_nsight.capture.emitter import RangeEmitter

logger = logging.getLogger(__name__)

REPLICA_MESSAGE = naming.REPLICA_MESSAGE


class ReplicaMarkers:
    """The range emitter the child instruments its model with: every push and pop goes on to
    ``inner``; inside :meth:`marking`, each named module's own range, forward or backward,
    also runs inside a start/end NVTX range :data:`REPLICA_MESSAGE`, which
    ``ncu --nvtx-exclude`` leaves out.

    The replica ranges follow the module ranges of :func:`torch_nsight.instrument`, so the
    window left out is exactly the one whose kernels would be attributed to the replica, and
    no module hook is installed: PyTorch's full backward hooks wrap a module's inputs and
    outputs in identity autograd nodes, which changes the graph and so where every backward
    range opens and closes, in modules that are not replicas too.

    Args:
        inner: Where the ranges go (default: an :class:`~torch_nsight.capture.NvtxEmitter`).
    """

    def __init__(self, inner: RangeEmitter | None = None) -> None:
        if inner is None:
            inner = emitters.NvtxEmitter()
        self.inner = inner
        self.marked: frozenset[str] = frozenset()
        self.open: dict[str, list[Any]] = {}
        self.lock = threading.Lock()
        self.local = threading.local()  # messages of unbound push() calls, per thread

    def _start(self, message: str) -> None:
        import nvtx

        handle = nvtx.start_range(REPLICA_MESSAGE, domain=naming.DOMAIN)
        with self.lock:
            self.open.setdefault(message, []).append(handle)

    def _end(self, message: str) -> None:
        import nvtx

        with self.lock:
            handles = self.open.get(message)
            handle = handles.pop() if handles else None
        if handle is not None:
            nvtx.end_range(handle)

    def bind(self, message: str) -> tuple[Callable[[], None], Callable[[], None]]:
        """Return the zero-argument push and pop of the range ``message``."""
        bind = getattr(self.inner, "bind", None)
        if bind is not None:
            push, pop = bind(message)
        else:
            push, pop = functools.partial(self.inner.push, message), self.inner.pop

        def push_marked() -> None:
            if message in self.marked:
                self._start(message)
            push()

        def pop_marked() -> None:
            pop()
            if message in self.marked:
                self._end(message)

        return push_marked, pop_marked

    def push(self, message: str) -> None:
        """Open the range ``message`` on the calling thread."""
        if not hasattr(self.local, "messages"):
            self.local.messages = []
        self.local.messages.append(message)
        if message in self.marked:
            self._start(message)
        self.inner.push(message)

    def pop(self) -> None:
        """Close the innermost range opened by :meth:`push` on the calling thread."""
        messages = getattr(self.local, "messages", None)
        message = messages.pop() if messages else None
        self.inner.pop()
        if message is not None and message in self.marked:
            self._end(message)

    @contextlib.contextmanager
    def marking(self, names: Iterable[str]) -> Iterator[None]:
        """Mark the modules ``names`` (qualified, not the root) as replicas while inside.

        Replica ranges still open on leaving (a backward range that autograd's device thread
        closes only when it next opens one) are ended then. Use one per measured iteration.
        """
        self.marked = frozenset(message for name in names
                                for message in (name, naming.backward_message(name)))
        try:
            yield
        finally:
            import nvtx

            self.marked = frozenset()
            with self.lock:
                leftover = [h for handles in self.open.values() for h in handles]
                self.open.clear()
            if leftover:
                logger.debug("closing %d replica range(s) left open", len(leftover))
            for handle in leftover:
                nvtx.end_range(handle)

