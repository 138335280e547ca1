"""The PyTorch call that launched a kernel outside every torch_nsight range, read from the
events of PyTorch's profiler, as the range message the capture stage writes for such a call.

A trace holds PyTorch's own CPU events on the launching thread: its ops (``cpu_op``:
``aten::cross_entropy_loss``; on autograd's thread ``autograd::engine::evaluate_function:
NllLossBackward0`` around each node's ops) and its annotations (``user_annotation``:
``Optimizer.step#AdamW.step``). A kernel launched with no torch_nsight range open (a trace
recorded before the capture named these calls, or a call it does not know) gets, in its
range stack, the message the capture would have opened there:

* inside PyTorch's annotation of an optimizer's step (``Optimizer.step#AdamW.step``):
  ``step:AdamW``, the optimizer's step range;
* else inside an autograd node (outermost op ``autograd::engine::evaluate_function:
  NllLossBackward0``): ``bwd:op:nll_loss``, the backward of the node's forward op;
* else inside an op: ``op:`` and the outermost one, the call the user's code made
  (``op:cross_entropy_loss``, not the ``nll_loss_forward`` inside it);
* else (a CUDA graph's replay, a bare launch) nothing: the kernel stays unattributed.

The analysis then names the kernel's row after that op (``(outside) cross_entropy_loss``,
:func:`torch_nsight.vocabulary.outside_module`) or the optimizer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from torch_nsight import naming

__all__ = ["launch_message", "forward_op"]

#: PyTorch's annotation of an optimizer's step (``Optimizer.step#AdamW.step``).
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#(?P<optimizer>[^#.]+)\.step$")
#: What PyTorch's profiler puts before an autograd node's name on the thread running it.
_EVALUATE = "autograd::engine::evaluate_function: "
_NAMESPACE = "aten::"
#: Where a CamelCase node name takes an underscore: before a capital that follows a small
#: letter or digit, or that starts a word after capitals (``CUDAGraph`` -> ``cuda_graph``).
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")


@functools.lru_cache(maxsize=4096)
def forward_op(node: str) -> str:
    """The forward op an autograd node runs the backward of, named as its aten op:
    ``NllLossBackward0`` -> ``nll_loss``, ``torch::autograd::AccumulateGrad`` ->
    ``accumulate_grad``."""
    name = node.strip().rsplit("::", 1)[-1]
    name = _BACKWARD_SUFFIX.sub("", name) or name
    return _WORD.sub("_", name).lower()


@functools.lru_cache(maxsize=4096)
def _op_message(op: str) -> str:
    if op.startswith(_EVALUATE):
        return naming.backward_op_message(forward_op(op[len(_EVALUATE):]))
    return naming.op_message(op.removeprefix(_NAMESPACE))


def launch_message(annotations: Sequence[str], ops: Sequence[str]) -> str | None:
    """The range message of the call that launched a kernel, from PyTorch's events open on
    its launching thread when it was launched (see the table above).

    Args:
        annotations: the ``user_annotation`` events open then, outermost first.
        ops: the ``cpu_op`` events open then, outermost first.

    Returns:
        ``step:<optimizer>``, ``op:<op>`` or ``bwd:op:<forward op>``; None when no event
        names the call.
    """
    for name in reversed(annotations):
        found = _OPTIMIZER_STEP.match(name)
        if found is not None:
            return naming.step_message(found["optimizer"])
    return _op_message(ops[0]) if ops else None
