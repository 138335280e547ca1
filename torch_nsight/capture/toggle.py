"""A fix switched off and on between steps (:class:`Toggle`), and what the switches of
:mod:`torch_nsight.capture.switches` share to make one cheap: a compiled forward for a
torch.nn built-in (:func:`compile_forward`), the optimizers' state converted with a
module's parameters (:class:`OptimizerState`)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["OptimizerState", "Toggle", "built_in", "compile_forward", "forward_swap",
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


class OptimizerState:
    """The optimizers' state of a module's 4-D parameters, converted with them: a fused
    optimizer (``AdamW(fused=True)`` on CUDA) refuses parameters and moments of other
    layouts, a ``foreach`` one falls back to its slow path for them."""

    #: Switches that look among the live objects for the optimizers while none is found.
    SEARCHES = 3

    def __init__(self, module: nn.Module) -> None:
        self.params = {id(p) for p in module.parameters() if p.dim() == 4}
        self.optimizers: list[torch.optim.Optimizer] = []
        self.searches = 0

    def convert(self, memory_format: torch.memory_format) -> None:
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
                    if isinstance(value, torch.Tensor) and value.dim() == 4:
                        held[key] = value.contiguous(memory_format=memory_format)
