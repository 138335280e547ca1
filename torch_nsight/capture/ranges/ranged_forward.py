"""The base of every instrumented module's ``forward``: the module's own forward inside its
range (:class:`RangedForward`), and the switch that lets them all run without ranges for a
while (:func:`pause_ranges`).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import torch

from torch_nsight.capture.ranges.compiling import (
    call_under_dynamo,
    compile_flags,
    dynamo_callback,
    dynamo_compiling,
    set_dynamo_callback,
    skip_frames,
)
from torch_nsight.capture.ranges.frames import Range
from torch_nsight.capture.ranges.stack import STACK

__all__ = ["RangedForward", "PAUSE", "pause_ranges"]

_grad_enabled = torch.is_grad_enabled


class _Pause:
    """Whether instrumented forwards run without their ranges, for now (:func:`pause_ranges`).
    Read after the compiling checks, so Dynamo never guards on it."""

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = False


PAUSE = _Pause()


def pause_ranges(on: bool) -> None:
    """Let every instrumented forward run as if uninstrumented (``on``), or open its ranges
    again: ``profile --timeline`` times the steps outside its window without them."""
    PAUSE.on = on


class RangedForward:
    """A module's ``forward`` run inside the module's range: the base of the wrapper that
    :func:`torch_nsight.instrument` puts in place of each module's ``forward``.

    The module's instance attribute ``forward`` is :meth:`as_forward`, this class's
    ``__call__`` bound to the wrapper. Without gradients (or without a backward range) a
    call is the forward inside its range; with them it is :meth:`call_with_backward`, which
    subclasses define (the autograd side). While Dynamo or export traces, the original
    forward runs alone. Run eagerly under ``torch.compile`` (Dynamo's callback set: the
    module where compiling starts, or one called after a graph break), it is
    :meth:`call_beside_dynamo`: Dynamo compiles the module's own forward, never this
    wrapper (see :mod:`torch_nsight.capture.ranges.compiling`). The range goes on :data:`STACK`
    only when something needs to see it there: a backward range open on the thread (it
    may have to close first) or op naming (``tracked``); otherwise ``finally`` alone
    balances it, in this one Python frame, which is the decode path.

    Attributes:
        module: Weak reference to the module (no cycle through its ``__dict__``).
        function: The original forward, called as ``function(module, *args, **kwargs)``.
        body: What runs inside the range: ``function``, or it inside the op-naming mode.
        forward_range: The module's forward range.
        backward_range: Its backward range, or None.
        tracked: Whether the forward range must be on the stack while it is open (op
            naming asks the stack for the innermost range).
    """

    __slots__ = ("module", "function", "body", "forward_range", "backward_range", "tracked")
    module: Callable[[], Any]
    function: Callable[..., Any]
    body: Callable[..., Any]
    forward_range: Range
    backward_range: Range | None
    tracked: bool

    def as_forward(self) -> Callable[..., Any]:
        """What the module's instance attribute ``forward`` holds: ``__call__`` bound to
        this wrapper. A bound method, not the wrapper: Dynamo, tracing a module whose
        instance has its own ``forward``, guards on that object's identity, but on a bound
        method's function only, the same for every module (so one compiled frame serves
        every instance of a module class, as without torch_nsight)."""
        return types.MethodType(RangedForward.__call__, self)

    def stand_aside(self) -> None:
        """From now on only call ``function``, wherever the bound :meth:`as_forward` is left
        (another tool's forward that called it, a copy of the model): no range, no hook."""
        self.body = self.function
        self.forward_range = _SILENT_RANGE
        self.backward_range = None
        self.tracked = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self.module()
        if dynamo_compiling() or compile_flags._is_compiling_flag or PAUSE.on:
            return self.function(module, *args, **kwargs)
        callback = _dynamo_callback()
        if callback is not None:  # set it aside before any Python call: Dynamo would compile it
            _set_dynamo_callback(None)
            try:
                return self.call_beside_dynamo(callback, module, args, kwargs)
            finally:
                _set_dynamo_callback(callback)
        if self.backward_range is not None and _grad_enabled():
            return self.call_with_backward(module, args, kwargs, self.body)
        rng = self.forward_range
        state = _LOCAL.state
        if not state.frames and not self.tracked:
            # No backward range open on this thread, and no op range to nest: try/finally
            # alone keeps the range balanced (the decode path).
            rng.open()
            try:
                return self.body(module, *args, **kwargs)
            finally:
                rng.close()
        return _call_in_range(state, rng, self.body, module, args, kwargs)

    def call_with_backward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                           body: Callable[..., Any]) -> Any:
        """Call ``body(module, *args, **kwargs)`` with gradients enabled (the subclass adds
        the backward range)."""
        raise NotImplementedError

    def call_beside_dynamo(self, callback: Any, module: Any, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> Any:
        """Call under ``torch.compile`` but not traced (Dynamo's ``callback`` set on this
        thread, and set aside by the caller): the range as eagerly, and the module's own
        forward alone under ``callback`` (the frame Dynamo compiles without torch_nsight).
        Ops get no ranges here: their mode would be traced into the compiled forward."""
        body = functools.partial(call_under_dynamo, callback, self.function)
        if self.backward_range is not None and _grad_enabled():
            return self.call_with_backward(module, args, kwargs, body)
        return _call_in_range(_LOCAL.state, self.forward_range, body, module, args, kwargs)


class _Silent:
    """The emitter of a wrapper that stands aside (:meth:`RangedForward.stand_aside`)."""

    def bind(self, message: str) -> tuple[Callable[[], None], Callable[[], None]]:
        return _nothing, _nothing

    def push(self, message: str) -> None:
        """Nothing to open."""

    def pop(self) -> None:
        """Nothing to close."""


def _nothing() -> None:
    return None


_SILENT_RANGE = Range("", "", _Silent(), is_module=False, names_ops=False)
_LOCAL = STACK.local  # the calling thread's state: one lookup per call
_call_in_range = STACK.call_in_range
_dynamo_callback = dynamo_callback
_set_dynamo_callback = set_dynamo_callback
skip_frames(RangedForward.__call__)  # Dynamo compiles the forward it calls, not this frame
