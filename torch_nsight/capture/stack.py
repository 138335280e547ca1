"""The per-thread stack of open torch_nsight ranges.

NVTX push/pop ranges are per thread, and autograd runs backward on threads of its own, so
the capture stage mirrors every range it opens in a :class:`RangeStack` that keeps one list
per thread. A range is popped only when it is on top of that list; anything else is
repaired (stale ranges above it are closed) or refused, and explained in the log, so that
one missed hook never leaves the profiler's stack shifted for the rest of the run.

Backward ranges need two extra rules, because PyTorch's module backward hooks do not always
come in pairs:

* a module none of whose inputs needs a gradient gets its backward post-hook right after
  its pre-hook, before its own backward kernels (weight gradients) run. Its range is then
  kept open as *deferred* and closed when something that is not part of that module starts
  on the thread, when a range below it closes, or when the backward pass ends;
* a pre-hook whose post-hook never comes (``backward(inputs=...)``, ``autograd.grad`` on a
  subset) leaves a range that is closed when its backward pass ends.

The end of a backward pass is learnt from a callback queued on the autograd engine. It runs
on the thread that called ``backward()``; ranges left on another thread (the CUDA device
thread) are closed there before the next range that thread opens.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch_nsight.capture.emitter import RangeEmitter

logger = logging.getLogger(__name__)

__all__ = ["Range", "RangeStack", "STACK"]


class Range:
    """One range message that the capture stage can open, prepared once at instrument time.

    Attributes:
        message: The NVTX message.
        name: Qualified module name (``""`` for the root module) or op name.
        emitter: Where pushes and pops of this range go.
        owner: The object that created the range (an :class:`Instrumentation`).
        is_module: True for module ranges, False for op ranges.
        names_ops: Whether functional ops called directly inside this range get ranges of
            their own (False for PyTorch's own leaf modules such as ``nn.SiLU``, whose
            range already names their single op).
    """

    __slots__ = ("message", "name", "prefix", "emitter", "owner", "is_module", "names_ops")

    def __init__(
        self,
        message: str,
        name: str,
        emitter: RangeEmitter,
        owner: object = None,
        *,
        is_module: bool = True,
        names_ops: bool = True,
    ) -> None:
        self.message = message
        self.name = name
        self.prefix = f"{name}." if name else ""
        self.emitter = emitter
        self.owner = owner
        self.is_module = is_module
        self.names_ops = names_ops

    def contains(self, other: Range) -> bool:
        """Whether ``other`` is a module strictly inside this range's module."""
        return other.name != self.name and other.name.startswith(self.prefix)

    def __repr__(self) -> str:
        return f"Range({self.message!r})"


class _Task:
    """One backward pass (an autograd graph task) seen on one thread."""

    __slots__ = ("task_id", "done")

    def __init__(self, task_id: int) -> None:
        self.task_id = task_id
        self.done = False


class _Frame:
    """A backward range on the stack: the range, its backward pass, whether it is deferred."""

    __slots__ = ("range", "task", "deferred")

    def __init__(self, rng: Range, task: _Task | None) -> None:
        self.range = rng
        self.task = task
        self.deferred = False

    def __repr__(self) -> str:
        return f"_Frame({self.range.message!r}, deferred={self.deferred})"


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.stack: list[Range | _Frame] = []
        self.frames = 0  # how many _Frame entries `stack` holds
        self.tasks: dict[int, _Task] = {}


def _range_of(entry: Range | _Frame) -> Range:
    return entry.range if type(entry) is _Frame else entry  # type: ignore[union-attr, return-value]


class RangeStack:
    """The ranges torch_nsight has open, one stack per thread.

    One instance (:data:`STACK`) serves every :class:`Instrumentation` of the process,
    because the NVTX stack it mirrors is per thread, not per model.
    """

    def __init__(self) -> None:
        self._local = _ThreadState()

    # -- forward and op ranges ------------------------------------------------------------

    def push(self, rng: Range) -> None:
        """Open ``rng`` on the calling thread."""
        state = self._local
        if state.frames:
            self._settle_backward(state, rng)
        rng.emitter.push(rng.message)
        state.stack.append(rng)

    def pop(self, rng: Range) -> None:
        """Close ``rng`` on the calling thread if it is the innermost open range there."""
        stack = self._local.stack
        if stack and stack[-1] is rng:
            stack.pop()
            rng.emitter.pop()
            return
        self._pop_buried(rng, backward=False)

    def innermost(self) -> Range | None:
        """The innermost open range on the calling thread, or None."""
        stack = self._local.stack
        return _range_of(stack[-1]) if stack else None

    # -- backward ranges -------------------------------------------------------------------

    def push_backward(self, rng: Range, task_id: int) -> None:
        """Open the backward range ``rng`` for the autograd graph task ``task_id``."""
        state = self._local
        task = None
        if task_id >= 0:
            task = state.tasks.get(task_id)
            if task is None or task.done:
                task = _Task(task_id)
                state.tasks[task_id] = task
                _queue_end_of_backward(self, task, threading.get_ident())
        if state.frames:
            self._settle_backward(state, rng)
        rng.emitter.push(rng.message)
        state.stack.append(_Frame(rng, task))
        state.frames += 1

    def pop_backward(self, rng: Range, *, deferred: bool = False) -> None:
        """Close the backward range ``rng``, or with ``deferred`` keep it open for later.

        Args:
            rng: The backward range whose post-hook fired.
            deferred: True when the post-hook fired before the module's own backward ran
                (no input of the module needed a gradient); the range then stays open until
                something outside the module starts or the backward pass ends.
        """
        state = self._local
        stack = state.stack
        if stack:
            top = stack[-1]
            if type(top) is _Frame and top.range is rng:
                if deferred:
                    top.deferred = True
                    return
                stack.pop()
                state.frames -= 1
                rng.emitter.pop()
                return
        if deferred:
            for entry in reversed(stack):
                if type(entry) is _Frame and entry.range is rng:
                    entry.deferred = True
                    return
        self._pop_buried(rng, backward=True)

    def end_backward(self, task: _Task) -> None:
        """Close what the finished backward pass ``task`` left open on the calling thread."""
        task.done = True
        state = self._local
        if state.frames:
            self._close_finished(state)

    # -- housekeeping ------------------------------------------------------------------------

    def close_owned(self, owner: object) -> int:
        """Close the calling thread's innermost ranges while they belong to ``owner``.

        Returns:
            How many ranges were closed.
        """
        state = self._local
        closed = 0
        while state.stack and _range_of(state.stack[-1]).owner is owner:
            self._close_top(state)
            closed += 1
        return closed

    def snapshot(self) -> list[str]:
        """The messages open on the calling thread, outermost first (for tests and logs)."""
        return [_range_of(entry).message for entry in self._local.stack]

    def _close_top(self, state: _ThreadState) -> Range:
        entry = state.stack.pop()
        if type(entry) is _Frame:
            state.frames -= 1
        rng = _range_of(entry)
        rng.emitter.pop()
        return rng

    def _close_finished(self, state: _ThreadState) -> None:
        stack = state.stack
        while stack:
            top = stack[-1]
            if type(top) is not _Frame or top.task is None or not top.task.done:
                break
            self._close_top(state)
        for task_id in [tid for tid, task in state.tasks.items() if task.done]:
            del state.tasks[task_id]

    def _settle_backward(self, state: _ThreadState, rng: Range) -> None:
        """Before opening ``rng``: close finished and deferred backward ranges it is not in."""
        self._close_finished(state)
        if not rng.is_module:
            return
        stack = state.stack
        while stack:
            top = stack[-1]
            if type(top) is not _Frame or not top.deferred or top.range.contains(rng):
                break
            self._close_top(state)

    def _pop_buried(self, rng: Range, *, backward: bool) -> None:
        state = self._local
        stack = state.stack
        index = None
        for i in range(len(stack) - 1, -1, -1):
            entry = stack[i]
            if (type(entry) is _Frame) is backward and _range_of(entry) is rng:
                index = i
                break
        if index is None:
            logger.warning(
                "torch_nsight: ignoring the end of range %r on thread %d: it is not open on "
                "this thread (open: %s). A hook ran without its partner, for example because "
                "another tool removed or reordered hooks; no NVTX range was popped.",
                rng.message, threading.get_ident(), self.snapshot() or "none",
            )
            return
        stale = [_range_of(entry) for entry in stack[index + 1 :]]
        expected = all(
            type(entry) is _Frame and (entry.deferred or backward) for entry in stack[index + 1 :]
        )
        log = logger.debug if expected else logger.warning
        log(
            "torch_nsight: closing range %r on thread %d also closes the ranges opened after "
            "it and still open: %s. Their end was never seen (a backward hook that did not "
            "fire, or a forward hook skipped); closing them keeps the NVTX stack balanced.",
            rng.message, threading.get_ident(), [r.message for r in stale],
        )
        while len(stack) > index:
            self._close_top(state)


def _queue_end_of_backward(stack: RangeStack, task: _Task, thread_id: int) -> None:
    """Ask autograd to tell ``stack`` when the backward pass ``task`` ends."""
    import torch

    def on_end() -> None:
        if threading.get_ident() == thread_id:
            stack.end_backward(task)
        else:
            task.done = True  # the owning thread closes its ranges before its next one

    engine: Any = torch.autograd.Variable._execution_engine  # type: ignore[attr-defined]
    try:
        engine.queue_callback(on_end)
    except RuntimeError as err:  # not inside a backward pass after all
        logger.debug("torch_nsight: could not queue the end-of-backward callback: %s", err)


STACK = RangeStack()
"""The process-wide stack used by :func:`torch_nsight.instrument`."""
