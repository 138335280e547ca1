"""Ranges around the training loop's well-known calls, which most loops make outside the
model: the loss, the gradient clipping, the GradScaler's scale, unscale and update.

Their kernels ran in no module range and were left unattributed: 16% of the GPU time of an
LSTM language model's training step (the cross-entropy forward and backward, the unscale's
``multi_tensor_apply_kernel``, the clipping's norms). While an instrumentation is active,
each call of one of :data:`TARGETS` opens the op range of its name, like the optimizer's
step range (:mod:`torch_nsight.capture.ranges.optimizers`):

* a loss or ``GradScaler.scale``: ``op:cross_entropy``; with gradients on, the autograd
  nodes it made open the backward range ``bwd:op:cross_entropy`` where they run, by the
  node hooks the module calls use (:func:`torch_nsight.capture.ranges.hooks.call_with_backward_ranges`);
* a call of the optimizer's step phase (the clipping, ``GradScaler.unscale_`` and
  ``update``): ``step:op:clip_grad_norm_``, direction ``step`` like the optimizer's.

Outside every module the analysis names the kernels ``(outside) cross_entropy`` (forward
and backward), ``(outside) clip_grad_norm_`` (:func:`torch_nsight.vocabulary.outside_module`);
called inside a module's forward, the range names the kernel's op there.

How: the functions are replaced, where users and PyTorch look them up (``torch.nn.functional``
for the losses, which ``nn.CrossEntropyLoss`` and the others call too; ``torch.nn.utils``
and ``torch.nn.utils.clip_grad``; the methods of ``torch.amp.GradScaler``, which
``torch.cuda.amp.GradScaler`` inherits), by a wrapper that calls the original and returns
what it returns. A name bound before the instrumentation (``from torch.nn.functional import
cross_entropy``) keeps the original, and its call no range. The wrappers go in when the first
instrumentation that sends its ranges to the profiler (no test emitter) is installed, and
the originals come back when the last one is removed; a wrapper that another tool wrapped in
turn is left in place, passing straight through. A wrapper stands aside, calling through,
while Dynamo or export traces, while the ranges are paused (``profile --timeline`` outside
its window), for a tensor subclass's input (FakeTensor, FunctionalTensor: Dynamo, whose
rules go by qualified name, keeps the wrapper in its graph as PyTorch's own function, and
AOTAutograd traces it with fake tensors), and inside another of these calls (one range: a tensor subclass or torch
function mode that PyTorch hands the wrapper as the function calls it again). A range that fails to open turns them all off for the process, once, with a
warning; the user's call always runs.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from torch_nsight.capture.ranges.compiling import is_compiling
from torch_nsight.capture.ranges.frames import Range
from torch_nsight.capture.ranges.hooks import NODE_HOOKS, call_with_backward_ranges
from torch_nsight.capture.ranges.ranged_forward import PAUSE
from torch_nsight.capture.ranges.stack import STACK
from torch_nsight.naming import backward_op_message, op_message, step_op_message

if TYPE_CHECKING:
    from torch_nsight.capture.ranges.emitter import RangeEmitter

logger = logging.getLogger(__name__)

__all__ = ["TARGETS", "Target", "watch_outside_calls", "unwatch_outside_calls"]

#: The losses of ``torch.nn.functional`` (each ``nn.*Loss`` module calls one of them).
LOSSES = (
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "kl_div", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "poisson_nll_loss",
    "gaussian_nll_loss", "ctc_loss", "margin_ranking_loss", "hinge_embedding_loss",
    "multilabel_margin_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
    "cosine_embedding_loss", "multi_margin_loss", "triplet_margin_loss",
    "triplet_margin_with_distance_loss", "linear_cross_entropy",
)


@dataclass(frozen=True)
class Target:
    """One function to name: where it is looked up and the name of its range.

    Attributes:
        owner: the module (``torch.nn.functional``) or ``module:Class``
            (``torch.amp.grad_scaler:GradScaler``) holding it.
        attribute: its name there.
        name: the op name of its range (``GradScaler.unscale_``).
        step: whether it belongs to the optimizer's step phase (``step:op:`` range, no
            backward), else to the loss (``op:`` range, ``bwd:op:`` around its backward).
    """

    owner: str
    attribute: str
    name: str
    step: bool = False


_CLIPPING = ("clip_grad_norm_", "clip_grad_value_")
_SCALER = "torch.amp.grad_scaler:GradScaler"
#: The calls named: the losses, gradient clipping (where ``torch.nn.utils`` exports it and
#: where ``clip_grad_norm`` calls it), the GradScaler's steps around the optimizer's
#: (``GradScaler.step`` is not named: the optimizer's step inside it has its range).
TARGETS: tuple[Target, ...] = (
    *(Target("torch.nn.functional", loss, loss) for loss in LOSSES),
    *(Target(owner, name, name, step=True) for name in _CLIPPING
      for owner in ("torch.nn.utils", "torch.nn.utils.clip_grad")),
    Target("torch.nn.utils", "clip_grads_with_norm_", "clip_grads_with_norm_", step=True),
    Target("torch.nn.utils", "get_total_norm", "get_total_norm", step=True),
    Target(_SCALER, "scale", "GradScaler.scale"),
    *(Target(_SCALER, method, f"GradScaler.{method}", step=True)
      for method in ("unscale_", "update")),
)

_PLAIN_TENSORS = (torch.Tensor, nn.Parameter)


class _Ranges:
    """The ranges of one instrumentation's calls, made on first use, and what they go to.

    It is also their owner (:attr:`Range.owner`), so that the node hooks of its calls are
    detached when the instrumentation is removed without holding the instrumentation."""

    def __init__(self, sink: RangeEmitter) -> None:
        self.sink = sink
        self.by_target: dict[Target, tuple[Range, Range | None]] = {}

    def of(self, target: Target) -> tuple[Range, Range | None]:
        """The forward (or step) range of ``target`` and its backward range (None for a
        call of the step phase)."""
        found = self.by_target.get(target)
        if found is None:
            name = target.name
            found = self.by_target[target] = (
                (self._range(step_op_message(name)), None) if target.step
                else (self._range(op_message(name)), self._range(backward_op_message(name))))
        return found

    def _range(self, message: str) -> Range:
        rng = Range(message, message, self.sink, self, is_module=False, names_ops=False)
        rng.open, rng.close = _guarded(rng.open), _guarded(rng.close)
        return rng


def _guarded(call: Callable[[], None]) -> Callable[[], None]:
    """``call``, which never raises: a failure turns the calls' ranges off (an open that
    failed leaves nothing to close, and after it nothing opens or closes)."""

    def guarded() -> None:
        if _WATCH.failed:
            return
        try:
            call()
        except Exception as err:  # never into the user's call
            _WATCH.fail(err)

    return guarded


class _Watch:
    """The replaced functions and the instrumentations whose ranges they open."""

    def __init__(self) -> None:
        # active instrumentation -> its ranges (weak keys: a handle nobody holds goes)
        self.users: weakref.WeakKeyDictionary[Any, _Ranges] = weakref.WeakKeyDictionary()
        self.replaced: list[tuple[Any, str, Any, Any]] = []  # owner, attribute, original, wrapper
        self.inside = threading.local()  # .depth: calls of ours running on this thread
        self.failed = False

    def ranges(self) -> _Ranges | None:
        """The ranges to open now, or None (off, paused, nested, no active instrumentation)."""
        if self.failed or PAUSE.on or getattr(self.inside, "depth", 0) > 0:
            return None
        for handle, ranges in list(self.users.items()):
            if handle.active:
                return ranges
        return None

    def fail(self, err: Exception) -> None:
        self.failed = True
        logger.warning("torch_nsight: ranges around the loss, clipping and GradScaler calls "
                       "are off for this process (%s: %s)", type(err).__name__, err)

    def replace(self) -> None:
        """Put a wrapper in place of every target found (one wrapper per function)."""
        wrappers: dict[int, Any] = {}
        for target in TARGETS:
            owner = _owner(target.owner)
            original = (owner.__dict__.get(target.attribute) if owner is not None else None)
            if original is None or not callable(original):
                continue  # not in this PyTorch
            wrapper = wrappers.get(id(original))
            if wrapper is None:
                wrapper = wrappers[id(original)] = _wrap(original, target)
            setattr(owner, target.attribute, wrapper)
            self.replaced.append((owner, target.attribute, original, wrapper))

    def restore(self) -> None:
        """Put every original back where its wrapper still is."""
        for owner, attribute, original, wrapper in reversed(self.replaced):
            if owner.__dict__.get(attribute) is wrapper:
                setattr(owner, attribute, original)
            else:
                logger.warning("torch_nsight: %s.%s was replaced again after instrument(); "
                               "left in place (its wrapper now only calls through)",
                               getattr(owner, "__name__", owner), attribute)
        self.replaced.clear()


_WATCH = _Watch()


def _owner(spec: str) -> Any:
    module_name, _, class_name = spec.partition(":")
    try:
        owner = importlib.import_module(module_name)
    except ImportError:
        return None
    return getattr(owner, class_name, None) if class_name else owner


def _plain(args: tuple[Any, ...]) -> bool:
    """Whether the first tensor among ``args`` (if any) is a plain tensor or parameter."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return type(arg) in _PLAIN_TENSORS
    return True


def _wrap(original: Callable[..., Any], target: Target) -> Callable[..., Any]:
    """The function that stands in for ``original``: it inside the ranges of ``target``.

    The wrapper looks nothing up in its module's globals (everything it uses is in its
    closure) and carries ``original``'s globals, name and ``__wrapped__``: TorchScript,
    scripting a function that calls it, compiles ``original``'s source (``inspect`` follows
    ``__wrapped__``) against those globals, as without the wrapper."""
    _tn_watch, _tn_plain, _tn_compiling = _WATCH, _plain, is_compiling
    _tn_with_backward, _tn_stack, _tn_grad = call_with_backward_ranges, STACK, torch.is_grad_enabled

    def call(*args: Any, **kwargs: Any) -> Any:
        if _tn_compiling():
            return original(*args, **kwargs)
        ranges = _tn_watch.ranges()
        if ranges is None or not _tn_plain(args):
            return original(*args, **kwargs)
        forward, backward = ranges.of(target)
        inside = _tn_watch.inside
        inside.depth = getattr(inside, "depth", 0) + 1
        try:
            if backward is not None and _tn_grad():
                return _tn_with_backward(forward, backward, original, args, kwargs)
            _tn_stack.push(forward)
            try:
                return original(*args, **kwargs)
            finally:
                _tn_stack.pop(forward)
        finally:
            inside.depth -= 1

    globals_ = getattr(original, "__globals__", None)
    if isinstance(globals_, dict):
        call = types.FunctionType(call.__code__, globals_, call.__name__, call.__defaults__,
                                  call.__closure__)
    return functools.update_wrapper(call, original)


def watch_outside_calls(handle: Any, sink: RangeEmitter) -> None:
    """Name the calls of :data:`TARGETS` from now on while ``handle`` is active, in ranges
    sent to ``sink``; replaces the functions if no other instrumentation has."""
    _WATCH.users[handle] = _Ranges(sink)
    if not _WATCH.replaced:
        _WATCH.replace()


def unwatch_outside_calls(handle: Any) -> None:
    """Stop naming calls for ``handle`` (detach the node hooks of its calls still alive);
    the last instrumentation to go puts the original functions back."""
    ranges = _WATCH.users.pop(handle, None)
    if ranges is not None:
        NODE_HOOKS.detach(ranges)
        STACK.close_owned(ranges)
    if not any(h.active for h in list(_WATCH.users)):
        _WATCH.restore()
