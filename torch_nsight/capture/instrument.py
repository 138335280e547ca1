"""``instrument(model)``: an NVTX range around every submodule's forward and backward."""

from __future__ import annotations

import fnmatch
import logging
import threading
import warnings
import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import BackwardHook, RemovableHandle

from torch_nsight.capture.detect import resolve_enabled
from torch_nsight.capture.emitter import NvtxEmitter, RangeEmitter
from torch_nsight.capture.ops import OpNamer, check_ops, is_torch_leaf
from torch_nsight.capture.stack import STACK, Range, RangeStack
from torch_nsight.naming import backward_message, op_message

logger = logging.getLogger(__name__)

__all__ = ["Instrumentation", "instrument", "active_instrumentations"]

# torch.compiler.is_compiling is new in PyTorch 2.3; torch._dynamo's has been there longer.
_is_compiling = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling

Selector = str | type
"""A module selector: an fnmatch glob on qualified names, or a module type."""

# Every module that an active Instrumentation put hooks on, mapped to that Instrumentation.
# Weak keys: the entry goes with the module; the value (the handle) lives as long as it.
_INSTRUMENTED: weakref.WeakKeyDictionary[nn.Module, Instrumentation] = (
    weakref.WeakKeyDictionary()
)
_ACTIVE: weakref.WeakSet[Instrumentation] = weakref.WeakSet()

# PyTorch warns, at every backward, that a full backward hook fires early on a module none
# of whose inputs needs a gradient (the root module, an embedding). Our hooks expect that
# and handle it (the range is deferred), and users did not register them, so the warning is
# silenced while an instrumentation with backward ranges is active.
_TORCH_HOOK_WARNINGS = (
    r"Full backward hook is firing when gradients are computed with respect to module outputs",
)
_warning_users = 0


def _is_ours(entry: tuple[Any, ...], message: str) -> bool:
    return (entry[0] == "ignore" and entry[2] is UserWarning
            and getattr(entry[1], "pattern", None) == message)


def _silence_hook_warnings(on: bool) -> None:
    """Count one more (``on``) or one fewer user of the warning filters, adding or removing them."""
    global _warning_users
    _warning_users += 1 if on else -1
    for message in _TORCH_HOOK_WARNINGS:
        ours = [entry for entry in warnings.filters if _is_ours(entry, message)]
        if on and not ours:
            warnings.filterwarnings("ignore", message, UserWarning)
        elif not on and _warning_users == 0 and ours:
            for entry in ours:
                warnings.filters.remove(entry)
            mutated = getattr(warnings, "_filters_mutated", None)
            if mutated is not None:  # invalidate the per-module "already warned" caches
                mutated()


def active_instrumentations() -> list[Instrumentation]:
    """Return the instrumentations whose hooks are installed now (for tests and debugging).

    Returns:
        The active :class:`Instrumentation` handles, in no particular order.
    """
    return [handle for handle in list(_ACTIVE) if handle.active]


class Instrumentation:
    """Handle on the hooks :func:`instrument` installed; also a context manager.

    ``with instrument(model): ...`` removes the hooks on leaving the block; otherwise call
    :meth:`remove`. A handle for which nothing was installed (profiler not attached, model
    already instrumented) has ``active`` False and ``reason`` saying why.

    Attributes:
        active: Whether hooks are installed now.
        reason: Why hooks were, or were not, installed.
        names: Qualified names of the instrumented modules (``""`` is the root), in
            ``named_modules()`` order.
        messages: Forward range message of each instrumented module, by qualified name.
        ops: The op names that get ranges, or None without op ranges.
        backward: Whether backward ranges are installed.
    """

    def __init__(self, model: nn.Module | None, reason: str) -> None:
        self.active = False
        self.reason = reason
        self.names: tuple[str, ...] = ()
        self.messages: dict[str, str] = {}
        self.ops: frozenset[str] | None = None
        self.backward = False
        self._model = weakref.ref(model) if model is not None else None
        self._handles: list[RemovableHandle] = []
        self._modules: list[weakref.ref[nn.Module]] = []
        self._stack: RangeStack = STACK
        self._silenced = False

    def remove(self) -> None:
        """Remove every hook this handle installed and restore the modules as they were.

        Safe to call more than once. Ranges of this handle still open on the calling thread
        are closed; ranges open on other threads are left to them.
        """
        if not self.active:
            return
        self.active = False
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for ref in self._modules:
            module = ref()
            if module is not None and _INSTRUMENTED.get(module) is self:
                del _INSTRUMENTED[module]
        self._modules.clear()
        _ACTIVE.discard(self)
        closed = self._stack.close_owned(self)
        if closed:
            logger.warning("torch_nsight: remove() closed %d range(s) still open on this "
                           "thread (remove() was called inside a forward or backward?)", closed)
        if self._silenced:
            self._silenced = False
            _silence_hook_warnings(False)
        logger.debug("torch_nsight: removed instrumentation of %d modules", len(self.names))

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        model = self._model() if self._model is not None else None
        target = type(model).__name__ if model is not None else "no model"
        state = f"{len(self.names)} modules" if self.active else f"inactive: {self.reason}"
        return f"<Instrumentation of {target}, {state}>"


def _check_selectors(value: object, argument: str) -> tuple[Selector, ...] | None:
    if value is None:
        return None
    items = (value,) if isinstance(value, (str, type)) else value
    if not isinstance(items, Iterable):
        raise TypeError(f"{argument} must be a name pattern, a module type or an iterable of "
                        f"them, got {type(value).__name__}")
    selectors = tuple(items)
    for item in selectors:
        if not isinstance(item, (str, type)):
            raise TypeError(f"{argument} must hold name patterns (str) or module types, "
                            f"got {type(item).__name__}: {item!r}")
    return selectors


def _matches(name: str, module: nn.Module, selectors: tuple[Selector, ...]) -> bool:
    for item in selectors:
        if isinstance(item, str):
            if fnmatch.fnmatchcase(name, item):
                return True
        elif isinstance(module, item):
            return True
    return False


def _select(
    model: nn.Module,
    depth: int | None,
    include: tuple[Selector, ...] | None,
    exclude: tuple[Selector, ...] | None,
) -> list[tuple[str, nn.Module]]:
    chosen = []
    for name, module in model.named_modules():  # shared modules: the first name only
        level = name.count(".") + 1 if name else 0
        if depth is not None and level > depth:
            continue
        if include is not None and not _matches(name, module, include):
            continue
        if exclude is not None and _matches(name, module, exclude):
            continue
        chosen.append((name, module))
    return chosen


def instrument(
    model: nn.Module,
    *,
    depth: int | None = None,
    include: Selector | Iterable[Selector] | None = None,
    exclude: Selector | Iterable[Selector] | None = None,
    ops: bool | str | Iterable[str] = False,
    backward: bool = True,
    enabled: bool | None = None,
    emitter: RangeEmitter | None = None,
) -> Instrumentation:
    """Put an NVTX push/pop range around the forward and backward of every submodule.

    Ranges are in the NVTX domain :data:`torch_nsight.naming.DOMAIN`. A module's forward
    range is named by its qualified name as in ``model.named_modules()``
    (``layers.0.mlp.down_proj``; the root module by its class name); its backward range by
    :func:`torch_nsight.naming.backward_message` of that name (``bwd:layers.0.mlp``), on
    the thread that runs backward. With ``ops``, functional ops called inside a forward get
    ranges named by :func:`torch_nsight.naming.op_message` (``op:silu``).

    By default nothing is installed unless a profiler is attached (see
    :func:`torch_nsight.capture.resolve_enabled`), so the call can stay in training code.

    Args:
        model: The module to instrument.
        depth: Deepest module level to instrument (root 0, its children 1, ...); None for
            all levels.
        include: Instrument only modules matching one of these fnmatch globs on the
            qualified name (the root's is ``""``) or module types.
        exclude: Do not instrument modules matching one of these globs or types. Applies to
            each module on its own: exclude ``"layers.*"`` to skip a whole subtree.
        ops: True to name the ops of :data:`torch_nsight.capture.DEFAULT_OPS`, or the op
            names to use (``{"silu", "mul"}``); False for none.
        backward: Whether to add backward ranges.
        enabled: True or False to install or not regardless of the environment; None to
            install only when ``TORCH_NSIGHT_INSTRUMENT=1`` is set or a profiler is
            detected (``TORCH_NSIGHT_INSTRUMENT=0`` forces off).
        emitter: Receiver of the push/pop events (default: an :class:`NvtxEmitter`); tests
            pass a :class:`~torch_nsight.capture.RecordingEmitter`.

    Returns:
        The :class:`Instrumentation` handle. Instrumenting a model that is already
        instrumented installs nothing and returns an inactive handle, with a warning.

    Raises:
        TypeError: If ``model`` is not an ``nn.Module`` or an option has the wrong type.
        ValueError: If ``depth`` is negative or an op name is empty.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)):
        raise TypeError(f"depth must be an int or None, got {type(depth).__name__}")
    if depth is not None and depth < 0:
        raise ValueError(f"depth must be >= 0 (the root is depth 0), got {depth}")
    include_ = _check_selectors(include, "include")
    exclude_ = _check_selectors(exclude, "exclude")
    op_names = check_ops(ops)
    if not isinstance(backward, bool):
        raise TypeError(f"backward must be a bool, got {type(backward).__name__}")
    if emitter is not None and not isinstance(emitter, RangeEmitter):
        raise TypeError("emitter must have push(message) and pop() methods, got "
                        f"{type(emitter).__name__}")

    on, reason = resolve_enabled(enabled)
    if not on:
        logger.info("torch_nsight: not instrumenting %s: %s", type(model).__name__, reason)
        return Instrumentation(model, reason)

    owner = _INSTRUMENTED.get(model)
    if owner is not None:
        reason = f"{type(model).__name__} is already instrumented by {owner!r}"
        warnings.warn(f"torch_nsight: {reason}; not instrumenting it again (remove() the "
                      "first instrumentation to change its options)", stacklevel=2)
        return Instrumentation(model, reason)

    selected = _select(model, depth, include_, exclude_)
    taken = [name for name, module in selected if module in _INSTRUMENTED]
    if taken:
        warnings.warn(f"torch_nsight: {len(taken)} submodule(s) are already instrumented by "
                      f"another instrumentation and keep its ranges: {taken[:5]}",
                      stacklevel=2)
        selected = [(name, module) for name, module in selected if module not in _INSTRUMENTED]

    handle = Instrumentation(model, reason)
    sink: RangeEmitter = emitter if emitter is not None else NvtxEmitter()
    prepare = getattr(sink, "prepare", None)

    def make_range(message: str, name: str, *, is_module: bool = True,
                   names_ops: bool = True) -> Range:
        if prepare is not None:
            prepare(message)
        return Range(message, name, sink, handle, is_module=is_module, names_ops=names_ops)

    namer = None
    if op_names is not None:
        namer = OpNamer(op_names,
                        lambda op: make_range(op_message(op), op, is_module=False), STACK)
    try:
        for name, module in selected:
            message = name if name else type(module).__name__
            forward = make_range(message, name, names_ops=not is_torch_leaf(module))
            backward_range = make_range(backward_message(message), name) if backward else None
            _install_hooks(handle, module, forward, backward_range, namer)
            handle._modules.append(weakref.ref(module))
            _INSTRUMENTED[module] = handle
    except BaseException:
        handle.active = True
        handle.remove()
        raise

    handle.active = True
    handle.names = tuple(name for name, _ in selected)
    handle.messages = {name: name if name else type(module).__name__
                       for name, module in selected}
    handle.ops = op_names
    handle.backward = backward
    if backward:
        handle._silenced = True
        _silence_hook_warnings(True)
    _ACTIVE.add(handle)
    logger.info("torch_nsight: instrumented %d modules of %s (%s)", len(selected),
                type(model).__name__, reason)
    return handle


def _install_hooks(
    handle: Instrumentation,
    module: nn.Module,
    forward: Range,
    backward: Range | None,
    namer: OpNamer | None,
) -> None:
    """Register the forward pre/post hooks of one module.

    Backward ranges use PyTorch's own full-backward-hook machinery
    (:class:`torch.utils.hooks.BackwardHook`, what ``register_full_backward_hook`` uses),
    set up from these forward hooks instead of registered on the module: Dynamo then sees
    only forward hooks, which stand aside while compiling, rather than module backward
    hooks, which make it break the graph at every module; and no backward work is done
    when gradients are disabled.
    """
    backward_hooks = _backward_hooks(backward) if backward is not None else None
    pending = threading.local()  # the BackwardHook of each call in progress, per thread
    pre = _ForwardPre(forward, namer, backward_hooks, pending)
    post = _ForwardPost(forward, namer, backward_hooks, pending)
    handle._handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
    handle._handles.append(
        module.register_forward_hook(post, with_kwargs=True, always_call=True)
    )


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


def _inert_hook() -> Any:
    return _ignore


class _Hook:
    """Base of the module hooks. A pickled or deep-copied model (``torch.save(model)``,
    ``copy.deepcopy``) gets inert hooks in their place: the copy is not instrumented."""

    __slots__ = ("forward", "enter", "leave", "backward_hooks", "pending", "push", "pop")

    def __init__(self, forward: Range, namer: OpNamer | None,
                 backward_hooks: tuple[Any, Any] | None, pending: threading.local) -> None:
        self.forward = forward
        self.enter = namer.enter_forward if namer is not None else None
        self.leave = namer.exit_forward if namer is not None else None
        self.backward_hooks = backward_hooks
        self.pending = pending
        self.push, self.pop = STACK.push, STACK.pop

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_inert_hook, ())


class _ForwardPre(_Hook):
    __slots__ = ()

    def __call__(self, module: nn.Module, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        if _is_compiling():
            return None
        self.push(self.forward)
        if self.enter is not None:
            self.enter()
        if self.backward_hooks is None:
            return None
        calls = self.pending.__dict__.setdefault("calls", [])
        if not torch.is_grad_enabled():
            calls.append(None)
            return None
        backward_pre, backward_post = self.backward_hooks
        hook = BackwardHook(module, [backward_post], [backward_pre])
        calls.append(hook)
        return hook.setup_input_hook(args), kwargs


class _ForwardPost(_Hook):
    __slots__ = ()

    def __call__(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> Any:
        if _is_compiling():
            return None
        hook = None
        if self.backward_hooks is not None:
            calls = self.pending.__dict__.get("calls")
            if calls:
                hook = calls.pop()
        if self.leave is not None:
            self.leave()
        self.pop(self.forward)
        return hook.setup_output_hook(output) if hook is not None else None


def _backward_hooks(rng: Range) -> tuple[Any, Any]:
    """The full backward pre-hook and hook that open and close the backward range ``rng``."""
    push, pop = STACK.push_backward, STACK.pop_backward
    task_id = torch._C._current_graph_task_id

    def backward_pre(module: nn.Module, grad_output: Any) -> None:
        push(rng, task_id())

    def backward_post(module: nn.Module, grad_input: Any, grad_output: Any) -> None:
        # All None: no input needed a gradient, and PyTorch calls this hook before the
        # module's own backward (its weight gradients) has run: keep the range open.
        pop(rng, deferred=all(g is None for g in grad_input))

    return backward_pre, backward_post
