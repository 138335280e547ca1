"""The per-module wrapper behind :func:`torch_nsight.instrument`.

Each instrumented module gets an instance attribute ``forward`` holding an
:class:`InstrumentedForward`, which pushes the module's range, calls the module's own
forward and pops the range in ``finally`` (so ranges balance when forward raises). No
PyTorch module hook is registered, so ``nn.Module.__call__`` stays on its fast path; the
wrapper sees positional and keyword inputs alike. While Dynamo compiles, it falls straight
through to the original forward.

Backward ranges use autograd node pre-hooks set on the graph the forward built, only when
gradients are enabled and an output needs one (the decode path pays nothing for them):

* on the autograd node of each output: *push* the module's backward range when the first
  output gradient arrives (before the module's last op runs backward);
* on the node that produced each input: *pop* it when that node is about to run, which the
  engine does once everything that needs its outputs, the module's own ops included, has
  run.

No tensor is wrapped or replaced (PyTorch's ``BackwardHook`` returns views of the inputs and
outputs, which breaks in-place ops such as ``nn.ReLU(inplace=True)`` or ``out += x``). The
hooks run on the thread that runs the backward node; the per-thread
:class:`~torch_nsight.capture.stack.RangeStack` keeps the ranges nested.
"""

from __future__ import annotations

import logging
import types
import weakref
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from torch_nsight.capture.ops import OpNamer, _is_compiling
from torch_nsight.capture.stack import STACK, BackwardFrame, Range

logger = logging.getLogger(__name__)

__all__ = ["InstrumentedForward", "install_forward"]

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_LOCAL = STACK._local
_stack_push = STACK.push
_stack_pop = STACK.pop
_settle_forward = STACK._settle_forward
_pop_backward = STACK.pop_backward
_push_backward = STACK.push_backward
_current_graph_task_id = torch._C._current_graph_task_id
_MISSING = object()


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
        The wrapper; its :meth:`~InstrumentedForward.remove` restores ``module.forward``.
    """
    wrapper = InstrumentedForward(module, forward, backward, namer)
    module.__dict__["forward"] = wrapper
    return wrapper


def _plain_forward(module: nn.Module, previous: Any) -> Any:
    """What a pickled or deep-copied wrapper becomes: the copy is not instrumented."""
    if previous is not None:
        return previous
    return types.MethodType(type(module).forward, module)


class InstrumentedForward:
    """Stands in for one module's ``forward``: ranges around the original one.

    Holds the module weakly (no reference cycle through the module's ``__dict__``). A
    pickled or deep-copied model (``torch.save(model)``, ``copy.deepcopy``) gets the plain
    bound ``forward`` in its place: the copy is not instrumented.
    """

    __slots__ = ("_module", "_function", "_previous", "_forward", "_backward", "_enter",
                 "_leave", "_push", "_pop")

    def __init__(self, module: nn.Module, forward: Range, backward: Range | None,
                 namer: OpNamer | None) -> None:
        previous = module.__dict__.get("forward", _MISSING)
        self._previous = previous
        if previous is _MISSING:
            self._function = type(module).forward  # called as function(module, ...)
        else:  # another tool replaced forward already: call it, and restore it on remove()
            self._function = _call_previous(previous)
        self._module = weakref.ref(module)
        self._forward = forward
        self._backward = backward
        self._enter = namer.enter_forward if namer is not None else None
        self._leave = namer.exit_forward if namer is not None else None
        self._push, self._pop = _stack_push, _stack_pop

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self._module()
        if _is_compiling():
            return self._function(module, *args, **kwargs)
        if self._backward is not None and _grad_enabled():
            return self._call_with_backward(module, args, kwargs)
        rng = self._forward
        if self._enter is None:
            if not _LOCAL.frames:
                # No backward in flight on this thread: try/finally keeps the range balanced
                # by itself, so skip the stack bookkeeping (the decode-step hot path).
                rng.open()
                try:
                    return self._function(module, *args, **kwargs)
                finally:
                    rng.close()
            self._push(rng)
            try:
                return self._function(module, *args, **kwargs)
            finally:
                self._pop(rng)
        self._push(rng)
        self._enter()
        try:
            return self._function(module, *args, **kwargs)
        finally:
            self._leave()  # type: ignore[misc]
            self._pop(rng)

    def _call_with_backward(self, module: nn.Module, args: tuple[Any, ...],
                            kwargs: dict[str, Any]) -> Any:
        # Nodes that produced the inputs, taken before forward runs: an in-place op on an
        # input inside forward gives the tensor a new node.
        if kwargs or len(args) != 1:
            sources: Any = [node for t in args
                            if isinstance(t, _Tensor) and (node := t.grad_fn) is not None]
            if kwargs:
                sources += [node for t in kwargs.values()
                            if isinstance(t, _Tensor) and (node := t.grad_fn) is not None]
        else:  # the common single-input call: no list comprehension
            arg = args[0]
            sources = ((node,) if isinstance(arg, _Tensor) and (node := arg.grad_fn) is not None
                       else ())
        state = _LOCAL
        frame = BackwardFrame(self._backward, state.call)  # type: ignore[arg-type]
        state.call = frame
        rng = self._forward
        push = self._push
        if push is _stack_push:  # STACK.push, inlined
            if state.frames:
                _settle_forward(state, rng)
            rng.open()
            state.stack.append(rng)
        else:
            push(rng)
        enter = self._enter
        if enter is not None:
            enter()
        try:
            output = self._function(module, *args, **kwargs)
        finally:
            state.call = frame.parent
            if self._leave is not None:
                self._leave()
            pop = self._pop
            stack = state.stack
            if pop is _stack_pop and stack and stack[-1] is rng:  # STACK.pop, inlined
                stack.pop()
                rng.close()
            else:
                pop(rng)
        if isinstance(output, _Tensor):  # _watch, inlined for a plain tensor output
            node = output.grad_fn
            if node is None or node in sources:
                return output
            _node_hooks(node).opens.append(frame)
            if not sources:
                frame.deferred = True
            elif len(sources) == 1:
                _node_hooks(sources[0]).closes.append(frame)
            else:
                for node in dict.fromkeys(sources):
                    _node_hooks(node).closes.append(frame)
            return output
        _watch(frame, output, sources)
        return output

    def remove(self, module: nn.Module) -> None:
        """Put back the ``forward`` this wrapper replaced, or make it a pass-through."""
        self._backward = self._enter = self._leave = None
        self._push = self._pop = _ignore
        self._forward = _SilentRange(self._forward.message)
        if module.__dict__.get("forward") is not self:
            logger.warning(
                "torch_nsight: %s.forward was replaced after instrument(); left in place "
                "(this wrapper now only calls through)", type(module).__name__)
            return
        if self._previous is _MISSING:
            del module.__dict__["forward"]
        else:
            module.__dict__["forward"] = self._previous

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        previous = None if self._previous is _MISSING else self._previous
        return (_plain_forward, (self._module(), previous))

    def __repr__(self) -> str:
        return f"<torch_nsight forward of {self._forward.message!r}>"


def _ignore(rng: Range) -> None:
    return None


class _SilentRange:
    """What a removed wrapper that must stay in place (see ``remove``) opens: nothing."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def open(self) -> None:
        return None

    close = open


def _call_previous(previous: Any) -> Any:
    def call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return previous(*args, **kwargs)

    return call


_HOOKS_KEY = "torch_nsight"


class _NodeHooks:
    """The one pre-hook torch_nsight sets on an autograd node, shared by every call that
    uses the node: first it closes the ranges of the calls whose input the node produced,
    then opens those of the calls whose output it produced, outermost first (the calls
    were added innermost first, as their forwards returned)."""

    __slots__ = ("opens", "closes")

    def __init__(self) -> None:
        self.opens: list[BackwardFrame] = []
        self.closes: list[BackwardFrame] = []

    def __call__(self, grad_outputs: Any) -> None:
        for frame in self.closes:
            if frame.is_open:
                state = _LOCAL
                stack = state.stack
                if stack and stack[-1] is frame:  # RangeStack.pop_backward, inlined
                    stack.pop()
                    state.frames -= 1
                    frame.is_open = False
                    frame.range.close()
                else:
                    _pop_backward(frame)
        opens = self.opens
        if len(opens) == 1:  # BackwardFrame.open, inlined
            frame = opens[0]
            task_id = _current_graph_task_id()
            if task_id != frame.graph_task:  # not a second output's node of the same pass
                frame.graph_task = task_id
                _push_backward(frame, task_id)
            return
        for frame in reversed(opens):
            frame.open()


def _watch(frame: BackwardFrame, output: Any, sources: list[Any]) -> None:
    """Hook the backward range of ``frame`` onto the autograd nodes around ``output``.

    Outputs in tuples, lists, dicts or registered pytree types (Hugging Face
    ``ModelOutput``) count. An output produced by one of the input nodes (the module
    returned an input as is) has no backward of its own in this module and is skipped.
    """
    if isinstance(output, _Tensor):
        node = output.grad_fn
        if node is None or node in sources:
            return
        nodes = [node]
    else:
        leaves = output if type(output) is tuple else tree_flatten(output)[0]
        nodes = []
        for leaf in leaves:
            if isinstance(leaf, _Tensor):
                node = leaf.grad_fn
                if node is not None and node not in sources and node not in nodes:
                    nodes.append(node)
        if not nodes:
            return
    for node in nodes:
        _node_hooks(node).opens.append(frame)
    if not sources:
        frame.deferred = True
        return
    for node in sources if len(sources) == 1 else dict.fromkeys(sources):
        _node_hooks(node).closes.append(frame)


def _node_hooks(node: Any) -> _NodeHooks:
    """The one pre-hook torch_nsight keeps on autograd node ``node`` (made on first use)."""
    metadata = node.metadata
    hooks = metadata.get(_HOOKS_KEY)
    if hooks is None:
        hooks = metadata[_HOOKS_KEY] = _NodeHooks()
        node.register_prehook(hooks)
    return hooks
