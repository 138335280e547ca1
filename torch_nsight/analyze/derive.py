"""User-defined columns: ``fn(row, shape)`` per kernel row (``sweep(..., derive=...)``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd

from torch_nsight.analyze.frames import own

logger = logging.getLogger(__name__)


def derive_columns(kernels: pd.DataFrame, derive: Mapping[str, Any],
                   shapes: Mapping[str, Any]) -> pd.DataFrame:
    """Add ``derive``'s columns: ``fn(row, shape)`` per kernel row.

    A function that raises leaves its column NaN (logged), so a long profile is not lost to
    a slip in a derived column.

    Args:
        kernels: the kernel table.
        derive: column name -> ``fn(row, shape)``.
        shapes: shape label -> the shape as the user gave it.

    Returns:
        A copy with the columns added.
    """
    out = own(kernels)
    for name, fn in derive.items():
        values = []
        try:
            for _, row in out.iterrows():
                values.append(fn(row, shapes.get(row.get("shape"))))
        except Exception as err:
            logger.error("derive[%r] failed (%s: %s); its column is left empty",
                         name, type(err).__name__, err)
            values = [float("nan")] * len(out)
        out[name] = values
    return out
