"""The per-module wrapper behind :func:`torch_nsight.instrument`, and its autograd hooks.

Each instrumented module gets an instance attribute ``forward`` holding the bound
``__call__`` of an :class:`InstrumentedForward`, a
:class:`~torch_nsight.capture.ranges.ranged_forward.RangedForward` that opens the module's range
around the module's own forward (closed in ``finally``, so ranges balance when forward
raises). No PyTorch module hook is registered, so ``nn.Module.__call__`` stays on its fast
path; the wrapper sees positional and keyword inputs alike. While Dynamo traces, it falls
straight through to the original forward; Dynamo never compiles it
(:mod:`torch_nsight.capture.ranges.compiling`).

Backward ranges use autograd node pre-hooks set on the graph the forward built, only when
gradients are enabled and an output needs one (the decode path pays nothing for them):

* on the autograd node of each output: *open* the module's backward range when the first
  output gradient arrives (before the module's last op runs backward);
* on the node that produced each input: *close* it when that node is about to run, which
  the engine does once everything that needs its outputs, the module's own ops included,
  has run.

A node gets one pre-hook however many calls use it (:class:`NodeHook`); running it is
:meth:`~torch_nsight.capture.ranges.stack.RangeStack.run_node` of the frames it closes and opens:
the stack owns every rule, this module only finds the nodes. No tensor is wrapped or
replaced (PyTorch's ``BackwardHook`` returns views of the inputs and outputs, which breaks
in-place ops such as ``nn.ReLU(inplace=True)`` or ``out += x``). The hooks run on the thread
that runs the backward node; the per-thread stack keeps the ranges nested.

Every hook stays reachable while its node lives (:data:`NODE_HOOKS`, weakly), so that
:meth:`Instrumentation.remove` detaches the hooks of graphs built before it.
"""

from __future__ import annotations

import copy
import functools
import logging
import types
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from torch_nsight.capture.ranges.compiling import skip_frames
from torch_nsight.capture.ranges.frames import BackwardFrame, Range
from torch_nsight.capture.ranges.ops import OpNamer
from torch_nsight.capture.ranges.ranged_forward import RangedForward
from torch_nsight.capture.ranges.stack import STACK

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

logger = logging.getLogger(__name__)

__all__ = ["InstrumentedForward", "install_forward", "call_with_backward_ranges", "NodeHook",
           "NodeHookRegistry", "NODE_HOOKS", "HOOKS_KEY"]

_Tensor = torch.Tensor
_call_with_backward = STACK.call_with_backward
_run_node = STACK.run_node
_MISSING = object()
#: The key under which an autograd node's ``metadata`` holds this package's hook.
HOOKS_KEY = "torch_nsight"


def install_forward(
    module: nn.Module, forward: Range, backward: Range | None, namer: OpNamer | None
) -> InstrumentedForward:
    """Put an :class:`InstrumentedForward` in place of ``module.forward``.

    Args:
        module: The module to instrument.
        forward: Its forward range.
        backward: Its backward range, or None for no backward range.
        namer: The op-naming mode to activate while it runs, or None.

    Returns:
        The wrapper (``module.forward`` is its bound
        :meth:`~torch_nsight.capture.ranges.ranged_forward.RangedForward.as_forward`); its
        :meth:`~InstrumentedForward.remove` restores ``module.forward``.
    """
    wrapper = InstrumentedForward(module, forward, backward, namer)
    module.__dict__["forward"] = wrapper.as_forward()
    return wrapper


def call_with_backward_ranges(forward: Range, backward: Range, function: Callable[..., Any],
                              args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call ``function(*args, **kwargs)`` inside ``forward``, and hook ``backward`` onto the
    autograd nodes it made, as a module call's: a function called outside the model (the
    loss: :mod:`torch_nsight.capture.ranges.outside`).

    Returns:
        What ``function`` returned.
    """
    sources = _sources(args, kwargs)
    frame, output = _call_with_backward(forward, backward, _call_function, function, args,
                                        kwargs)
    _watch(frame, output, sources)
    return output


def _call_function(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return function(*args, **kwargs)


def _plain_forward(module: nn.Module, previous: Any) -> Any:
    """What a pickled wrapper becomes: an object whose ``__call__`` attribute is the plain
    forward (the instance's ``forward``, a bound method, is unpickled as
    ``getattr(wrapper, "__call__")``), so the copy is not instrumented."""
    forward = previous if previous is not None else types.MethodType(type(module).forward,
                                                                     module)
    return types.SimpleNamespace(__call__=forward)


class InstrumentedForward(RangedForward):
    """Stands in for one module's ``forward``: ranges around the original one.

    The forward range is :class:`~torch_nsight.capture.ranges.ranged_forward.RangedForward`'s; this class
    adds the backward range (:meth:`call_with_backward`). Holds the module weakly. A
    pickled model (``torch.save(model)``) gets the plain bound ``forward`` in its place, a
    deep copy (``copy.deepcopy``) a wrapper of its own that stands aside: the copy is not
    instrumented.
    """

    __slots__ = ("previous",)

    def __init__(self, module: nn.Module, forward: Range, backward: Range | None,
                 namer: OpNamer | None) -> None:
        previous = module.__dict__.get("forward", _MISSING)
        self.previous = previous
        if previous is _MISSING:
            self.function = type(module).forward  # called as function(module, ...)
        else:  # another tool replaced forward already: call it, and restore it on remove()
            self.function = _call_previous(previous)
        # what runs inside the range: the forward, inside the op-naming mode if any
        self.body = self.function if namer is None else _with_op_names(self.function, namer)
        self.tracked = namer is not None
        self.module = weakref.ref(module)
        self.forward_range = forward
        self.backward_range = backward

    def call_with_backward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                           body: Callable[..., Any]) -> Any:
        """Call ``body`` with gradients enabled: the forward range, and hooks for the
        backward one."""
        backward: Range = self.backward_range  # type: ignore[assignment]  # __call__ checked
        # Nodes that produced the inputs, taken before forward runs: an in-place op on an
        # input inside forward gives the tensor a new node.
        if kwargs or len(args) != 1:
            sources = _sources(args, kwargs)
            frame, output = _call_with_backward(self.forward_range, backward,
                                                body, module, args, kwargs)
            _watch(frame, output, sources)
            return output
        arg = args[0]  # the common single-input call
        source = arg.grad_fn if isinstance(arg, _Tensor) else None
        frame, output = _call_with_backward(self.forward_range, backward, body,
                                            module, args, kwargs)
        if not isinstance(output, _Tensor):
            _watch(frame, output, [(source, arg)] if source is not None else [])
            return output
        node = output.grad_fn
        if node is None or node is source:  # no graph, or the input returned as is
            return output
        _open_on(node, output, frame)
        if source is None:
            frame.deferred = True
        else:
            _close_on(source, arg, frame)
        return output

    def remove(self, module: nn.Module) -> None:
        """Put back the ``forward`` this wrapper replaced, or make it a pass-through."""
        self.stand_aside()  # calls through from now on, wherever it is left
        current = module.__dict__.get("forward")
        if getattr(current, "__self__", None) is not self:
            logger.warning(
                "torch_nsight: %s.forward was replaced after instrument(); left in place "
                "(this wrapper now only calls through)", type(module).__name__)
            return
        if self.previous is _MISSING:
            del module.__dict__["forward"]
        else:
            module.__dict__["forward"] = self.previous

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        previous = None if self.previous is _MISSING else self.previous
        return (_plain_forward, (self.module(), previous))

    def __deepcopy__(self, memo: dict[int, Any]) -> InstrumentedForward:
        """The wrapper of the copy of the module (``copy.deepcopy`` of the module's bound
        ``forward`` binds ``__call__`` to it), standing aside: the copy is not
        instrumented."""
        copied = object.__new__(type(self))
        module = copy.deepcopy(self.module(), memo)
        if self.previous is _MISSING:
            copied.previous, copied.function = _MISSING, type(module).forward
        else:
            copied.previous = copy.deepcopy(self.previous, memo)
            copied.function = _call_previous(copied.previous)
        copied.module = weakref.ref(module)
        copied.stand_aside()
        return copied

    def __repr__(self) -> str:
        return f"<torch_nsight forward of {self.forward_range.message!r}>"


def _call_previous(previous: Any) -> Callable[..., Any]:
    def call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return previous(*args, **kwargs)

    return call


# Dynamo compiles the forward this frame calls, never the frame itself (see
# torch_nsight.capture.ranges.compiling)
skip_frames(_call_previous(None))


def _with_op_names(function: Callable[..., Any], namer: OpNamer) -> Callable[..., Any]:
    enter, leave = namer.enter_forward, namer.exit_forward

    def call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        enter()
        try:
            return function(module, *args, **kwargs)
        finally:
            leave()

    return call


# -- autograd node hooks --------------------------------------------------------------------


class NodeHook(dict):
    """The one pre-hook torch_nsight sets on an autograd node, shared by every call that
    uses the node; running it is :meth:`RangeStack.run_node` of its two lists.

    The object is also the hooks dict PyTorch calls, with that one entry (see
    :func:`_set_hook`): it is true while attached, and detaching it empties it.

    Attributes:
        closes: Frames of the calls whose input the node produced.
        opens: Frames of the calls whose output it produced, innermost first.
        handle: The ``RemovableHandle`` when the hook had to be set with
            ``Node.register_prehook``, else None.
    """

    __slots__ = ("closes", "opens", "handle", "__weakref__")
    closes: list[BackwardFrame]
    opens: list[BackwardFrame]
    handle: RemovableHandle | None
    # kept in a set of weak references, by identity (typeshed types dict's __hash__ as None)
    __hash__ = object.__hash__  # type: ignore[assignment]

    def detach(self) -> None:
        """Remove the hook from its node (PyTorch then calls an empty hooks dict)."""
        self.clear()
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        self.closes.clear()
        self.opens.clear()


class NodeHookRegistry:
    """The :class:`NodeHook` objects alive now, so that :meth:`detach` can reach them.

    Held weakly: a hook lives as long as its node (graphs die every step), and its entry
    goes with it, so a long run keeps nothing. Adding a hook and forgetting a dead one run
    no Python code (a weak reference whose callback is the set's own ``discard``).
    """

    def __init__(self) -> None:
        self.refs: set[weakref.ref[NodeHook]] = set()
        """Weak references to the hooks, each with ``refs.discard`` as its callback."""

    def add(self, hook: NodeHook) -> None:
        """Keep ``hook`` (the per-node path does the same inline)."""
        self.refs.add(weakref.ref(hook, self.refs.discard))

    def live(self) -> list[NodeHook]:
        """The hooks whose node still exists (attached or not)."""
        return [hook for ref in list(self.refs) if (hook := ref()) is not None]

    def detach(self, owner: object) -> int:
        """Take the frames of ``owner`` off every hook; detach the hooks left with none.

        Returns:
            How many hooks were detached.
        """
        detached = 0
        for hook in self.live():
            for frames in (hook.closes, hook.opens):
                frames[:] = [frame for frame in frames if frame.range.owner is not owner]
            if hook and not hook.closes and not hook.opens:
                hook.detach()
                detached += 1
        return detached


NODE_HOOKS = NodeHookRegistry()
"""Every node hook of the process whose node is still alive."""
_remember, _forget, _weak = NODE_HOOKS.refs.add, NODE_HOOKS.refs.discard, weakref.ref


def _open_on(node: Any, output: Any, frame: BackwardFrame) -> None:
    """Have ``node``, which produced ``output`` just now, open ``frame`` when it runs."""
    metadata = node.metadata
    hook = metadata.get(HOOKS_KEY)
    if hook:  # set, and not detached
        hook.opens.append(frame)
    else:
        metadata[HOOKS_KEY] = _set_hook(node, output, [], [frame])


def _close_on(node: Any, tensor: Any, frame: BackwardFrame) -> None:
    """Have ``node``, taken from the input ``tensor`` before forward ran, close ``frame``."""
    metadata = node.metadata
    hook = metadata.get(HOOKS_KEY)
    if hook:
        hook.closes.append(frame)
    else:  # the input may have been changed in place inside forward: a new node then
        metadata[HOOKS_KEY] = _set_hook(node, tensor if tensor.grad_fn is node else None,
                                         [frame], [])


def _set_hook(node: Any, tensor: Any, closes: list[BackwardFrame],
              opens: list[BackwardFrame]) -> NodeHook:
    """Set a new :class:`NodeHook` with these lists on ``node``.

    Through ``tensor`` (whose ``grad_fn`` is ``node``) when it is a plain tensor without
    hooks of its own: PyTorch's own ``Tensor.register_hook`` path (the tensor's
    ``_backward_hooks`` dict, handed to ``grad_fn._register_hook_dict``) with our dict,
    after which the tensor's attribute is reset, so the user's hooks on it are left as
    they were. That runs no Python code; ``Node.register_prehook``, the fallback, runs
    some and makes a handle for every node (three times the cost).
    """
    hook = NodeHook()
    hook.closes, hook.opens, hook.handle = closes, opens, None
    hook[0] = run = functools.partial(_run_node, closes, opens)
    through_tensor = type(tensor) is _Tensor and tensor._backward_hooks is None
    if through_tensor:
        try:
            tensor._backward_hooks = hook
            try:
                node._register_hook_dict(tensor)
            finally:
                tensor._backward_hooks = None
        except (AttributeError, TypeError, RuntimeError) as err:  # a PyTorch without it
            logger.debug("torch_nsight: setting an autograd hook through the tensor failed "
                         "(%s); using Node.register_prehook", err)
            through_tensor = False
    if not through_tensor:
        hook.handle = node.register_prehook(run)
    _remember(_weak(hook, _forget))  # NODE_HOOKS.add(hook), without a Python call
    return hook


def _sources(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """``(node, tensor)`` of each tensor input with an autograd node, keywords included."""
    sources = [(node, t) for t in args
               if isinstance(t, _Tensor) and (node := t.grad_fn) is not None]
    if kwargs:
        sources += [(node, t) for t in kwargs.values()
                    if isinstance(t, _Tensor) and (node := t.grad_fn) is not None]
    return sources


def _watch_sources(frame: BackwardFrame, sources: Any) -> None:
    """Have the nodes that produced the call's inputs close ``frame`` (deferred if none)."""
    if not sources:
        frame.deferred = True
        return
    seen = []
    for node, tensor in sources:
        if node not in seen:
            seen.append(node)
            _close_on(node, tensor, frame)


def _watch(frame: BackwardFrame, output: Any, sources: Any) -> None:
    """Hook the backward range of ``frame`` onto the autograd nodes around ``output``.

    Outputs in tuples, lists, dicts or registered pytree types (Hugging Face
    ``ModelOutput``) count. An output produced by one of the input nodes (the module
    returned an input as is) has no backward of its own in this module and is skipped.
    """
    leaves = output if type(output) is tuple else tree_flatten(output)[0]
    inputs = [node for node, _ in sources]
    nodes: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, _Tensor):
            node = leaf.grad_fn
            if node is not None and node not in inputs and node not in nodes:
                nodes.append(node)
                _open_on(node, leaf, frame)
    if nodes:
        _watch_sources(frame, sources)
