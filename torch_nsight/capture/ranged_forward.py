"""The base of every instrumented module's ``forward``: the module's own forward inside its
range (:class:`RangedForward`), and the switch that lets them all run without ranges for a
while (:func:`pause_ranges`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_nsight.capture.compiling import compile_flags, dynamo_compiling
from torch_nsight.capture.ranges import Range
from torch_nsight.capture.stack import STACK

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

    Without gradients (or without a backward range) a call is the forward inside its
    range; with them it is :meth:`call_with_backward`, which subclasses define (the
    autograd side). While Dynamo or export traces, the original forward runs alone. The
    range goes on :data:`STACK` only when something needs to see it there: a backward range
    open on the thread (it may have to close first) or op naming (``tracked``); otherwise
    ``finally`` alone balances it, in this one Python frame, which is the decode path.

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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self.module()
        if dynamo_compiling() or compile_flags._is_compiling_flag or PAUSE.on:
            return self.function(module, *args, **kwargs)
        if self.backward_range is not None and _grad_enabled():
            return self.call_with_backward(module, args, kwargs)
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

    def call_with_backward(self, module: Any, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> Any:
        """Call with gradients enabled (the subclass adds the backward range)."""
        raise NotImplementedError


_LOCAL = STACK.local  # the calling thread's state: one lookup per call
_call_in_range = STACK.call_in_range
