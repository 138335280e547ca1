"""The per-thread stack of open torch_nsight ranges, and every rule for opening and closing.

NVTX push/pop ranges are per thread, and autograd runs backward on threads of its own, so
the capture stage mirrors every range it opens in a :class:`RangeStack` that keeps one list
per thread. A range is popped only when it is on top of that list; anything else is
repaired (stale ranges above it are closed) or refused, and explained in the log, so that
one missed hook never leaves the profiler's stack shifted for the rest of the run.

This module owns that logic, and the hooks (:mod:`torch_nsight.capture.ranges.hooks`) only call
it: each instrumented module's ``forward`` is a
:class:`~torch_nsight.capture.ranges.ranged_forward.RangedForward` (its range around the module's
own forward), which with gradients enabled calls
:meth:`RangeStack.call_with_backward`; the pre-hook of an autograd node is
:meth:`RangeStack.run_node` of the frames that node closes and opens.

A backward range is a :class:`~torch_nsight.capture.ranges.frames.BackwardFrame`, one per module
call made with gradients enabled. It is opened when the first gradient of the call's
outputs arrives, and closed by whichever comes first:

* the node that produced one of the call's inputs is about to run (its pre-hook);
* the backward range of a call outside it opens on the thread (autograd runs a module's
  backward in one stretch, so a call that is neither inside it nor one of its submodules
  starting means it is done). This is what closes the range of a module none of whose
  inputs needs a gradient (*deferred*: no input node closes it), or whose input is also
  used elsewhere and gets its gradient later;
* a forward range opens that is outside a deferred range (activation checkpointing
  recomputes forwards inside backward);
* its backward pass ends. The end is learnt from a callback queued on the autograd engine,
  on the thread that called ``backward()``; ranges left on another thread (the CUDA device
  thread) are closed there before the next range that thread opens.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch

from torch_nsight.capture.ranges.frames import BackwardFrame, BackwardTask, Range

logger = logging.getLogger(__name__)

__all__ = ["RangeStack", "STACK"]

_graph_task_id: Callable[[], int] = torch._C._current_graph_task_id


class _ThreadState:
    """What one thread has open; fetched once per stack operation (slots, not a
    ``threading.local``, whose every attribute access costs a per-thread lookup)."""

    __slots__ = ("stack", "frames", "tasks", "call")

    def __init__(self) -> None:
        self.stack: list[Range | BackwardFrame] = []
        self.frames = 0  # how many BackwardFrame entries `stack` holds
        self.tasks: dict[int, BackwardTask] = {}
        self.call: BackwardFrame | None = None  # the instrumented forward call running


class _Local(threading.local):
    def __init__(self) -> None:
        self.state = _ThreadState()


def _range_of(entry: Range | BackwardFrame) -> Range:
    return entry.range if type(entry) is BackwardFrame else entry  # type: ignore[return-value]


class RangeStack:
    """The ranges torch_nsight has open, one stack per thread.

    One instance (:data:`STACK`) serves every :class:`Instrumentation` of the process,
    because the NVTX stack it mirrors is per thread, not per model.

    Attributes:
        local: the per-thread state (``local.state``: what the calling thread has open),
            which the forward wrapper's fast path reads directly.
    """

    __slots__ = ("local",)

    def __init__(self) -> None:
        self.local = _Local()

    # -- forward and op ranges ------------------------------------------------------------

    def push(self, rng: Range) -> None:
        """Open ``rng`` on the calling thread."""
        state = self.local.state
        if state.frames:
            self._settle_forward(state, rng)
        rng.open()
        state.stack.append(rng)

    def pop(self, rng: Range) -> None:
        """Close ``rng`` on the calling thread if it is the innermost open range there."""
        stack = self.local.state.stack
        if stack and stack[-1] is rng:
            stack.pop()
            rng.close()
            return
        self._pop_buried(rng)

    def call_with_backward(
        self, rng: Range, backward: Range, function: Callable[..., Any], module: Any,
        args: tuple[Any, ...], kwargs: dict[str, Any],
    ) -> tuple[BackwardFrame, Any]:
        """Call ``function(module, *args, **kwargs)`` inside ``rng``, with a backward frame.

        The range is closed when the call returns or raises. The call's
        :class:`BackwardFrame` for ``backward`` is the current call on this thread while
        ``function`` runs, so that the calls made inside it become its children.

        Returns:
            The frame (not attached to any autograd node yet) and what ``function`` returned.
        """
        state = self.local.state
        parent = state.call
        frame = BackwardFrame(backward, parent)
        state.call = frame
        try:
            output = self.call_in_range(state, rng, function, module, args, kwargs)
        finally:
            state.call = parent
        return frame, output

    def call_in_range(
        self, state: _ThreadState, rng: Range, function: Callable[..., Any], module: Any,
        args: tuple[Any, ...], kwargs: dict[str, Any],
    ) -> Any:
        """Call ``function(module, *args, **kwargs)`` inside ``rng``: :meth:`push` and
        :meth:`pop` in one frame, since every module call on the stack comes here.
        ``state`` is the calling thread's, which the caller has fetched already."""
        if state.frames:
            self._settle_forward(state, rng)
        rng.open()
        stack = state.stack
        stack.append(rng)
        try:
            return function(module, *args, **kwargs)
        finally:
            if stack and stack[-1] is rng:
                stack.pop()
                rng.close()
            else:
                self._pop_buried(rng)

    def innermost(self) -> Range | None:
        """The innermost open range on the calling thread, or None."""
        stack = self.local.state.stack
        return _range_of(stack[-1]) if stack else None

    # -- backward ranges -------------------------------------------------------------------

    def run_node(self, closes: list[BackwardFrame], opens: list[BackwardFrame],
                 grad_outputs: Any = None) -> None:
        """What the pre-hook of an autograd node does before the node runs.

        First close the ranges of the calls whose input the node produced, then open those
        of the calls whose output it produced, outermost first (``opens`` lists the calls
        innermost first, as their forwards returned), once per backward pass each.

        Args:
            closes: Frames to close.
            opens: Frames to open.
            grad_outputs: The node's output gradients (unused: the hook only observes).
        """
        state = self.local.state
        stack = state.stack
        for frame in closes:
            if frame.is_open:
                if stack and stack[-1] is frame:  # _close_top, inlined: once per node
                    stack.pop()
                    state.frames -= 1
                    frame.is_open = False
                    frame.range.close()
                else:
                    self.pop_backward(frame)
        if not opens:
            return
        task_id = _graph_task_id()
        task = state.tasks.get(task_id)
        for frame in reversed(opens):
            if frame.graph_task == task_id:  # a second output's node, same pass
                continue
            frame.graph_task = task_id
            parent = frame.parent
            if (task is None or task.done or frame.is_open or state.frames
                    and (stack[-1] is not parent or parent.task is not task)):
                self.push_backward(frame, task_id)
                task = state.tasks.get(task_id)
            else:  # push_backward's common case, inlined: once per node
                frame.task = task
                frame.is_open = True
                frame.range.open()
                stack.append(frame)
                state.frames += 1

    def push_backward(self, frame: BackwardFrame, task_id: int) -> None:
        """Open the backward range of ``frame`` for the autograd graph task ``task_id``.

        Backward ranges on top of the stack that ``frame`` is not inside are closed first.
        """
        state = self.local.state
        task = state.tasks.get(task_id)
        if task is None or task.done:
            task = self._begin_task(state, task_id)
        stack = state.stack
        if state.frames:
            parent = frame.parent
            if stack[-1] is not parent or parent.task is not task:
                self._close_outside(state, frame)
        if frame.is_open:  # still open on another thread, or from a pass that did not end
            self._drop(frame)
        frame.task = task
        frame.is_open = True
        frame.range.open()
        stack.append(frame)
        state.frames += 1

    def pop_backward(self, frame: BackwardFrame) -> None:
        """Close the backward range of ``frame`` and any range above it on this thread.

        Does nothing if ``frame`` is not open on the calling thread (it was closed already
        when a range outside it opened).
        """
        state = self.local.state
        stack = state.stack
        if stack and stack[-1] is frame:
            self._close_top(state)
            return
        for index in range(len(stack) - 1, -1, -1):
            if stack[index] is frame:
                above = [_range_of(entry).message for entry in stack[index + 1 :]]
                logger.debug("torch_nsight: closing backward range %r also closes %s, "
                             "opened inside it", frame.range.message, above)
                while len(stack) > index:
                    self._close_top(state)
                return

    def end_backward(self, task: BackwardTask) -> None:
        """Close what the finished backward pass ``task`` left open on the calling thread."""
        task.done = True
        state = self.local.state
        if state.frames:
            self._close_finished(state)

    # -- housekeeping ------------------------------------------------------------------------

    def close_owned(self, owner: object) -> int:
        """Close the calling thread's innermost ranges while they belong to ``owner``.

        Returns:
            How many ranges were closed.
        """
        state = self.local.state
        closed = 0
        while state.stack and _range_of(state.stack[-1]).owner is owner:
            self._close_top(state)
            closed += 1
        return closed

    def snapshot(self) -> list[str]:
        """The messages open on the calling thread, outermost first (for tests and logs)."""
        return [_range_of(entry).message for entry in self.local.state.stack]

    def _close_top(self, state: _ThreadState) -> Range:
        entry = state.stack.pop()
        if type(entry) is BackwardFrame:
            state.frames -= 1
            entry.is_open = False
            rng = entry.range
        else:
            rng = entry  # type: ignore[assignment]
        rng.close()
        return rng

    def _begin_task(self, state: _ThreadState, task_id: int) -> BackwardTask | None:
        """The :class:`BackwardTask` of a backward pass starting on this thread (None outside one)."""
        if task_id < 0:
            return None
        task = state.tasks[task_id] = BackwardTask(task_id)
        _queue_end_of_backward(self, task, threading.get_ident())
        return task

    def _close_outside(self, state: _ThreadState, frame: BackwardFrame) -> None:
        """Close finished backward ranges, then those on top that ``frame`` is not inside."""
        self._close_finished(state)
        stack = state.stack
        while stack:
            top = stack[-1]
            if type(top) is not BackwardFrame or frame.inside(top):
                break
            self._close_top(state)

    def _drop(self, frame: BackwardFrame) -> None:
        """Forget ``frame`` left open by an earlier pass on this thread (closing above it)."""
        self.pop_backward(frame)
        frame.is_open = False

    def _close_finished(self, state: _ThreadState) -> None:
        stack = state.stack
        while stack:
            top = stack[-1]
            if type(top) is not BackwardFrame or top.task is None or not top.task.done:
                break
            self._close_top(state)
        if state.tasks:
            for task_id in [tid for tid, task in state.tasks.items() if task.done]:
                del state.tasks[task_id]

    def _settle_forward(self, state: _ThreadState, rng: Range) -> None:
        """Before opening ``rng``: close finished and deferred backward ranges it is not in."""
        self._close_finished(state)
        if not rng.is_module:
            return
        stack = state.stack
        while stack:
            top = stack[-1]
            if (type(top) is not BackwardFrame or not top.deferred
                    or top.range.contains(rng)):
                break
            self._close_top(state)

    def _pop_buried(self, rng: Range) -> None:
        state = self.local.state
        stack = state.stack
        index = None
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is rng:
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
        stale = stack[index + 1 :]
        expected = all(type(entry) is BackwardFrame for entry in stale)
        log = logger.debug if expected else logger.warning
        log(
            "torch_nsight: closing range %r on thread %d also closes the ranges opened after "
            "it and still open: %s. Their end was never seen (a backward hook that did not "
            "fire, or a forward hook skipped); closing them keeps the NVTX stack balanced.",
            rng.message, threading.get_ident(), [_range_of(e).message for e in stale],
        )
        while len(stack) > index:
            self._close_top(state)


def _queue_end_of_backward(stack: RangeStack, task: BackwardTask, thread_id: int) -> None:
    """Ask autograd to tell ``stack`` when the backward pass ``task`` ends."""
    def on_end() -> None:
        if threading.get_ident() == thread_id:
            stack.end_backward(task)
        else:
            task.done = True  # the owning thread closes its ranges before its next one

    engine: Any = torch.autograd.Variable._execution_engine
    try:
        engine.queue_callback(on_end)
    except RuntimeError as err:  # not inside a backward pass after all
        logger.debug("torch_nsight: could not queue the end-of-backward callback: %s", err)



STACK = RangeStack()
"""The process-wide stack used by :func:`torch_nsight.instrument`."""
