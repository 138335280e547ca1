"""The range emitter of a sweep's child: module ranges, and replica ranges around replicas.

A sweep profiles one of each group of identical siblings (see
:mod:`torch_nsight.capture.replicas.siblings`); the others run inside a start/end range
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
from torch_nsight.capture.ranges import emitter as emitters
from torch_nsight.capture.ranges.emitter import RangeEmitter

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

    def leaving_out(self) -> bool:
        """Whether a replica range is open now (on any thread)."""
        with self.lock:
            return any(self.open.values())

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



class ScriptReplication:
    """Identical siblings profiled once in a user's script (``torch-nsight profile``).

    :func:`torch_nsight.instrument` instruments the model with :class:`ReplicaMarkers` when
    the profile command asks for it (:attr:`~torch_nsight.environment.ScriptEnv.replicate`), and
    :func:`torch_nsight.step` drives this: the step just before the first chosen one runs
    inside a :class:`~torch_nsight.capture.replicas.siblings.SiblingCheck` (un-profiled), each chosen
    step marks the verified replicas (``ncu --nvtx-exclude`` leaves them out), and the first
    chosen step carries the groups into the report, where :func:`torch_nsight.load` copies the
    representative's rows to every replica. Without a step before the first chosen one,
    nothing is replicated.

    Args:
        model: the instrumented model.
        markers: the emitter it is instrumented with.
    """

    def __init__(self, model: Any, markers: ReplicaMarkers) -> None:
        import weakref

        self._model = weakref.ref(model)
        self.markers = markers
        self.groups: list[dict[str, Any]] = []
        self.mismatches: list[str] = []  # why siblings were not replicated
        self._check: Any = None
        self._marking: Any = None
        self._carried = False

    def check_started(self) -> None:
        """The step before the first chosen one starts: watch it."""
        import torch

        from torch_nsight.capture.replicas.siblings import SiblingCheck

        model = self._model()
        if model is None or self._check is not None:
            return
        self._check = SiblingCheck(model, backward=torch.is_grad_enabled(),
                                   cuda=torch.cuda.is_available())
        self._check.__enter__()

    def check_ended(self, *, failed: bool) -> None:
        """That step ended: decide the groups (none if it raised)."""
        check, self._check = self._check, None
        if check is None:
            return
        check.__exit__(None, None, None)
        if failed:
            return
        verdict = check.verdict()
        self.groups = [{"representative": g["representative"], "replicas": g["replicas"]}
                       for g in verdict["groups"]]
        self.mismatches = list(verdict["mismatches"])
        for line in self.mismatches:
            logger.info("torch_nsight: %s", line)
        if self.groups:
            logger.info("torch_nsight: %d replica(s) of %d group(s) are left out of profiling "
                        "and take their representative's rows", self.replicas, len(self.groups))

    def leaving_out(self) -> bool:
        """Whether a replica's range is open now (its calls are left out of profiling)."""
        return self.markers.leaving_out()

    @property
    def replicas(self) -> int:
        """How many siblings are left out of profiling (their groups' replicas)."""
        return sum(len(g["replicas"]) for g in self.groups)

    def step_started(self) -> None:
        """A chosen step starts: its replicas' ranges are marked."""
        if self.groups:
            self._marking = self.markers.marking(
                [r for g in self.groups for r in g["replicas"]])
            self._marking.__enter__()

    def step_ended(self) -> None:
        """A chosen step ends (inside its measured range): marks cleared, the groups carried
        once."""
        if self._marking is not None:
            marking, self._marking = self._marking, None
            marking.__exit__(None, None, None)
        if self.groups and not self._carried:
            from torch_nsight.capture.calls.embed import carry_message
            from torch_nsight.formats import REPLICATION_KIND, REPLICATION_PREFIX, pack_message

            self._carried = carry_message(
                pack_message(REPLICATION_PREFIX, {"kind": REPLICATION_KIND,
                                                  "groups": self.groups}),
                f"the replicated siblings ({len(self.groups)} group(s))")
