"""The calls table: torch-level ops with their shapes, attributed like kernels.

Each row of a raw calls table (see :mod:`torch_nsight.report.calls_table`) carries the range
stack open around one aten op; :func:`attribute_calls` gives it the same ``module``,
``module_path``, ``direction`` and ``op`` a kernel launched there gets, so the two tables
join on those columns (plus ``variant`` and ``shape``).
"""

from __future__ import annotations

import pandas as pd

from torch_nsight.analyze.attribute import attribute
from torch_nsight.analyze.columns import needs


@needs("range_stack", "aten_op")
def attribute_calls(calls: pd.DataFrame) -> pd.DataFrame:
    """Attribute every call to its module, direction and named op.

    Labels a call already has (``variant``, ``shape`` from the sweep item that recorded it)
    are kept where the range stack gives none.

    Args:
        calls: a raw calls table.

    Returns:
        A copy with the attribution columns of :func:`~torch_nsight.analyze.attribute`.
    """
    out = attribute(calls)
    for column in ("variant", "shape"):
        if column in calls:
            out[column] = out[column].mask(out[column].isna(), calls[column])
    return out.drop(columns=["run", "context"], errors="ignore")
