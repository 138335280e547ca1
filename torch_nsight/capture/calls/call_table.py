"""What the calls recorder keeps of each aten op call: one row per distinct call.

A call is filed under the range messages open on its thread, its op and the shapes and
dtypes of its tensor inputs and outputs; repeats add to its count. Ops that launch no
kernel (views, allocations without a fill, metadata queries) are not filed.

FLOPs come from ``torch.utils.flop_counter.flop_registry``, called as ``FlopCounterMode``
calls it (:func:`~torch_nsight.capture.calls.op_flops.op_flops`); ops without a formula
(elementwise ops, the CPU flash-attention kernel) get ``None``. Bytes are the sum, over the
distinct tensors among the op's inputs and outputs, of their element count times element
size, counting a broadcast (stride 0) dimension once: an analytic lower bound on the memory
traffic.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from torch_nsight.capture.calls.op_flops import op_flops
from torch_nsight.naming import BACKWARD_PREFIX

logger = logging.getLogger(__name__)

__all__ = ["CallTable"]

# Ops that launch no kernel although their schema does not mark an alias.
_NO_KERNEL_OPS = frozenset({
    "_unsafe_view", "_reshape_alias", "lift_fresh",
    "t_", "transpose_", "squeeze_", "unsqueeze_", "as_strided_", "swapdims_", "swapaxes_",
    "detach_",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_",
    "is_contiguous", "sym_is_contiguous", "is_strides_like_format",
    "is_non_overlapping_and_dense", "size", "sym_size", "stride", "sym_stride",
    "storage_offset", "sym_storage_offset", "numel", "sym_numel", "dim", "layout",
})


_Key = tuple[tuple[str, ...], str, tuple[tuple[int, ...], ...], tuple[str, ...],
             tuple[tuple[int, ...], ...], tuple[str, ...], tuple[tuple[str, Any], ...] | None]

#: Ops whose scalar arguments a call's row keeps (``args``, JSON text), in their schema's
#: order after the tensors: what a rebuilt call needs that its shapes do not say (a
#: convolution's dilation; its stride, padding and groups without guessing them).
_ARG_NAMES = {name: ("stride", "padding", "dilation", "transposed", "output_padding", "groups")
              for name in ("convolution", "_convolution", "cudnn_convolution")}


def _op_args(name: str, args: Any, kwargs: Any) -> tuple[tuple[str, Any], ...] | None:
    """The scalar arguments of a call of an op in :data:`_ARG_NAMES` (names to ints, tuples
    of ints or booleans; a tuple of pairs, cheap to hash on every call), or None."""
    names = _ARG_NAMES.get(name)
    if names is None:
        return None
    given = dict(zip(names, list(args)[3:], strict=False))
    given.update({k: v for k, v in (kwargs or {}).items() if k in names})
    plain: list[tuple[str, Any]] = []
    for key, value in given.items():
        if isinstance(value, (bool, int)):
            plain.append((key, value))
        elif isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
            plain.append((key, tuple(int(v) for v in value)))
    return tuple(sorted(plain)) or None


def _args_text(pairs: tuple[tuple[str, Any], ...]) -> str:
    """A call's scalar arguments as the JSON text its row keeps."""
    import json

    return json.dumps({key: list(value) if isinstance(value, tuple) else value
                       for key, value in pairs}, sort_keys=True, separators=(",", ":"))


def _dims(tensor: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in tensor.shape)


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _tensor_bytes(tensor: Any) -> int:
    """Bytes of ``tensor``'s distinct elements: broadcast (stride 0) dimensions count once."""
    try:
        elements = 1
        for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
            if stride != 0:
                elements *= int(size)
        if tensor.numel() == 0:
            elements = 0
        return elements * tensor.element_size()
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested: no strides
        try:
            return int(tensor.numel()) * tensor.element_size()
        except (RuntimeError, NotImplementedError, TypeError):
            return 0


def _flops(packet: Any, args: Any, kwargs: Any, out: Any) -> int | None:
    """FLOPs of one op call (:func:`~torch_nsight.capture.calls.op_flops.op_flops`), or None."""
    try:
        return op_flops(packet, args, kwargs, out)
    except Exception as err:  # a formula that does not cover this overload's arguments
        logger.debug("torch_nsight: no FLOPs for %s: %s: %s", packet, type(err).__name__, err)
        return None


class CallTable:
    """The calls recorded so far, by (range stack, op, input shapes and dtypes, output
    shapes and dtypes): count, FLOPs per call and bytes per call. Safe to fill from several
    threads (autograd's backward threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[_Key, list[Any]] = {}  # key -> [count, flops, bytes]

    def add(self, stack: Sequence[str], func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """File one aten op call under ``stack``, the range messages open on its thread."""
        packet = func._overloadpacket
        name = packet.__name__
        if func.is_view or name in _NO_KERNEL_OPS:
            return
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        key: _Key = (tuple(stack), name,
                     tuple(_dims(t) for t in inputs), tuple(_dtype_name(t) for t in inputs),
                     tuple(_dims(t) for t in outputs), tuple(_dtype_name(t) for t in outputs),
                     _op_args(name, args, kwargs))
        with self._lock:
            entry = self._calls.get(key)
            if entry is not None:
                entry[0] += 1
                return
        distinct = {id(t): t for t in (*inputs, *outputs)}
        nbytes = sum(_tensor_bytes(t) for t in distinct.values())
        flops = _flops(packet, args, kwargs, out)
        with self._lock:
            entry = self._calls.setdefault(key, [0, flops, nbytes])
            entry[0] += 1

    def add_higher_order(self, stack: Sequence[str], func: Any) -> None:
        """File a higher-order operator (its inner ops run without the recorder)."""
        key: _Key = (tuple(stack), str(getattr(func, "_name", func)), (), (), (), (), None)
        with self._lock:
            self._calls.setdefault(key, [0, None, 0])[0] += 1

    def rows(self) -> list[dict[str, Any]]:
        """One dict per distinct call, in order of first appearance (see
        :meth:`~torch_nsight.capture.calls.recorder.CallRecorder.rows`)."""
        with self._lock:
            items = [(key, list(entry)) for key, entry in self._calls.items()]
        return [{"range_stack": key[0], "op": key[1], "input_shapes": key[2],
                 "input_dtypes": key[3], "output_shapes": key[4], "output_dtypes": key[5],
                 "flops": entry[1], "bytes": entry[2], "count": entry[0],
                 **({} if key[6] is None else {"args": _args_text(key[6])})}
                for key, entry in items]

    def clear(self) -> None:
        """Forget the calls filed so far."""
        with self._lock:
            self._calls.clear()


def innermost_class(stack: tuple[str, ...], classes: dict[str, str]) -> str | None:
    """The class of the innermost module range of ``stack`` (a backward range counts as its
    module's); None where no module range is open."""
    for message in reversed(stack):
        found = classes.get(message.removeprefix(BACKWARD_PREFIX))
        if found is not None:
            return found
    return None
