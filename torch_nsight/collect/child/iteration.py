"""One iteration of the user's model in the sweep's child: its inputs, forward, backward."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from torch_nsight.collect.shared.job import Job
from torch_nsight.naming import op_message

# The op range around the loss gradient of a backward sweep (module "(unattributed)").
LOSS_MESSAGE = op_message("loss")


def describe_outputs(value: Any) -> Any:
    """Shapes and dtypes of a model output (tensors, tuples, dicts), for the result JSON."""
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, (list, tuple)):
        return [describe_outputs(v) for v in value]
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): describe_outputs(v) for k, v in value.items()}
    return type(value).__name__


def _tensors(value: Any) -> Iterator[Any]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict) or hasattr(value, "items"):
        for item in value.values():
            yield from _tensors(item)


def _to_device(value: Any, device: Any, dtype: Any) -> Any:
    if isinstance(value, torch.Tensor):
        cast = dtype if dtype is not None and value.is_floating_point() else None
        return value.to(device=device, dtype=cast)
    if isinstance(value, tuple):
        return tuple(_to_device(v, device, dtype) for v in value)
    if isinstance(value, list):
        return [_to_device(v, device, dtype) for v in value]
    if isinstance(value, dict):
        return {k: _to_device(v, device, dtype) for k, v in value.items()}
    return value


def model_dtype(model: Any) -> Any:
    """The dtype of the model's first floating-point parameter (float32 if none)."""
    for param in model.parameters():
        if param.is_floating_point():
            return param.dtype
    return torch.float32


def build_inputs(job: Job, shape: Any, device: Any, dtype: Any) -> tuple[tuple[Any, ...],
                                                                         dict[str, Any]]:
    """Return (args, kwargs) for one call of the model at ``shape``, on ``device``.

    Floating-point inputs from ``make_inputs`` are cast only when the sweep names a dtype.
    """
    if job.make_inputs is None:
        value: Any = torch.randn(tuple(shape) if not isinstance(shape, int) else (shape,),
                                 dtype=dtype, device=device)
    else:
        value = _to_device(job.make_inputs(shape), device,
                           dtype if job.dtype is not None else None)
    if isinstance(value, dict):
        return (), value
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    return (value,), {}


def run_step(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], backward: bool,
             emitter: Any = None) -> Any:
    """One iteration: forward, and backward of ``sum(mean(float(output)))`` if asked.

    The loss is not built as a graph: its gradient with respect to each output that needs
    one (``1 / numel`` in the output's dtype, what the loss graph would pass back) is made
    directly, inside the op range :data:`LOSS_MESSAGE` when ``emitter`` is given, and
    backward starts at the model's outputs. Every kernel of the iteration is then inside a
    module range or that op range (autograd would run the loss graph's backward on its own
    thread, before any module range opens there).

    Args:
        emitter: Where the loss range goes (push/pop), or None for no range.

    Raises:
        ValueError: ``backward`` but no output needs a gradient.
    """
    if not backward:
        with torch.no_grad():
            return model(*args, **kwargs)
    out = model(*args, **kwargs)
    outputs = [t for t in _tensors(out) if t.requires_grad]
    if not outputs:
        raise ValueError("backward=True but no output of the model needs a gradient")
    if emitter is not None:
        emitter.push(LOSS_MESSAGE)
    try:
        grads = [torch.full_like(t, 1.0 / t.numel()) for t in outputs]
    finally:
        if emitter is not None:
            emitter.pop()
    torch.autograd.backward(outputs, grads)
    model.zero_grad(set_to_none=True)
    return out
