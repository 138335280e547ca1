"""What every kind of run takes from the user, checked the same way in any process: the
model's variants, ``make_inputs``, this process's PyTorch settings; and the error of a run
none of whose shapes succeeded.

Both sides use it: the parent's plans (:mod:`~torch_nsight.collect.parent.plan`) and
:func:`torch_nsight.timeline`, which also runs in the child of a focused sweep.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch_nsight.collect.shared import job as jobs
from torch_nsight.errors import ShapeFailedError
from torch_nsight.naming import format_measure_range

__all__ = ["check_variants", "check_make_inputs", "is_module", "user_settings",
           "every_shape_failed"]


def check_variants(model: Any) -> dict[str, Any]:
    """``model`` as label -> module or factory (``""`` for a single one), checked."""

    def check(label: str, value: Any) -> Any:
        where = f"model{label and f'[{label!r}]'}"
        if isinstance(value, str):
            return jobs.Target(value, role=where)
        if not is_module(value) and not callable(value):
            raise TypeError(f"{where} must be an nn.Module, a zero-argument factory or its "
                            f"name ('package.module:make'), got {type(value).__name__}")
        return value

    if isinstance(model, Mapping):
        if not model:
            raise ValueError("model is an empty dict: give at least one variant")
        out = {}
        for label, value in model.items():
            if not isinstance(label, str) or not label:
                raise TypeError(f"variant labels must be non-empty str, got {label!r}")
            try:
                format_measure_range(variant=label)
            except ValueError as err:
                raise ValueError(f"variant label {label!r}: {err}") from err
            out[label] = check(label, value)
        return out
    return {"": check("", model)}


def check_make_inputs(make_inputs: Any) -> Callable[[Any], Any] | None:
    """``make_inputs`` checked: a function, its name (a :class:`~jobs.Target`) or None.

    Raises:
        TypeError: it is none of these.
        ValueError: a malformed name, a file that does not exist or that plainly defines no
            such name.
    """
    if isinstance(make_inputs, str):
        return jobs.Target(make_inputs, role="make_inputs")
    if make_inputs is not None and not callable(make_inputs):
        raise TypeError("make_inputs must be a function shape -> inputs, its name "
                        "('package.module:make_inputs'), or None, got "
                        f"{type(make_inputs).__name__}")
    return make_inputs


def is_module(value: Any) -> bool:
    """Whether ``value`` is an ``nn.Module``, without importing torch: a process that never
    imported it holds none (the command line's file targets are imported by the child)."""
    nn = getattr(sys.modules.get("torch"), "nn", None)
    return nn is not None and isinstance(value, nn.Module)


def user_settings() -> dict[str, Any]:
    """The global PyTorch settings of this process, for the child to run with: none when
    this process never imported torch (it cannot have changed them; the child starts with
    torch's defaults and records what it ran with)."""
    if sys.modules.get("torch") is None:
        return {}
    from torch_nsight.capture.calls.settings import describe_settings, read_settings

    settings = read_settings()
    return {**settings, "summary": describe_settings(settings)}


def every_shape_failed(failed: Sequence[Mapping[str, Any]]) -> ShapeFailedError:
    """The error of a run none of whose (variant, shape) items ended ``ok``: the first five
    with their errors."""
    return ShapeFailedError("every shape failed: " + "; ".join(
        f"{f['shape']}{' (' + f['variant'] + ')' if f.get('variant') else ''}: {f['error']}"
        for f in failed[:5]) + ("" if len(failed) <= 5 else f"; and {len(failed) - 5} "
                                "more (see the log)"))
