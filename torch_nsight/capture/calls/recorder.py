"""The calls table: per module call and per aten op, the torch-level shapes and costs.

Nsight Compute reports kernels; the analysis also needs what PyTorch asked for: for every op
that ran inside each range, its input and output shapes and dtypes, its analytic FLOPs and
a lower bound on the bytes it moves. :class:`CallRecorder` collects them. It is a range
emitter that wraps another one (the model is instrumented with it): every push and pop goes
on to the inner emitter unchanged, and the recorder mirrors the open range messages in a
stack per thread. While it records, a ``TorchDispatchMode`` sees every aten op and files it
under the calling thread's stack of open messages (``("LlamaBlock", "self_attn",
"self_attn.qkv_proj")``, ``("bwd:LlamaBlock", "bwd:mlp", ...)``, ``(..., "op:silu")``).

The recorder keeps that stack itself rather than reading the capture stage's
:class:`~torch_nsight.capture.ranges.stack.RangeStack`, which does not hold every range: a
forward without gradients or op ranges opens its module ranges without putting them there
(the decode path), and ``push`` and ``pop`` may come from outside the instrumentation.

What is recorded:

* every aten op that reaches the dispatcher's Python key: the ops a kernel can come from
  (``mm``, ``addmm``, ``convolution``, ``_scaled_dot_product_flash_attention``, ``mul``...),
  after autograd, so backward ops are seen too;
* not the ops that launch no kernel: views and other aliasing ops (their schema says the
  output aliases an input without writing it: ``view``, ``t``, ``transpose``, ``expand``,
  ``permute``, ``unbind``, ``detach``...), ``_unsafe_view``, allocations without a fill
  (``empty``, ``empty_like``...) and metadata queries. Copies (``clone``, ``_to_copy``,
  ``copy_``) and in-place ops are recorded: they move bytes;
* ops outside every range (the loss, the optimizer step, input copies) under the empty
  stack ``()``.

How FLOPs and bytes are counted: :mod:`torch_nsight.capture.calls.call_table`.

Backward ops: a dispatch mode is thread-local state, and autograd's engine carries the
state of the thread that called ``backward()`` (``at::ThreadLocalState``, dispatch mode stack
included) to the threads that run the backward pass, so backward ops on autograd's device
threads are recorded, under the ``bwd:`` ranges the instrumentation opens there. A
backward started on another Python thread than the one recording is not seen.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from torch_nsight.calls_file import calls_document, write_calls
from torch_nsight.capture.calls.call_table import CallTable, innermost_class
from torch_nsight.capture.calls.dispatch_mode import make_mode
from torch_nsight.capture.ranges.emitter import NvtxEmitter, OpenRanges, RangeEmitter
from torch_nsight.formats import CALLS_FORMAT, CALLS_KIND
from torch_nsight.naming import backward_op_message, op_message, parse_message

if TYPE_CHECKING:
    from torch_nsight.capture.replicas.op_calls import OpReplicas

logger = logging.getLogger(__name__)

__all__ = ["CallRecorder", "CALLS_KIND", "CALLS_FORMAT"]


def _is_module_forward(message: str) -> bool:
    kind = parse_message(message)
    return kind.kind == "module" and kind.direction == "fwd"


class _Refused(Exception):
    """Recording must not start (the reason is the message)."""


class CallRecorder:
    """A range emitter that forwards to ``inner`` and records the aten ops run in each range.

    Instrument the model with it (``instrument(model, emitter=CallRecorder(...))``). It
    records inside :meth:`recording`, or, with ``first_iteration``, over the model's first
    iteration: from the first push of a module forward range on a thread with no range
    open (the model's root forward) until that same root forward is entered again (so one
    forward and the backward that follows it), or until :meth:`close`.

    Args:
        inner: Where the ranges go (default: an :class:`~torch_nsight.capture.NvtxEmitter`).
        first_iteration: Record the first iteration by itself (see above).
        on_done: Called with the recorder once the first iteration is recorded (on the
            thread that starts the next one; errors it raises are logged).
        name_outside: While recording, give each aten op run outside every range its own
            range (``op:_to_copy``; ``bwd:op:...`` in a backward pass), so that its kernels
            are named (a cast or a sum written as tensor methods in the training loop).

    Raises:
        TypeError: If ``inner`` has no ``push`` and ``pop`` methods.

    Notes:
        * Recording puts a ``TorchDispatchMode`` on the dispatch mode stack of the thread
          that starts it (without importing ``torch._dynamo`` unless the process already
          has).
        * In ``first_iteration`` mode the mode is entered inside the root module's forward
          and left when the next iteration's root forward starts, on that thread. If
          another dispatch mode was entered above it and is still active then, it cannot
          be taken off: it stops recording, stays on the stack as a pass-through, and is
          taken off at a later range push on that thread once it is on top (a warning
          says so).
        * Nothing raised while recording reaches the model: errors are logged and the op
          runs as without the recorder.
    """

    def __init__(self, inner: RangeEmitter | None = None, *,
                 first_iteration: bool = False,
                 on_done: Callable[[CallRecorder], None] | None = None,
                 refuse: Callable[[], str | None] | None = None,
                 name_outside: bool = False) -> None:
        if inner is None:
            inner = NvtxEmitter()
        if not (callable(getattr(inner, "push", None)) and callable(getattr(inner, "pop", None))):
            raise TypeError("inner must have push(message) and pop() methods, got "
                            f"{type(inner).__name__}")
        if not isinstance(first_iteration, bool):
            raise TypeError(f"first_iteration must be a bool, got {type(first_iteration).__name__}")
        self.inner = inner
        self.first_iteration = first_iteration
        self._local = OpenRanges()  # the messages open on each thread
        self._table = CallTable()
        self._recording = False
        self._mode: Any = None  # the dispatch mode while it is on a thread's mode stack
        self._mode_thread: int | None = None
        self._exit_pending = False
        self._root: str | None = None
        self._done = False  # first_iteration: the iteration was recorded, or close()d
        self._warned_record = False
        self.on_done = on_done  # called once the first iteration is recorded
        self.name_outside = name_outside
        #: The class of the module behind each module range message (``mlp.up_proj`` ->
        #: ``torch.nn.modules.linear.Linear``), set by the instrumentation: each row gets
        #: the class of the innermost module open around it.
        self.module_classes: dict[str, str] = {}
        # why recording must not start now (None: it may), asked before each start
        self.refuse = refuse
        #: Repeated op calls left out of ncu's replay while recording (set by the
        #: instrumentation under ``profile``; :mod:`torch_nsight.capture.replicas.op_calls`).
        self.op_replicas: OpReplicas | None = None

    # -- emitter protocol ------------------------------------------------------------------

    def bind(self, message: str) -> tuple[Callable[[], None], Callable[[], None]]:
        """Return the zero-argument push and pop of the range ``message``.

        They wrap the inner emitter's own bound callables when it has ``bind``.
        """
        bind = getattr(self.inner, "bind", None)
        if bind is not None:
            push, pop = bind(message)
        else:
            push, pop = functools.partial(self.inner.push, message), self.inner.pop
        local = self._local
        may_be_root = self.first_iteration and _is_module_forward(message)

        def push_recorded() -> None:
            if self._done and not self._exit_pending:  # recorded: the plain range from now on
                push()
                return
            stack = local.stack
            if (may_be_root and not stack) or self._exit_pending:
                self._on_push(message, stack)
            push()
            stack.append(message)

        def pop_recorded() -> None:
            try:
                pop()
            finally:
                if not self._done:
                    stack = local.stack
                    if stack:
                        stack.pop()

        return push_recorded, pop_recorded

    def push(self, message: str) -> None:
        """Open the range ``message`` on the calling thread."""
        stack = self._local.stack
        if (self.first_iteration and not stack and _is_module_forward(message)) \
                or self._exit_pending:
            self._on_push(message, stack)
        self.inner.push(message)
        stack.append(message)

    def pop(self) -> None:
        """Close the innermost range opened on the calling thread."""
        try:
            self.inner.pop()
        finally:
            stack = self._local.stack
            if stack:
                stack.pop()

    # -- recording windows -----------------------------------------------------------------

    @contextlib.contextmanager
    def recording(self) -> Iterator[CallRecorder]:
        """Record the ops run inside the ``with`` block (and the backward passes it starts).

        Yields:
            This recorder.

        Raises:
            RuntimeError: If the recorder is recording already.
        """
        if self._recording or self._mode is not None:
            raise RuntimeError("this CallRecorder is recording already (recording() blocks "
                               "do not nest, and first_iteration recording is under way)")
        try:
            self._start()
        except _Refused as err:
            logger.info("torch_nsight: calls not recorded: %s", err)
            yield self
            return
        try:
            yield self
        finally:
            self._stop()

    def close(self) -> None:
        """Stop recording (safe to call more than once); the rows recorded are kept."""
        self._done = True
        self._stop()

    @property
    def is_recording(self) -> bool:
        """Whether ops are being recorded now."""
        return self._recording

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside the block: the call of an Inductor graph, whose kernels take
        their FLOPs from the graph's kernel map (:mod:`torch_nsight.capture.compiled.inductor`)."""
        recording, self._recording = self._recording, False
        try:
            yield
        finally:
            self._recording = recording and self._mode is not None

    def _on_push(self, message: str, stack: list[str]) -> None:
        """A module forward pushed on an empty stack (first_iteration), or a pending exit."""
        try:
            if self._exit_pending:
                self._exit_mode(quiet=True)
            if not self.first_iteration or stack or self._done \
                    or not _is_module_forward(message):
                return
            if self._root is None:
                self._root = message
                try:
                    self._start()
                except _Refused as err:
                    logger.info("torch_nsight: calls not recorded: %s", err)
                    self._done = True
            elif message == self._root and threading.get_ident() == self._mode_thread:
                self._done = True
                self._stop()
                if self.on_done is not None:
                    self.on_done(self)
        except Exception as err:  # never into the model's forward
            logger.warning("torch_nsight: call recording failed and stopped: %s: %s",
                           type(err).__name__, err)
            self._recording = False
            self._done = True

    def _start(self) -> None:
        reason = self.refuse() if self.refuse is not None else None
        if reason is not None:
            raise _Refused(reason)
        mode = make_mode(self)
        mode.__enter__()
        self._mode = mode
        self._mode_thread = threading.get_ident()
        self._recording = True
        logger.debug("torch_nsight: recording calls on thread %d", self._mode_thread)

    def _stop(self) -> None:
        self._recording = False
        if self._mode is not None:
            self._exit_mode(quiet=False)

    def _exit_mode(self, *, quiet: bool) -> None:
        """Take the dispatch mode off its thread's stack if it is on top there."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        mode = self._mode
        if mode is None:
            self._exit_pending = False
            return
        if threading.get_ident() != self._mode_thread:
            self._exit_pending = True
            if not quiet:
                logger.debug("torch_nsight: call recording stopped from another thread; its "
                             "dispatch mode is taken off thread %s at its next range",
                             self._mode_thread)
            return
        try:
            on_top = _get_current_dispatch_mode() is mode
            if on_top:
                mode.__exit__(None, None, None)
        except Exception as err:
            logger.warning("torch_nsight: could not leave the call-recording dispatch mode "
                           "(%s: %s); it stays on the mode stack and records nothing",
                           type(err).__name__, err)
            self._mode = None
            self._exit_pending = False
            return
        if on_top:
            self._mode = None
            self._exit_pending = False
            logger.debug("torch_nsight: stopped recording calls")
        else:
            if not self._exit_pending:
                logger.warning("torch_nsight: call recording stopped, but another dispatch "
                               "mode entered after it is still active; the recorder's mode "
                               "stays under it, recording nothing, until it can be removed")
            self._exit_pending = True

    # -- the table ---------------------------------------------------------------------------

    def outside_message(self, func: Any) -> str | None:
        """The range to open around ``func``: an op range when it runs outside every range
        while recording (:attr:`name_outside`), else None."""
        if not (self.name_outside and self._recording) or self._local.stack:
            return None
        name = getattr(getattr(func, "overloadpacket", func), "__name__", str(func))
        in_backward = torch._C._current_graph_task_id() != -1
        return backward_op_message(name) if in_backward else op_message(name)

    def _record_safely(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """:meth:`_record`, whose errors are logged (once) and never reach the op."""
        try:
            self._record(func, args, kwargs, out)
        except Exception as err:  # keep the op's result whatever happens
            if not self._warned_record:
                self._warned_record = True
                logger.warning("torch_nsight: could not record a call of %s (%s: %s); "
                               "calls like it are missing from the calls table",
                               func, type(err).__name__, err)

    def _record(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """File one aten op call under the calling thread's open ranges."""
        self._table.add(self._local.stack, func, args, kwargs, out)

    def _record_higher_order(self, func: Any) -> None:
        """File a higher-order operator (its inner ops run without the recorder)."""
        self._table.add_higher_order(self._local.stack, func)

    def rows(self) -> list[dict[str, Any]]:
        """The calls table: one row per distinct call, in order of first appearance.

        Returns:
            One dict per distinct (range stack, op, input shapes and dtypes, output shapes
            and dtypes), with keys ``range_stack`` (tuple of range messages, outermost
            first), ``op``, ``input_shapes``, ``input_dtypes``, ``output_shapes``,
            ``output_dtypes`` (tuples; shapes are tuples of ints), ``flops`` (per call, or
            None), ``bytes`` (per call) and ``count``; and ``module_class``, the qualified
            class of the innermost module open around the call (None outside every
            module), where :attr:`module_classes` is known; ``args`` (JSON text) for a
            convolution: its stride, padding, dilation, transposed, output padding, groups.
        """
        rows = self._table.rows()
        if self.module_classes:
            for row in rows:
                row["module_class"] = innermost_class(row["range_stack"], self.module_classes)
        return rows

    def clear(self) -> None:
        """Forget the rows recorded so far (and the op calls seen, not their numbers)."""
        self._table.clear()
        if self.op_replicas is not None:
            self.op_replicas.clear()

    def replica_range(self, func: Any, args: Any, kwargs: Any) -> Callable[[], None] | None:
        """While recording with :attr:`op_replicas`: open the range of this op call (see
        :meth:`~torch_nsight.capture.replicas.op_calls.OpReplicas.enter`) and return what
        closes it."""
        if self.op_replicas is None or not self._recording:
            return None
        return self.op_replicas.enter(func, args, kwargs, self._local.stack)

    def document(self) -> dict[str, Any]:
        """The calls table as the JSON document a calls file holds (lists, not tuples; see
        :mod:`torch_nsight.calls_file`)."""
        return calls_document(self.rows(), torch.__version__)

    def write(self, path: str | Path) -> Path:
        """Write the calls table to a JSON file.

        Args:
            path: The file to write (replaced if it exists).

        Returns:
            The path written.
        """
        return write_calls(path, self.document())
