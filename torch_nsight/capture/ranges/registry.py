"""The active instrumentations, and which one instrumented each module.

:func:`~torch_nsight.capture.front.instrument.instrument` registers its handles here; compiled
graphs (:mod:`~torch_nsight.capture.compiled.ranges`), optimizer steps and
:func:`torch_nsight.step` find them here without importing ``instrument.py``, which imports
them (no import cycle).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from torch_nsight.capture.front.instrument import Instrumentation
    from torch_nsight.capture.ranges.emitter import RangeEmitter

__all__ = ["active_instrumentations", "instrumented_modules", "instrumented_name", "owner",
           "step_emitter"]

# Every module that an active Instrumentation put hooks on, mapped to that Instrumentation
# and the module's qualified name. Weak keys: the entry goes with the module; the value (the
# handle) lives as long as it.
_OWNERS: weakref.WeakKeyDictionary[nn.Module, tuple[Instrumentation, str]] = (
    weakref.WeakKeyDictionary()
)
_ACTIVE: weakref.WeakSet[Instrumentation] = weakref.WeakSet()


def add_module(handle: Instrumentation, module: nn.Module, name: str) -> None:
    """Record that ``handle`` instrumented ``module`` under the qualified ``name``."""
    _OWNERS[module] = (handle, name)


def drop_module(handle: Instrumentation, module: nn.Module) -> None:
    """Forget ``module`` if ``handle`` instrumented it."""
    entry = _OWNERS.get(module)
    if entry is not None and entry[0] is handle:
        del _OWNERS[module]


def owner(module: nn.Module) -> Instrumentation | None:
    """The instrumentation that put hooks on ``module``, or None."""
    entry = _OWNERS.get(module)
    return entry[0] if entry is not None else None


def activate(handle: Instrumentation) -> None:
    """Count ``handle`` among the active instrumentations."""
    _ACTIVE.add(handle)


def deactivate(handle: Instrumentation) -> None:
    """No longer count ``handle`` among the active instrumentations."""
    _ACTIVE.discard(handle)


def instrumented_name(module: object) -> tuple[Instrumentation, str] | None:
    """(its active instrumentation, its qualified name) when ``module`` is instrumented."""
    if not isinstance(module, nn.Module):  # only modules are keys
        return None
    try:
        entry = _OWNERS.get(module)
    except TypeError:  # a module class with __eq__ and no __hash__
        return None
    if entry is None or not entry[0].active:
        return None
    return entry


def step_emitter() -> RangeEmitter | None:
    """Where an optimizer step's range goes: the emitter chain of an active instrumentation
    (through its calls recorder, when it records)."""
    return next((h.step_sink for h in list(_ACTIVE) if h.active and h.step_sink is not None),
                None)


def active_instrumentations() -> list[Instrumentation]:
    """Return the instrumentations whose hooks are installed now (for tests and debugging).

    Returns:
        The active :class:`~torch_nsight.capture.front.instrument.Instrumentation` handles, in no
        particular order.
    """
    return [handle for handle in list(_ACTIVE) if handle.active]


def instrumented_modules() -> list[tuple[nn.Module, str]]:
    """Every module an active instrumentation put hooks on, with its qualified name."""
    return [(module, name) for module, (handle, name) in list(_OWNERS.items())
            if handle.active]
