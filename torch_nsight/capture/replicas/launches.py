"""What a module launches, as the sibling check records and compares it.

A *launch* is one torch-level call made inside a module's forward, as
:class:`~torch_nsight.capture.replicas.siblings.SiblingCheck` sees it through a ``TorchFunctionMode``:
``(function, arguments, outputs)``, where tensors are reduced to what decides the kernel
that runs (shape, strides, dtype, device, ``requires_grad``) and other values to what can
change the launch. Two twins are identical when their launches match, in order, call by call,
whatever their Python attributes: a stochastic-depth rate of 0.05 in one block and 0.1 in the
next reaches ``bernoulli_`` as two floats that launch the same kernel, so a float is kept only
where its value can pick another path (:data:`BRANCHING_FLOATS`). A rate of 0 skips the random
mask in Python, so that block launches fewer calls and is profiled on its own.

Sizes are plain ints or, for a symbolic size (``SymInt``), its text: nothing symbolic is ever
hashed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

#: One launch: function name, its arguments' signature, its outputs' signature.
Launch = tuple[str, Any, Any]

#: Float arguments that keep their value in a signature: those ATen and model code branch on
#: (``pow``'s square, cube, square-root and reciprocal kernels; dropout skipped at ``p == 0``;
#: a scale of 1). Any other float is recorded as ``"float"``: its value changes no kernel.
BRANCHING_FLOATS = frozenset({0.0, 1.0, -1.0, 2.0, 3.0, 0.5, -0.5, -2.0})

#: Tensor methods that read metadata and launch nothing; left out of the launches, so that a
#: twin which only asks for a size more or less is still a twin.
_METADATA = frozenset({
    "size", "dim", "ndimension", "stride", "numel", "nelement", "is_contiguous",
    "element_size", "data_ptr", "storage_offset", "is_floating_point", "is_complex",
    "get_device", "__len__", "__repr__", "__format__", "__hash__"})

_TENSOR_CLASSES = (".TensorBase.", "torch._tensor.Tensor.", "torch._C.TensorBase.")

#: Prefixes shortened when a launch is written for a person.
_SHORT_NAMES = (("torch._VariableFunctionsClass.", "torch."), (".TensorBase.", "Tensor."),
                ("torch._tensor.Tensor.", "Tensor."), ("torch._C.TensorBase.", "Tensor."))


def function_name(func: Any) -> str:
    """The qualified name of a torch function, e.g. ``torch._VariableFunctionsClass.conv2d``."""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if name is None:
        return repr(func)
    return f"{getattr(func, '__module__', None) or ''}.{name}"


def launches_nothing(name: str) -> bool:
    """Whether the call ``name`` only reads metadata (a property, a size): no launch."""
    if name.endswith(".__get__"):
        return True
    return any(name.startswith(cls) and name[len(cls):] in _METADATA for cls in _TENSOR_CLASSES)


def _plain(size: Any) -> Any:
    """A size as a plain int, or its text: a symbolic size (``SymInt``) is never hashed."""
    return size if type(size) is int else str(size)


def tensor_signature(value: torch.Tensor) -> tuple[Any, ...]:
    """What of a tensor can change which kernels launch: ``("T", shape, strides or layout,
    dtype, device, requires_grad)``."""
    shape = tuple(_plain(d) for d in value.shape)
    if value.layout == torch.strided:
        # a size-1 dimension's stride changes no kernel (and is arbitrary after a view)
        layout: Any = tuple(None if d == 1 else _plain(s)
                            for d, s in zip(shape, value.stride(), strict=True))
    else:
        layout = str(value.layout)
    return ("T", shape, layout, str(value.dtype), str(value.device),
            bool(value.requires_grad))


def signature(value: Any) -> Any:
    """What of ``value`` (arguments or outputs, nested) can change which kernels launch."""
    if isinstance(value, torch.Tensor):
        return tensor_signature(value)
    if isinstance(value, (list, tuple)):
        return tuple(signature(v) for v in value)
    if isinstance(value, Mapping):
        return tuple((k, signature(v)) for k, v in value.items())
    if type(value) is float:
        return value if value in BRANCHING_FLOATS or not math.isfinite(value) else "float"
    if value is None or type(value) in (bool, int, str):
        return value
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return str(value)
    return type(value).__qualname__


def requires_grad_pattern(value: Any) -> Any:
    """``requires_grad`` of each tensor in ``value`` (nested), None elsewhere."""
    if isinstance(value, torch.Tensor):
        return value.requires_grad
    if isinstance(value, (list, tuple)):
        return tuple(requires_grad_pattern(v) for v in value)
    if isinstance(value, Mapping):
        return tuple((k, requires_grad_pattern(v)) for k, v in value.items())
    return None


def first_difference(one: Sequence[Any], other: Sequence[Any]) -> int | None:
    """The first index where two sequences differ (one may be longer), or None."""
    for i, (a, b) in enumerate(zip(one, other, strict=False)):
        if a != b:
            return i
    return None if len(one) == len(other) else min(len(one), len(other))


def describe_value(sig: Any) -> str:
    """A :func:`signature` in words: ``bfloat16[32,96,56,56]`` for a tensor (with
    ``strided`` when it is not contiguous, ``grad`` when it requires grad)."""
    if isinstance(sig, tuple) and len(sig) == 6 and sig[0] == "T":
        _, shape, layout, dtype, _, grad = sig
        text = f"{dtype.removeprefix('torch.')}[{','.join(str(d) for d in shape)}]"
        if isinstance(layout, tuple) and not _is_contiguous(shape, layout):
            text += " strides (" + ",".join("-" if s is None else str(s) for s in layout) + ")"
        return text + (" grad" if grad else "")
    if isinstance(sig, tuple):
        return "(" + ", ".join(describe_value(v) for v in sig) + ")"
    return repr(sig) if sig != "float" else "float"


def _is_contiguous(shape: tuple[Any, ...], strides: tuple[Any, ...]) -> bool:
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if stride is not None and stride != expected:
            return False
        expected *= size if isinstance(size, int) else 1
    return True


def describe_launch(launch: Launch | None, *, outputs: bool = True) -> str:
    """One launch in words, e.g. ``Tensor.bernoulli_(float32[2,1,1,1], float)``, with
    ``-> outputs`` when ``outputs``."""
    if launch is None:
        return "nothing"
    name, args, result = launch
    for prefix, short in _SHORT_NAMES:
        if name.startswith(prefix):
            name = short + name[len(prefix):]
            break
    positional, keywords = args if isinstance(args, tuple) and len(args) == 2 else (args, ())
    words = [describe_value(v) for v in positional]
    words += [f"{k}={describe_value(v)}" for k, v in keywords]
    return f"{name}({', '.join(words)})" + (f" -> {describe_value(result)}" if outputs else "")


class Member:
    """What one candidate twin did on the checked iteration."""

    __slots__ = ("calls", "inputs", "launches", "grad_pattern", "bwd_pre", "seconds",
                 "events")

    def __init__(self) -> None:
        self.calls = 0
        self.inputs: list[Any] = []
        self.launches: list[list[Launch]] = []  # per forward call, in order
        # per call, with grad enabled: requires_grad of its inputs and parameters (what
        # decides the backward graph autograd builds for the member)
        self.grad_pattern: list[Any] = []
        self.bwd_pre = 0  # backward passes through it (autograd node pre-hooks)
        self.seconds = 0.0
        self.events: list[Any] = []

    def signature(self) -> tuple[Any, ...]:
        return (self.calls, tuple(self.inputs), tuple(tuple(c) for c in self.launches),
                tuple(self.grad_pattern), self.bwd_pre)

    def op_count(self) -> int:
        return sum(len(c) for c in self.launches)


#: What each place of :meth:`Member.signature` holds, as a mismatch names it.
_SIGNATURE_PARTS = ("calls", "inputs", "launches", "gradients", "backward")


def _differences(members: list[Member]) -> str:
    """Which parts of the members' signatures differ, e.g. ``inputs, launches``: inputs
    are the call's arguments (a tensor's shape, strides, dtype and ``requires_grad``, other
    values as :func:`signature` keeps them)."""
    signatures = [m.signature() for m in members]
    return ", ".join(dict.fromkeys(
        part for i, part in enumerate(_SIGNATURE_PARTS) if len({s[i] for s in signatures}) > 1))


def _first_difference(name: str, member: Member, base_name: str, base: Member) -> str:
    """Where ``member`` first parts from ``base``, in words: which call, which launch."""
    if member.calls != base.calls:
        return f"{name} ran {member.calls} call(s), {base_name} {base.calls}"
    for call, (mine, theirs) in enumerate(zip(member.launches, base.launches, strict=True)):
        at = first_difference(mine, theirs)
        if at is not None:
            ours = mine[at] if at < len(mine) else None
            other = theirs[at] if at < len(theirs) else None
            # the outputs are named only where they alone differ
            outputs = ours is not None and other is not None and ours[:2] == other[:2]
            return (f"{name} call {call + 1} launch {at + 1} of {len(mine)}: "
                    f"{describe_launch(ours, outputs=outputs)}; {base_name} launch {at + 1} "
                    f"of {len(theirs)}: {describe_launch(other, outputs=outputs)}")
    at = first_difference(member.inputs, base.inputs)
    if at is not None:
        return (f"{name} call {at + 1} takes {describe_value(member.inputs[at])}, "
                f"{base_name} {describe_value(base.inputs[at])}")
    if member.grad_pattern != base.grad_pattern:
        return (f"{name} needs gradients for other inputs or parameters than {base_name} "
                "(another backward graph)")
    return f"{name} ran {member.bwd_pre} backward pass(es), {base_name} {base.bwd_pre}"


def describe_mismatch(parts: list[list[str]], firsts: list[Member]) -> str:
    """One line on twins that ran differently: ``parts`` (names that agree, in module
    order), each with its first member's record, and where each part first parts from the
    largest one (the first of those)."""
    described = " | ".join(f"{', '.join(p)} ({m.calls} call(s), {m.op_count()} launches)"
                           for p, m in zip(parts, firsts, strict=True))
    base = max(range(len(parts)), key=lambda i: (len(parts[i]), -i))
    where = "; ".join(_first_difference(p[0], m, parts[base][0], firsts[base])
                      for i, (p, m) in enumerate(zip(parts, firsts, strict=True)) if i != base)
    return (f"twins run differently ({_differences(firsts)}): {described}; first difference: "
            f"{where}; only members that agree are replicated")
