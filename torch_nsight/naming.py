"""The NVTX vocabulary shared by the capture stage (which writes ranges) and the report
stage (which reads them back). Kept free of torch and pandas so both sides can import it.

Conventions, all in the NVTX domain :data:`DOMAIN`:

* forward of a module: push/pop range whose message is the module's qualified name as in
  ``model.named_modules()`` (the root module's message is its class name);
* backward of a module: the same name behind :data:`BACKWARD_PREFIX` (``bwd:layers.0.mlp``);
* a named functional op inside a module: :data:`OP_PREFIX` + op name (``op:silu``);
* a training-loop call that may run outside every module (the loss, the gradient clipping,
  the GradScaler's unscale: see :mod:`torch_nsight.capture.ranges.outside`): the same op range
  (``op:cross_entropy``), the backward of its autograd nodes behind :data:`BACKWARD_PREFIX`
  (``bwd:op:cross_entropy``), and behind :data:`STEP_PREFIX` for a call of the optimizer's
  step phase (``step:op:clip_grad_norm_``, ``step:op:GradScaler.unscale_``); outside every
  module the analysis names its kernels by :func:`torch_nsight.vocabulary.outside_module`;
* one call of a ``torch.compile`` graph: :data:`COMPILED_PREFIX` + graph + ``@`` + the
  qualified name of the instrumented module it ran for (``compiled:g2@blocks.0``; see
  :mod:`torch_nsight.capture.compiled.inductor`), replaced by the module ranges of each kernel when
  the report is read;
* one measured iteration of a sweep: two start/end ranges, :data:`MEASURE_MESSAGE`
  (fixed, so ``ncu --nvtx-include torch_nsight@measure`` selects it without a regex) and a
  label made by :func:`format_measure_range` (``sweep;variant=eager;shape=4x128;run=0``).
  Start/end ranges, unlike push/pop ones, also cover kernels that autograd launches from
  its own thread.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DOMAIN = "torch_nsight"
BACKWARD_PREFIX = "bwd:"
OP_PREFIX = "op:"
MEASURE_MESSAGE = "measure"
MEASURE_PREFIX = "sweep"
WARMUP_MESSAGE = "warmup"
# The start/end range around a sweep's replicated siblings; its ncu command excludes it.
REPLICA_MESSAGE = "replica"
#: The NVTX domain of the push/pop range around each op call profiled while repeated op calls
#: are left out (:mod:`torch_nsight.capture.replicas.op_calls`): its message is
#: :data:`CALL_PREFIX` and the call's number in the step, which the report's rows keep among
#: their other ranges.
CALL_DOMAIN = "torch_nsight.call"
CALL_PREFIX = "torch_nsight.call:"
COMPILED_PREFIX = "compiled:"
#: An optimizer's step (``step:AdamW``): a module of the optimizer's class name, direction
#: ``step``.
STEP_PREFIX = "step:"
#: The direction of the kernels an optimizer's ``step()`` launches, and those of the calls
#: of its phase around it (the gradient clipping, the GradScaler's unscale and update).
OPTIMIZER_DIRECTION = "step"
#: Prefix of the PyTorch profiler ranges that stand in for the NVTX domain in a timeline
#: trace (``torch_nsight/h.0.attn``); the trace reader keeps only ranges named so.
RECORD_PREFIX = f"{DOMAIN}/"
_FIELD_SEP = ";"


def backward_message(name: str) -> str:
    """Return the range message for the backward pass of module ``name``."""
    return BACKWARD_PREFIX + name


def is_inside(name: str, ancestor: str) -> bool:
    """Whether module ``name`` is ``ancestor`` or lies inside it (dotted qualified names)."""
    return name == ancestor or name.startswith(ancestor + ".")


def step_message(optimizer: str) -> str:
    """Return the range message of one step of an optimizer of class ``optimizer``."""
    return STEP_PREFIX + optimizer


def op_message(op: str) -> str:
    """Return the range message for the functional op ``op``."""
    return OP_PREFIX + op


def backward_op_message(op: str) -> str:
    """Return the range message for the backward of the op ``op`` (``bwd:op:cross_entropy``):
    the autograd nodes its forward made, run on the thread that runs backward."""
    return BACKWARD_PREFIX + OP_PREFIX + op


def step_op_message(op: str) -> str:
    """Return the range message of the op ``op`` of the optimizer's step phase, called
    outside the optimizer (``step:op:clip_grad_norm_``)."""
    return STEP_PREFIX + OP_PREFIX + op


def compiled_message(graph: str, root: str) -> str:
    """Return the range message of one call of compiled graph ``graph`` made for the
    instrumented module ``root`` (qualified name, ``""`` for the root module)."""
    return f"{COMPILED_PREFIX}{graph}@{root}"


@dataclass(frozen=True)
class RangeKind:
    """What one torch_nsight push/pop range message stands for."""

    kind: str  # "module", "op" or "compiled"
    name: str
    direction: str  # "fwd", "bwd" or "step" (an optimizer's, or an op of its phase)


@functools.lru_cache(maxsize=1 << 16)  # a message recurs in the stack of every kernel under it
def parse_message(message: str) -> RangeKind:
    """Classify a push/pop range message written by :func:`torch_nsight.instrument`."""
    if message.startswith(OP_PREFIX):
        return RangeKind("op", message[len(OP_PREFIX) :], "fwd")
    if message.startswith(COMPILED_PREFIX):
        return RangeKind("compiled", message[len(COMPILED_PREFIX) :], "fwd")
    if message.startswith(BACKWARD_PREFIX):
        name = message[len(BACKWARD_PREFIX) :]
        if name.startswith(OP_PREFIX):
            return RangeKind("op", name[len(OP_PREFIX) :], "bwd")
        return RangeKind("module", name, "bwd")
    if message.startswith(STEP_PREFIX):
        name = message[len(STEP_PREFIX) :]
        if name.startswith(OP_PREFIX):
            return RangeKind("op", name[len(OP_PREFIX) :], OPTIMIZER_DIRECTION)
        return RangeKind("module", name, OPTIMIZER_DIRECTION)
    return RangeKind("module", message, "fwd")


def format_measure_range(*, variant: str = "", shape: str = "", run: int = 0) -> str:
    """Return the start/end range message that labels one measured sweep iteration
    (variant, shape label, repeat index)."""
    for label, value in (("variant", variant), ("shape", shape)):
        if _FIELD_SEP in value or "=" in value or "/" in value:
            raise ValueError(f"{label} label {value!r} must not contain ';', '=' or '/'")
    return _FIELD_SEP.join(
        [MEASURE_PREFIX, f"variant={variant}", f"shape={shape}", f"run={int(run)}"]
    )


def parse_measure_range(message: str) -> dict[str, str] | None:
    """Read back a message made by :func:`format_measure_range`; None for other messages."""
    parts = message.split(_FIELD_SEP)
    if parts[0] != MEASURE_PREFIX:
        return None
    fields = dict(part.split("=", 1) for part in parts[1:] if "=" in part)
    return {"variant": fields.get("variant", ""), "shape": fields.get("shape", ""),
            "run": fields.get("run", "0")}


def lazy_names(package: str, lazy: dict[str, str]) -> Callable[[str], Any]:
    """A package's module-level ``__getattr__`` that imports each name of ``lazy`` (name ->
    submodule) on first use and keeps it in the package's namespace."""
    import importlib
    import sys

    def attribute(name: str) -> Any:
        if name not in lazy:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{lazy[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return attribute
