"""A fix switched off and on between steps (:class:`Toggle`), and what the switches of
:mod:`torch_nsight.capture.fixes.switches` share to make one cheap: a compiled forward for a
torch.nn built-in (:func:`compile_forward`), the optimizers' state converted with a
module's parameters (:class:`OptimizerState`)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

__all__ = ["FusedFlag", "OptimizerState", "Toggle", "built_in", "compile_forward", "forward_swap",
           "live_instances", "together"]

Action = Callable[[], None]


class Toggle:
    """A fix applied, on; :meth:`off` and :meth:`on` switch it (each does nothing when it is
    so already), :meth:`undo` takes it away for good (a fix that failed half-way).

    Args:
        on: puts the fix back after ``off``.
        off: leaves the model computing as it did without the fix.
        undo: takes the fix away (default: ``off``).
    """

    def __init__(self, on: Action, off: Action, undo: Action | None = None) -> None:
        self._on, self._off, self._undo = on, off, undo
        self.is_on = True

    def on(self) -> None:
        """Switch the fix on."""
        if not self.is_on:
            self._on()
            self.is_on = True

    def off(self) -> None:
        """Switch the fix off."""
        if self.is_on:
            self._off()
            self.is_on = False

    def undo(self) -> None:
        """Take the fix away (it is not switched on again)."""
        if self._undo is None:
            self.off()
        else:
            self._undo()
            self.is_on = False


def together(toggles: list[Toggle]) -> Toggle:
    """One toggle for several: on in their order, off and undone in reverse."""
    def each(name: str, order: list[Toggle]) -> Action:
        def action() -> None:
            for toggle in order:
                getattr(toggle, name)()
        return action
    backwards = toggles[::-1]
    return Toggle(each("on", toggles), each("off", backwards), each("undo", backwards))


def built_in(module: nn.Module) -> bool:
    """Whether the module's ``forward`` is one of torch.nn's own (``nn.Linear``, ``nn.GELU``,
    ``nn.Sequential`` ..., or a subclass that keeps their forward)."""
    forward = getattr(type(module), "forward", None)
    return str(getattr(forward, "__module__", "")).startswith("torch.nn.")


def compile_forward(module: nn.Module, options: Mapping[str, Any]) -> Toggle:
    """Compile a torch.nn built-in through a forward of its instance.

    ``module.compile()`` on a built-in compiles nothing: TorchDynamo does not trace a frame
    of torch.nn's own code it is handed first (checked with a counting backend, torch 2.11 and
    2.13: no graph). A forward defined here that calls the module's own is traced, the
    built-in's code inlined. Its ``state_dict``, hooks and parameters are unchanged.
    """
    original = module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    return forward_swap(module, torch.compile(forward, **dict(options)))


def forward_swap(module: nn.Module, forward: Callable[..., Any]) -> Toggle:
    """``forward`` set on the module's instance, on; off puts back what the instance had
    (its class's forward, or an instance forward set before)."""
    saved = vars(module).get("forward")

    def on() -> None:
        module.forward = forward

    def off() -> None:
        if saved is None:
            module.__dict__.pop("forward", None)
        else:
            module.forward = saved
    on()
    return Toggle(on, off)


def live_instances(*classes: type) -> list[Any]:
    """The live objects (garbage collector's view) of these classes or their subclasses."""
    return [found for found in gc.get_objects() if issubclass(type(found), classes)]


#: A tensor's rank -> its channels-last memory format (an image's, a volume's).
CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


class OptimizerState:
    """The optimizers' state of a module's 4-D and 5-D parameters, converted with them: a fused
    optimizer (``AdamW(fused=True)`` on CUDA) refuses parameters and moments of other
    layouts, a ``foreach`` one falls back to its slow path for them."""

    #: Switches that look among the live objects for the optimizers while none is found.
    SEARCHES = 3

    def __init__(self, module: nn.Module) -> None:
        self.params = {id(p) for p in module.parameters() if p.dim() in CHANNELS_LAST}
        self.optimizers: list[torch.optim.Optimizer] = []
        self.searches = 0

    def convert(self, channels_last: bool) -> None:
        """The state's 4-D and 5-D tensors channels-last (:data:`CHANNELS_LAST`), or back to
        contiguous."""
        if not self.params:
            return
        if not self.optimizers and self.searches < self.SEARCHES:
            self.searches += 1
            self.optimizers = live_instances(torch.optim.Optimizer)
        for optimizer in self.optimizers:
            for param, held in optimizer.state.items():
                if id(param) not in self.params or not isinstance(held, dict):
                    continue
                for key, value in list(held.items()):
                    if isinstance(value, torch.Tensor) and value.dim() in CHANNELS_LAST:
                        held[key] = value.contiguous(
                            memory_format=CHANNELS_LAST[value.dim()] if channels_last
                            else torch.contiguous_format)


#: The optimizers whose ``step`` has a fused implementation (``fused=True``).
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD")
try:  # where torch has fused optimizer kernels (CUDA, and the CPU since torch 2.4)
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    _FUSED_DEVICES = frozenset(_get_fused_kernels_supported_devices())
except ImportError:  # pragma: no cover - an older torch
    _FUSED_DEVICES = frozenset({"cuda"})


class FusedFlag:
    """The ``fused`` flag of the optimizers that hold a model's parameters, switched between
    steps: on, every parameter group of such an optimizer (:data:`FUSED_OPTIMIZERS`) steps
    fused (its parameters floating-point on a device with fused kernels), its ``step`` counts
    on the parameters' device as the fused kernel keeps them; off, the flags and counts as
    they were.

    The optimizer is usually made after :func:`torch_nsight.instrument`: a global optimizer
    step pre-hook sets the flag wanted on each optimizer of the model before its step, so it
    holds from the first step of an optimizer made later. :meth:`remove` restores the flags
    and takes the hook away.
    """

    def __init__(self, model: nn.Module) -> None:
        self.params = {id(p) for p in model.parameters()}
        self.wanted = True
        self.seen: dict[int, list[dict[str, Any]]] = {}  # optimizer id -> its groups to switch
        self.optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.saved: dict[int, tuple[Any, Any]] = {}  # group id -> (fused, foreach) as made
        self.hook = register_optimizer_step_pre_hook(self._before_step)

    def _groups(self, optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
        if id(optimizer) not in self.seen:
            fits = type(optimizer).__name__ in FUSED_OPTIMIZERS
            groups = [g for g in optimizer.param_groups if fits and "fused" in g and g["params"]
                      and any(id(p) in self.params for p in g["params"])
                      and all(p.is_floating_point() and p.device.type in _FUSED_DEVICES
                              for p in g["params"])]
            self.saved.update({id(g): (g.get("fused"), g.get("foreach")) for g in groups})
            self.seen[id(optimizer)] = groups
            self.optimizers.add(optimizer)
        return self.seen[id(optimizer)]

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for group in self._groups(optimizer):
            was_fused, foreach = self.saved[id(group)]
            flags = (True, False) if self.wanted else (was_fused, foreach)
            if (group["fused"], group.get("foreach")) == flags:
                continue
            group["fused"], group["foreach"] = flags
            on_device = bool(group["fused"]) or bool(group.get("capturable"))
            for param in group["params"]:
                held = optimizer.state.get(param)
                step = held.get("step") if isinstance(held, dict) else None
                if isinstance(held, dict) and isinstance(step, torch.Tensor):
                    held["step"] = step.to(param.device if on_device else "cpu", torch.float32)

    def set(self, fused: bool) -> None:
        """Fused (``True``) or the flags as they were, from each optimizer's next step."""
        self.wanted = fused

    def remove(self) -> None:
        """The flags (and step counts) as they were, and the hook gone."""
        self.wanted = False
        for optimizer in list(self.optimizers):
            self._before_step(optimizer, (), {})
        self.hook.remove()
