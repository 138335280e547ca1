"""The raw calls table: the rows of a calls file (:mod:`torch_nsight.calls_file`), of a
sweep's manifest or of a report that carries them, as a DataFrame.

One row per distinct torch-level call::

    source      variant  shape      range_stack                           aten_op  ...  count
    /out/sweep  None     2x128x256  ("LlamaBlock", "mlp", "mlp.up_proj")  "mm"     ...  1

``range_start_end`` and ``range_other`` are empty: the ops' ranges are all in
``range_stack``. ``flops`` and ``bytes`` are per call (float, NaN where unknown; a grouped
GEMM recorded before its FLOPs were counted is counted from its shapes,
:mod:`torch_nsight.shape_flops`). Where the
rows record the class of the module each call ran in, a ``module_class`` column holds it
(``torch.nn.modules.conv.Conv2d``; None outside every module); tables recorded before
classes were recorded have no such column. Likewise ``op_args``: a convolution's scalar
arguments as JSON text (``{"dilation":[2,2],"groups":32,"padding":[2,2],...}``), recorded
since 2026-11-28.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight.calls_file import read_call_rows
from torch_nsight.files import path_text
from torch_nsight.shape_flops import shape_flops

CALLS_COLUMNS = ("source", "variant", "shape", "range_stack", "range_start_end",
                 "range_other", "aten_op", "input_shapes", "input_dtypes", "output_shapes",
                 "output_dtypes", "flops", "bytes", "count")


def calls_frame(rows: Sequence[Mapping[str, Any]], source: str) -> pd.DataFrame:
    """The raw calls table of calls-file rows (see :mod:`torch_nsight.calls_file`)."""
    records = []
    for row in rows:
        records.append({
            "source": source, "variant": row.get("variant") or None,
            "shape": row.get("shape") or None,
            "range_stack": tuple(row.get("range_stack") or ()), "range_start_end": (),
            "range_other": (), "aten_op": row.get("op"),
            "input_shapes": _shapes(row.get("input_shapes")),
            "input_dtypes": tuple(row.get("input_dtypes") or ()),
            "output_shapes": _shapes(row.get("output_shapes")),
            "output_dtypes": tuple(row.get("output_dtypes") or ()),
            "flops": _flops(row), "bytes": row.get("bytes"),
            "count": int(row.get("count") or 1)})
    frame = pd.DataFrame.from_records(records, columns=list(CALLS_COLUMNS))
    frame[["flops", "bytes"]] = frame[["flops", "bytes"]].astype("float64")
    for key, column in (("module_class", "module_class"), ("args", "op_args")):
        if any(row.get(key) for row in rows):
            frame[column] = pd.Series([row.get(key) or None for row in rows],
                                      index=frame.index, dtype=object)
    return frame


def _flops(row: Mapping[str, Any]) -> Any:
    """The row's FLOPs per call, counted from its shapes where it has none."""
    flops = row.get("flops")
    if flops is None or flops != flops:  # None or NaN
        return shape_flops(str(row.get("op")), _shapes(row.get("input_shapes")))
    return flops


def _shapes(value: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(d) for d in shape) if isinstance(shape, (list, tuple)) else ()
                 for shape in value or ())


def read_calls(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a calls file written by ``instrument(model, record_calls=PATH)`` as a raw calls
    table.

    Raises:
        ReportError: it is not a calls file.
    """
    return calls_frame(read_call_rows(path), path_text(Path(path).resolve()))
