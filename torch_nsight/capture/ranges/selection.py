"""Which modules :func:`~torch_nsight.capture.front.instrument.instrument` puts ranges on: its
``depth``, ``include`` and ``exclude`` arguments checked and applied to ``named_modules()``."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from torch import nn

__all__ = ["Selector", "check_selectors", "select_modules"]

Selector = str | type
"""A module selector: an fnmatch glob on qualified names, or a module type."""


def check_selectors(value: object, argument: str) -> tuple[Selector, ...] | None:
    """``include`` or ``exclude`` as a tuple of selectors (one selector or an iterable).

    Args:
        value: the argument as given: None, a selector, or an iterable of them.
        argument: its name, for the message.

    Returns:
        The selectors, or None for None.

    Raises:
        TypeError: ``value`` is neither, or holds something other than a selector.
    """
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


def select_modules(
    model: nn.Module,
    depth: int | None,
    include: tuple[Selector, ...] | None,
    exclude: tuple[Selector, ...] | None,
) -> list[tuple[str, nn.Module]]:
    """The (qualified name, module) pairs of ``model`` to instrument, in
    ``named_modules()`` order (a shared module under its first name only).

    Args:
        model: the root module (depth 0).
        depth: the deepest level kept, or None for all.
        include: keep only modules one of these matches, or None for all.
        exclude: drop the modules one of these matches, or None.
    """
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
