"""The ``TorchDispatchMode`` a :class:`~torch_nsight.capture.calls.recorder.CallRecorder` records
with: every aten op call filed under its thread's open ranges, an op outside every range given
a range of its own, and the op calls a profiled step repeats left out of ncu's replay
(:mod:`torch_nsight.capture.replicas.op_calls`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch_nsight.capture.calls.recorder import CallRecorder


def make_mode(recorder: CallRecorder) -> Any:
    """The ``TorchDispatchMode`` that feeds ``recorder`` (the class is built on first use)."""
    return _mode_class()(recorder)


@functools.cache
def _mode_class() -> type:
    import sys

    from torch._ops import HigherOrderOperator
    from torch.utils._python_dispatch import TorchDispatchMode

    # PyTorch wraps a mode's __torch_dispatch__ against Dynamo tracing, which imports
    # torch._dynamo (about 1 s). A process that has not imported Dynamo has compiled
    # nothing that could trace into the mode, so the wrapper is skipped there.
    dynamo_loaded = "torch._dynamo" in sys.modules

    class _CallRecordingMode(TorchDispatchMode):
        # Higher-order operators come to __torch_dispatch__ instead of raising.
        supports_higher_order_operators = True

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return dynamo_loaded

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            # Dynamo compiles with the mode on the stack (else it runs the frame eagerly
            # from then on) and runs compiled code under it: the model stays compiled.
            return True

        def __init__(self, recorder: CallRecorder) -> None:
            super().__init__()
            self.recorder = recorder

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            recorder = self.recorder
            if isinstance(func, HigherOrderOperator):
                if recorder._recording:
                    recorder._record_higher_order(func)
                return func(*args, **kwargs)
            message = recorder.outside_message(func)
            if message is not None:  # named: its kernels, and its row of the calls table
                recorder.push(message)
            close = recorder.replica_range(func, args, kwargs)
            try:
                out = func(*args, **kwargs)
                if recorder._recording:
                    recorder._record_safely(func, args, kwargs, out)
            finally:
                if close is not None:
                    close()
                if message is not None:
                    recorder.pop()
            return out

    return _CallRecordingMode
