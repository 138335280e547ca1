"""Repeated op calls of a profiled step profiled once (``torch-nsight profile``).

Identical blocks are profiled once (:mod:`torch_nsight.capture.replicas.siblings`), but most
steps repeat far more than their blocks: the same convolution shape in blocks that differ
elsewhere, a batch norm's forward in every layer of a stage, a shifted and an unshifted
window-attention block's GEMMs. An aten op's kernels are decided by the op and what its
arguments look like (shapes, strides, dtypes, devices, how their data is aligned, the few
scalars ATen branches on), not by the module it runs in, so an op call that repeats an
earlier call of the same step launches the kernels that call launched.

:class:`OpReplicas` runs inside the calls recorder's dispatch mode
(:class:`~torch_nsight.capture.calls.recorder.CallRecorder`) over the first chosen step, when
the profile command asks for it (:attr:`~torch_nsight.environment.ScriptEnv.replicate_ops`):

* every op call is numbered in the order it starts;
* a call whose key (:func:`call_key`) an earlier call of the step had runs inside the
  start/end range :data:`~torch_nsight.naming.REPLICA_MESSAGE`, which ``ncu --nvtx-exclude``
  leaves out, and is written down: the number of the call it repeats, the number of the last
  call profiled before it (where its rows go) and its own module ranges;
* every other call runs inside a push/pop range of the domain
  :data:`~torch_nsight.naming.CALL_DOMAIN` whose message is its number, which ncu keeps with
  each of its kernels.

At the step's end the list is carried into the report with the calls table, and reading the
report (:mod:`torch_nsight.report.op_replicas`) gives each left-out call a copy of the rows of
the call it repeats, in its own place and module. Ops whose kernels depend on their data
(``nonzero``, ``unique``, ``masked_select``: ATen tags their outputs as data-dependent), ops
outside ATen (custom and collective ops), calls while a CUDA graph is captured and calls
inside a replicated sibling (left out already) are never left out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from torch_nsight import formats, naming
from torch_nsight.capture.replicas.launches import signature, tensor_signature

logger = logging.getLogger(__name__)

#: The alignment (bytes) a tensor's data is told by in a key: ATen's vectorized elementwise
#: kernels are chosen by whether every pointer is aligned to the vector's width (up to 16
#: bytes), so a call whose input starts 4 bytes later can launch another kernel.
ALIGNMENT = 16
_DATA_DEPENDENT = tuple(getattr(torch.Tag, name) for name in
                        ("dynamic_output_shape", "data_dependent_output")
                        if hasattr(torch.Tag, name))


def _tensor_key(value: torch.Tensor) -> tuple[Any, ...]:
    """A tensor's signature (not ``requires_grad``: below autograd it launches nothing) and how
    its data is aligned."""
    if value.layout != torch.strided or value.is_nested:
        raise ValueError("not a strided tensor")
    aligned = value.data_ptr() % ALIGNMENT if value.device.type == "cuda" else 0
    # a conjugate or negative view reaches the ops that take it as it is (mm, copy_), whose
    # kernels then conjugate or negate on the fly
    return (*tensor_signature(value)[:5], aligned, value.is_conj(), value.is_neg())


def _key_of(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
            raise ValueError("a tensor subclass")
        return _tensor_key(value)
    if isinstance(value, (list, tuple)):
        return tuple(_key_of(v) for v in value)
    if isinstance(value, Mapping):
        return tuple((k, _key_of(v)) for k, v in value.items())
    return signature(value)


def call_key(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """What decides the kernels an aten op call launches, hashable; None for a call never
    left out (an op outside ATen, one whose kernels depend on its data, an argument that is
    not a plain strided tensor or that cannot be told by its metadata)."""
    if getattr(func, "namespace", None) != "aten":
        return None
    if any(tag in _DATA_DEPENDENT for tag in getattr(func, "tags", ())):
        return None
    try:
        key = (str(func), _key_of(tuple(args)), _key_of(dict(kwargs)))
        hash(key)
    except Exception:  # noqa: BLE001 - fake, meta or symbolic tensors, odd arguments
        return None
    return key


class OpReplicas:
    """The repeated op calls of one profiled step, left out of ncu's replay (see the
    module docstring).

    Args:
        leaving_out: whether a sibling's replica range is open now (its calls are left out
            already, and copied with their sibling).
    """

    def __init__(self, leaving_out: Callable[[], bool] | None = None) -> None:
        self.leaving_out = leaving_out
        self.lock = threading.Lock()
        self.seen: dict[Any, int] = {}
        self.stacks: dict[tuple[str, ...], int] = {}
        self.replicas: list[tuple[int, int, int]] = []
        self.calls = 0
        self.last = -1
        self.broken = False

    def clear(self) -> None:
        """Forget the calls seen so far (the step raised: the next chosen step is measured on
        its own). The numbers stay taken, and the calls left out listed: ncu profiled the
        step that raised too, its kernels carry those numbers."""
        with self.lock:
            self.seen.clear()

    def enter(self, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
              stack: Sequence[str]) -> Callable[[], None] | None:
        """Before an op call: open its range (a replica's, or its number's) and return what
        closes it; None when it opens none. Never raises: a failure is logged once and
        leaves every later call profiled."""
        if self.broken:
            return None
        try:
            return self._enter(func, args, kwargs, stack)
        except Exception as err:  # noqa: BLE001 - never into the user's op
            self.broken = True
            logger.warning("torch_nsight: repeated op calls are profiled from now on (%s: %s)",
                           type(err).__name__, err)
            return None

    def _enter(self, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
               stack: Sequence[str]) -> Callable[[], None] | None:
        if (self.leaving_out is not None and self.leaving_out()) or (
                torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()):
            return None
        key = call_key(func, args, kwargs)
        with self.lock:
            number = self.calls
            self.calls += 1
            repeats = None if key is None else self.seen.get(key)
            if repeats is None:
                if key is not None:
                    self.seen[key] = number
                self.last = number
            else:
                place = self.stacks.setdefault(tuple(stack), len(self.stacks))
                self.replicas.append((repeats, self.last, place))
        import nvtx

        if repeats is None:
            nvtx.push_range(f"{naming.CALL_PREFIX}{number}", domain=naming.CALL_DOMAIN)
            return lambda: nvtx.pop_range(domain=naming.CALL_DOMAIN)
        handle = nvtx.start_range(naming.REPLICA_MESSAGE, domain=naming.DOMAIN)
        return lambda: nvtx.end_range(handle)

    def document(self) -> dict[str, Any]:
        """What the report carries: the module ranges of the calls left out (``stacks``) and
        each left-out call as [the call it repeats, the last call profiled before it, its
        stack's index]."""
        with self.lock:
            stacks = sorted(self.stacks, key=self.stacks.__getitem__)
            return {"kind": formats.OP_REPLICAS_KIND, "calls": self.calls,
                    "stacks": [list(s) for s in stacks],
                    "replicas": [list(r) for r in self.replicas]}


def op_replicas_for(replication: Any, others: Iterable[Any]) -> OpReplicas | None:
    """The :class:`OpReplicas` of a model instrumented under ``profile`` (``replication``: its
    :class:`~torch_nsight.capture.replicas.replica.ScriptReplication` or None), or None where another
    instrumentation of the process (``others``) records calls: each model's dispatch mode sees
    every model's ops but only its own module ranges, so a copy could land outside its module.
    The others' are switched off too where they have numbered no call yet (two models built
    before the loop, a GAN's generator and discriminator): both models are profiled call by
    call."""
    recorders = [h.carrier.recorder for h in others
                 if getattr(h, "carrier", None) is not None
                 and getattr(h.carrier.recorder, "op_replicas", None) is not None]
    if not recorders:
        return OpReplicas(getattr(replication, "leaving_out", None))
    for recorder in recorders:
        if recorder.op_replicas.calls == 0:
            recorder.op_replicas = None
    logger.info("torch_nsight: several models are instrumented: their repeated op calls are "
                "profiled one by one")
    return None

