"""Where range pushes and pops go: NVTX by default, a recorder in tests.

An emitter is any object with ``push(message)`` and ``pop()``; it may also have
``bind(message)``, called once per message at instrument time, returning the zero-argument
push and pop callables to use for that message, so that the per-call path does no lookup,
registration or string work.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Protocol, runtime_checkable

from torch_nsight.naming import DOMAIN, RECORD_PREFIX

logger = logging.getLogger(__name__)

__all__ = ["RangeEmitter", "NvtxEmitter", "RecordingEmitter", "RangeEvent",
           "RecordFunctionEmitter", "OpenRanges", "RECORD_PREFIX"]


@runtime_checkable
class RangeEmitter(Protocol):
    """Receives the push/pop range events of the capture stage, on the thread they happen."""

    def push(self, message: str) -> None:
        """Open a range named ``message`` on the calling thread."""

    def pop(self) -> None:
        """Close the innermost range opened by :meth:`push` on the calling thread."""


class NvtxEmitter:
    """Push/pop ranges in one NVTX domain through the ``nvtx`` package's fast path.

    Each message is registered with the domain once and its event attributes are built
    once (:meth:`prepare`, :meth:`bind`); a push is then one call into the NVTX C library.
    When no NVTX tool is attached, ``nvtx`` hands out a do-nothing domain and pushes cost a
    call that does nothing.

    Args:
        domain: NVTX domain name (default :data:`torch_nsight.naming.DOMAIN`), or a domain
            object with the ``nvtx.Domain`` methods ``get_event_attributes``,
            ``push_range`` and ``pop_range``.
    """

    def __init__(self, domain: str | Any = DOMAIN) -> None:
        if isinstance(domain, str):
            import nvtx

            domain = nvtx.get_domain(domain)
        self._domain = domain
        self._attributes: dict[str, Any] = {}
        self._push_range = domain.push_range
        self._pop_range = domain.pop_range
        if type(domain).__name__ == "DummyDomain":
            logger.debug("torch_nsight: NVTX domain is disabled (no NVTX tool attached); "
                         "ranges cost a lookup and do nothing")

    def prepare(self, message: str) -> None:
        """Register ``message`` with the domain and build its event attributes once."""
        if message not in self._attributes:
            # get_event_attributes registers the string (nvtxDomainRegisterString) itself.
            self._attributes[message] = self._domain.get_event_attributes(message=message)

    def bind(self, message: str) -> tuple[Any, Any]:
        """Return the zero-argument push and pop of the range ``message``, prebuilt."""
        self.prepare(message)
        return functools.partial(self._push_range, self._attributes[message]), self._pop_range

    def push(self, message: str) -> None:
        """Open the range ``message`` (registered on first use if :meth:`prepare` was not)."""
        try:
            attributes = self._attributes[message]
        except KeyError:
            self.prepare(message)
            attributes = self._attributes[message]
        self._push_range(attributes)

    def pop(self) -> None:
        """Close the innermost range of this domain on the calling thread."""
        self._pop_range()


class OpenRanges(threading.local):
    """What an emitter has open on each thread: ``stack``, one list per thread, innermost
    last."""

    def __init__(self) -> None:
        self.stack: list[Any] = []


RangeEvent = tuple[int, str, str]
"""``(thread id, "push" or "pop", message)`` as recorded by :class:`RecordingEmitter`."""


class RecordingEmitter:
    """Record range events instead of emitting them: for tests and debugging.

    Pops carry the message of the range they close (tracked per thread), so a recorded
    sequence reads like the profiler's view. A pop with nothing open is recorded with the
    message ``"<unbalanced>"``.

    Attributes:
        events: Every event, in order, as ``(thread id, "push" or "pop", message)``.
    """

    UNBALANCED = "<unbalanced>"

    def __init__(self) -> None:
        self.events: list[RangeEvent] = []
        self._open = OpenRanges()

    def push(self, message: str) -> None:
        """Record the opening of ``message`` on the calling thread."""
        self._open.stack.append(message)
        self.events.append((threading.get_ident(), "push", message))

    def pop(self) -> None:
        """Record the closing of the calling thread's innermost recorded range."""
        stack = self._open.stack
        message = stack.pop() if stack else self.UNBALANCED
        self.events.append((threading.get_ident(), "pop", message))

    def open_ranges(self) -> list[str]:
        """Messages still open on the calling thread, outermost first."""
        return list(self._open.stack)

    def clear(self) -> None:
        """Forget the recorded events (ranges still open stay tracked)."""
        self.events.clear()


class RecordFunctionEmitter:
    """Open ranges as PyTorch profiler ranges (``record_function``), for the timeline.

    PyTorch's profiler does not see NVTX ranges; it records these ranges as CPU events on
    the thread that opened them, which is what the timeline reader attributes kernels with.
    Names carry :data:`RECORD_PREFIX`, so the reader tells them from the annotations of
    PyTorch itself (``Optimizer.step#SGD.step``) or the user. The ranges go through
    ``torch._C._profiler._RecordFunctionFast`` (0.15 µs a range without a profiler, 0.6 µs
    under it, on the CPU machine) where it exists, else through the
    ``record_function`` ops (about 11 µs a range).
    """

    def __init__(self) -> None:
        import torch

        self._fast = getattr(torch._C._profiler, "_RecordFunctionFast", None)
        self._enter = torch.ops.profiler._record_function_enter_new
        self._exit = torch.ops.profiler._record_function_exit._RecordFunction
        self._open = OpenRanges()

    def push(self, message: str) -> None:
        """Open the range ``torch_nsight/<message>`` on the calling thread."""
        if self._fast is not None:
            handle = self._fast(RECORD_PREFIX + message)
            handle.__enter__()
        else:
            handle = self._enter(RECORD_PREFIX + message, None)
        self._open.stack.append(handle)

    def pop(self) -> None:
        """Close the calling thread's innermost range opened by :meth:`push`."""
        stack = self._open.stack
        if not stack:
            return
        handle = stack.pop()
        if self._fast is not None:
            handle.__exit__(None, None, None)
        else:
            self._exit(handle)
