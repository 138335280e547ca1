"""A calls file (``*.calls.json``): written by capture, read by report.

:class:`~torch_nsight.capture.calls.recorder.CallRecorder` records the torch-level ops of one
iteration and writes them here (:func:`calls_document`, :func:`write_calls`); the report
stage reads them back (:func:`read_call_rows`), and checks the same document when a report
carries it (:func:`check_call_rows`, after :func:`torch_nsight.formats.decode_calls`).
Stage-neutral like :mod:`torch_nsight.formats`, which names the kind, format and row keys:
no torch, no pandas.

A row: ``range_stack`` (the range messages open around the op, outermost first), ``op``,
``input_shapes``, ``input_dtypes``, ``output_shapes``, ``output_dtypes``, ``flops`` (per
call, or None), ``bytes`` (per call) and ``count``; optionally ``module_class`` and
``args`` (a convolution's scalar arguments, JSON text). In the file, tuples are JSON lists.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from torch_nsight import formats
from torch_nsight.checks import check_schema, loads_json
from torch_nsight.errors import ReportError
from torch_nsight.files import atomic_output

__all__ = ["calls_document", "write_calls", "read_call_rows", "check_call_rows"]


def calls_document(rows: Iterable[Mapping[str, Any]], torch_version: str) -> dict[str, Any]:
    """The JSON document a calls file holds (lists, not tuples).

    Args:
        rows: the calls table, as :meth:`CallRecorder.rows` returns it.
        torch_version: the version of the torch that ran the ops.
    """
    plain = [{**row, "range_stack": list(row["range_stack"]),
             "input_shapes": [list(s) for s in row["input_shapes"]],
             "input_dtypes": list(row["input_dtypes"]),
             "output_shapes": [list(s) for s in row["output_shapes"]],
             "output_dtypes": list(row["output_dtypes"])} for row in rows]
    return {"format": formats.CALLS_FORMAT, "kind": formats.CALLS_KIND,
            "torch": torch_version, "rows": plain}


def write_calls(path: str | os.PathLike[str], document: Mapping[str, Any]) -> Path:
    """Write a calls document (:func:`calls_document`) to ``path``, replacing it.

    Returns:
        The path written.
    """
    path = Path(path)
    with atomic_output(path) as temp:
        temp.write_text(json.dumps(document, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def read_call_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read the rows of a calls file (:meth:`torch_nsight.capture.calls.recorder.CallRecorder.write`).

    Args:
        path: The JSON file.

    Returns:
        The rows, as :meth:`CallRecorder.rows` returns them (tuples for the range stack,
        shapes and dtypes).

    Raises:
        ReportError: If the file is not JSON, not a torch_nsight calls file, of a newer
            format, or a row lacks a field.
        OSError: If the file cannot be read.
    """
    path = Path(path)
    document = loads_json(path.read_bytes(), str(path), "torch_nsight calls file")
    if not isinstance(document, dict) or document.get("kind") != formats.CALLS_KIND:
        kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise ReportError(f"{path} is not a torch_nsight calls file (kind {kind!r}, expected "
                          f"{formats.CALLS_KIND!r}); pass the file written by CallRecorder.write()")
    return check_call_rows(document, str(path))


def check_call_rows(document: dict[str, Any], path: str) -> list[dict[str, Any]]:
    """The rows of a calls document (a calls file's JSON, or a carried one), checked.

    Raises:
        ReportError: of a newer format, without rows, or a row lacks a field (the message
            names ``path``, the file it came from).
    """
    fmt = document.get("format")
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1 or fmt > formats.CALLS_FORMAT:
        raise ReportError(f"{path} holds a calls table of format {fmt!r}; this torch_nsight reads "
                          f"formats 1 to {formats.CALLS_FORMAT}: upgrade torch_nsight to read it")
    rows = document.get("rows")
    if not isinstance(rows, list):
        raise ReportError(f"{path} has no list of rows: the file is damaged")
    out = []
    for index, row in enumerate(rows):
        missing = [k for k in formats.CALLS_ROW_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise ReportError(f"{path}: row {index} lacks {missing}: the file is damaged")
        check_schema(row, formats.CALLS_ROW_SCHEMA, path, f"rows[{index}]")
        out.append({**row, "range_stack": tuple(row["range_stack"] or ()),
                    "input_shapes": tuple(tuple(s or ()) for s in row["input_shapes"] or ()),
                    "input_dtypes": tuple(row["input_dtypes"] or ()),
                    "output_shapes": tuple(tuple(s or ()) for s in row["output_shapes"] or ()),
                    "output_dtypes": tuple(row["output_dtypes"] or ())})
    return out
