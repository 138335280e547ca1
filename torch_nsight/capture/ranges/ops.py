"""Ranges around named functional ops (``op:silu``, ``op:mul``) inside module forwards.

A :class:`torch.overrides.TorchFunctionMode` sees every torch function, ``torch.nn.functional``
call and tensor method called from Python while it is on the mode stack. The capture stage
puts one on the stack while the outermost instrumented module's forward runs on a thread,
and gives a range to the calls whose normalised name is in the op set. Calls made from
inside the mode's handler (``F.layer_norm`` calling ``torch.layer_norm``) do not come back
to the mode, so one op gets one range.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode, _pop_mode

from torch_nsight.capture.ranges.compiling import is_compiling as _is_compiling
from torch_nsight.capture.ranges.frames import Range
from torch_nsight.capture.ranges.stack import RangeStack

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_OPS", "normalize_op_name", "OpNamer"]

DEFAULT_OPS: frozenset[str] = frozenset({
    # activations
    "silu", "gelu", "relu", "sigmoid", "tanh", "softplus", "mish",
    # elementwise arithmetic (residual adds, gating, scaling)
    "add", "sub", "mul", "div",
    # matrix products
    "matmul", "mm", "bmm", "baddbmm", "addmm", "einsum", "linear",
    # attention and normalisation
    "softmax", "log_softmax", "scaled_dot_product_attention",
    "layer_norm", "rms_norm", "group_norm", "batch_norm",
    # the rest of a transformer block
    "dropout", "embedding", "cross_entropy",
})
"""The op names that ``ops=True`` gives ranges to."""

_REFLECTED = frozenset({"add", "sub", "mul", "matmul", "truediv", "floordiv", "pow", "mod",
                        "and", "or", "xor", "lshift", "rshift"})
_ALIASES = {"truediv": "div", "divide": "div", "true_divide": "div", "multiply": "mul",
            "subtract": "sub", "floordiv": "floor_divide"}


def normalize_op_name(func: Callable[..., Any]) -> str | None:
    """Return the op name under which ``func`` is matched against the op set.

    Operators and in-place or reflected variants map to the plain name: ``Tensor.__mul__``,
    ``Tensor.__rmul__``, ``Tensor.__imul__`` and ``Tensor.mul_`` are all ``"mul"``;
    ``Tensor.__truediv__`` is ``"div"``.

    Args:
        func: A function as passed to ``__torch_function__``.

    Returns:
        The normalised name, or None when ``func`` has no ``__name__``.
    """
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or not name:
        return None
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        name = name[2:-2]
        if name[:1] in ("r", "i") and name[1:] in _REFLECTED:
            name = name[1:]
    elif name.endswith("_") and not name.startswith("_"):
        name = name[:-1]
    return _ALIASES.get(name, name)


_UNRESOLVED = object()




class OpNamer(TorchFunctionMode):
    """The torch function mode that opens a range around each named op.

    Args:
        ops: Normalised op names to give ranges to.
        make_range: Builds the :class:`Range` for an op name (called once per name).
        stack: The range stack ranges are opened on.
    """

    def __init__(
        self, ops: Iterable[str], make_range: Callable[[str], Range], stack: RangeStack
    ) -> None:
        super().__init__()
        self.ops = frozenset(ops)
        self._stack = stack
        self._ranges: dict[str, Range] = {name: make_range(name) for name in sorted(self.ops)}
        self._by_func: dict[Any, Range | None] = {}
        self._depth = threading.local()

    def _resolve(self, func: Any) -> Range | None:
        name = normalize_op_name(func)
        rng = self._ranges.get(name) if name is not None else None
        with contextlib.suppress(TypeError):  # an unhashable callable: resolved every call
            self._by_func[func] = rng
        return rng

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        if _is_compiling():  # a compiled region inside an instrumented forward: stand aside
            return func(*args, **kwargs)
        try:
            rng = self._by_func.get(func, _UNRESOLVED)
        except TypeError:
            rng = _UNRESOLVED
        if rng is _UNRESOLVED:
            rng = self._resolve(func)
        if rng is None:
            return func(*args, **kwargs)
        stack = self._stack
        inner = stack.innermost()
        if inner is None or not inner.names_ops:
            return func(*args, **kwargs)
        stack.push(rng)  # type: ignore[arg-type]
        try:
            return func(*args, **kwargs)
        finally:
            stack.pop(rng)  # type: ignore[arg-type]

    # -- activation around the outermost instrumented forward, per thread --------------------

    def enter_forward(self) -> None:
        """Note that an instrumented forward starts; the outermost one pushes the mode."""
        depth = getattr(self._depth, "value", 0)
        if depth == 0:
            self.__enter__()
        self._depth.value = depth + 1

    def exit_forward(self) -> None:
        """Note that an instrumented forward ends; the outermost one pops the mode."""
        depth = getattr(self._depth, "value", 0) - 1
        if depth > 0:
            self._depth.value = depth
            return
        self._depth.value = 0
        if depth < 0:
            logger.warning("torch_nsight: op naming was asked to stop more often than to "
                           "start on this thread; ignored")
            return
        if _get_current_function_mode() is self:
            _pop_mode()
        else:
            logger.warning(
                "torch_nsight: the op-naming torch function mode is not the innermost mode at "
                "the end of the forward (another mode was entered and not exited inside it); "
                "leaving the mode stack untouched"
            )


def check_ops(ops: object) -> frozenset[str] | None:
    """Validate the ``ops`` argument of :func:`torch_nsight.instrument`.

    Args:
        ops: False (no op ranges), True (:data:`DEFAULT_OPS`), one op name, or an iterable
            of op names.

    Returns:
        The op names to give ranges to, or None for no op ranges.

    Raises:
        TypeError: If ``ops`` is of another type or holds something other than strings.
        ValueError: If an op name is empty.
    """
    if ops is False or ops is None:
        return None
    if ops is True:
        return DEFAULT_OPS
    if isinstance(ops, str):
        ops = (ops,)
    if not isinstance(ops, Iterable):
        raise TypeError(f"ops must be a bool or an iterable of op names, got {type(ops).__name__}")
    names = []
    for name in ops:
        if not isinstance(name, str):
            raise TypeError(f"ops must hold op names (str), got {type(name).__name__}: {name!r}")
        if not name:
            raise ValueError("ops holds an empty op name")
        names.append(name)
    return frozenset(names) or None


def is_torch_leaf(module: torch.nn.Module) -> bool:
    """Whether ``module`` is one of PyTorch's own modules without children (``nn.SiLU``).

    Such a module's range already names the one op it runs, so op ranges inside it would
    only double up.
    """
    return type(module).__module__.startswith("torch.nn.") and not any(
        True for _ in module.children()
    )


def qualified_class(module: torch.nn.Module) -> str:
    """The module's class as ``package.module.Class`` (``torch.nn.modules.conv.Conv2d``):
    the calls table records it for each call, so the analysis knows a Conv2d from a
    user's class that happens to run a convolution."""
    kind = type(module)
    return f"{kind.__module__}.{kind.__qualname__}"
