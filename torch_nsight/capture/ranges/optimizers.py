"""A range around every optimizer step while a model is instrumented.

A training step's optimizer (a fused AdamW's ``multi_tensor_apply_kernel``) runs outside any
module, so its kernels were left unattributed: 9% of the GPU time of a two-layer GPT-2 step,
most of what kept a BERT step under 95% in modules. PyTorch calls global hooks around every
``Optimizer.step`` (:func:`torch.optim.optimizer.register_optimizer_step_pre_hook`); while an
instrumentation is active they open and close a ``step:<Optimizer class>`` range, which the
analysis reads as a module of that name with direction ``step``. Nothing is installed
without an instrumentation, and a hook never raises into the user's step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from torch_nsight.capture.ranges.compiling import is_compiling
from torch_nsight.capture.ranges.ranged_forward import PAUSE
from torch_nsight.naming import step_message

logger = logging.getLogger(__name__)


class _Watch:
    """The two global hooks, installed once, and the emitter they write to."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.emitter: Callable[[], Any] | None = None  # the active emitter, or None
        self.open = threading.local()
        self.failed = False

    def pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        emitter = self._emitter()
        if emitter is None:
            return
        try:
            emitter.push(step_message(type(optimizer).__name__))
            self.open.count = getattr(self.open, "count", 0) + 1
        except Exception as err:  # never break the user's step
            self._fail(err)

    def post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if getattr(self.open, "count", 0) <= 0:
            return
        self.open.count -= 1
        emitter = self._emitter()
        try:
            if emitter is not None:
                emitter.pop()
        except Exception as err:
            self._fail(err)

    def _emitter(self) -> Any:
        if self.failed or self.emitter is None or PAUSE.on:
            return None
        if is_compiling():
            return None
        return self.emitter()

    def _fail(self, err: Exception) -> None:
        self.failed = True
        logger.warning("torch_nsight: optimizer step ranges are off for this process (%s: %s)",
                       type(err).__name__, err)


_WATCH = _Watch()


def watch_optimizer_steps(active_emitter: Callable[[], Any]) -> None:
    """Open a range around every optimizer step from now on, written to the emitter that
    ``active_emitter()`` returns at that moment (None: no range). Installs PyTorch's global
    step hooks once per process."""
    _WATCH.emitter = active_emitter
    if _WATCH.handles:
        return
    try:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )
    except ImportError:  # a torch without global optimizer hooks
        return
    _WATCH.handles = [register_optimizer_step_pre_hook(_WATCH.pre),
                      register_optimizer_step_post_hook(_WATCH.post)]
