"""Each analysis pass declares the columns it reads; a table without them gets a clear error.

A source (an Nsight Compute report, a saved profile, a PyTorch profiler trace) provides some
columns and not others; :func:`needs` turns what would be a ``KeyError`` deep inside a pass
into a :class:`~torch_nsight.errors.MissingMetricError` that names the pass, the columns and
what to do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import pandas as pd

from torch_nsight.errors import MissingMetricError

Pass = TypeVar("Pass", bound=Callable[..., Any])


def check_columns(df: pd.DataFrame, columns: tuple[str, ...], step: str) -> None:
    """Raise if ``df`` lacks any of ``columns``.

    Raises:
        MissingMetricError: the step named ``step`` cannot run on this table.
    """
    missing = [c for c in columns if c not in df]
    if missing:
        raise MissingMetricError(
            f"the analysis step {step} needs the column(s) {', '.join(missing)}, which this "
            "profile's source does not provide: load a source that records them (an Nsight "
            "Compute report made with torch_nsight.sweep or `ncu --nvtx`)")


def needs(*columns: str) -> Callable[[Pass], Pass]:
    """Declare the columns a pass ``df = step(df, ...)`` reads, checked on every call.

    The declaration is kept as the pass's ``requires`` attribute.
    """

    def wrap(step: Pass) -> Pass:
        @functools.wraps(step)
        def checked(df: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
            check_columns(df, columns, step.__name__)
            return step(df, *args, **kwargs)

        checked.requires = columns  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return wrap
