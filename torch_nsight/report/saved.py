"""A saved profile: one Parquet file holding the kernel table, with the metadata (and the
calls table, when there is one) as JSON in the file's key-value metadata.

Format 2 stores a :class:`~torch_nsight.record.ProfileMeta`; format 1 (commit a56250f and
before) stored an untyped dict and named the range columns ``nvtx_*``: both are read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight.checks import DAMAGED, LeftOut, field, loads_json, number, whole
from torch_nsight.errors import ReportError
from torch_nsight.files import atomic_output
from torch_nsight.record import FORMAT_VERSION, ProfileMeta
from torch_nsight.report.cache import plain_strings
from torch_nsight.report.expand import check_parquet_size
from torch_nsight.report.source_base import check_times
from torch_nsight.vocabulary import FLAG_COLUMNS, NAME_COLUMNS, NUMBER_KERNEL_COLUMNS

META_KEY = b"torch_nsight.profile"
CALLS_KEY = b"torch_nsight.calls"
TIMELINE_KEY = b"torch_nsight.timeline"
TUPLE_COLUMNS = ("range_stack", "range_start_end", "range_other")
_RENAMED = {"nvtx_stack": "range_stack", "nvtx_start_end": "range_start_end",
            "nvtx_other": "range_other"}
_CALL_TUPLES = ("range_stack", "range_start_end", "range_other", "input_dtypes",
                "output_dtypes")
_CALL_SHAPES = ("input_shapes", "output_shapes")


#: Columns that hold a tuple or nothing (None), and text or nothing: Parquet gives back
#: arrays, and NaN for a column with no value at all.
OPTIONAL_TUPLES = ("fused_modules",)
OPTIONAL_TEXT = ("aten_ops",)


def _tuples(frame: pd.DataFrame, columns: tuple[str, ...], where: str = "") -> None:
    for column in columns:
        if column in frame:
            if not all(_is_sequence(v, nested=False) for v in frame[column]):
                raise ReportError(f"{where}: column {column!r} holds values that are not "
                                  f"lists; {DAMAGED}")
            frame[column] = [tuple(v) if v is not None else () for v in frame[column]]


def _optional(frame: pd.DataFrame) -> None:
    for column in OPTIONAL_TUPLES:
        if column in frame:
            frame[column] = pd.Series([tuple(v) if isinstance(v, (list, tuple, np.ndarray))
                                       else None for v in frame[column]], index=frame.index,
                                      dtype=object)
    for column in OPTIONAL_TEXT:
        if column in frame:
            frame[column] = pd.Series([v if isinstance(v, str) else None
                                       for v in frame[column]], index=frame.index, dtype=object)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _check_kinds(frame: pd.DataFrame, where: str) -> None:
    """Refuse a column holding another kind of value than it does (text where numbers
    belong, numbers or flags where names do: :data:`~torch_nsight.vocabulary.NAME_COLUMNS`);
    number columns stored as mixed objects become numbers."""
    kinds: dict[str, tuple[str, Any]] = {**dict.fromkeys(NAME_COLUMNS, ("names", str)),
             **dict.fromkeys(FLAG_COLUMNS, ("flags", (bool, np.bool_))),
             **dict.fromkeys(NUMBER_KERNEL_COLUMNS, ("numbers", (int, float, np.number)))}
    for column in frame.columns.intersection(list(kinds)):
        what, types = kinds[column]
        values = frame[column]
        if what == "numbers" and pd.api.types.is_numeric_dtype(values) \
                and not pd.api.types.is_bool_dtype(values):
            continue
        if not all(_missing(v) or (isinstance(v, types) and not (
                what == "numbers" and isinstance(v, (bool, np.bool_)))) for v in values):
            raise ReportError(f"{where}: column {column!r} holds values that are not "
                              f"{what}; {DAMAGED}")
        if what == "numbers":
            frame[column] = pd.to_numeric(values.map(lambda v: np.nan if v is None else v))


def write_profile(kernels: pd.DataFrame, calls: pd.DataFrame | None, meta: ProfileMeta,
                  path: str | os.PathLike[str], *,
                  timeline: pd.DataFrame | None = None) -> Path:
    """Write a profile's tables and metadata to one Parquet file (the calls and timeline
    tables as JSON in its metadata).

    Returns:
        The path written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(path)
    table = pa.Table.from_pandas(kernels, preserve_index=False)
    stored = {META_KEY: json.dumps({"format": FORMAT_VERSION, "meta": meta.to_dict()},
                                   default=str)}
    if calls is not None:
        stored[CALLS_KEY] = calls.to_json(orient="records", default_handler=str)
    if timeline is not None:
        stored[TIMELINE_KEY] = timeline.to_json(orient="records", default_handler=str)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **stored})
    with atomic_output(target) as temp, open(temp, "wb") as file:
        pq.write_table(table, file)  # pyarrow opens no name that is not UTF-8
    return target


def read_profile(path: str | os.PathLike[str]
                 ) -> tuple[pd.DataFrame, pd.DataFrame | None, ProfileMeta]:
    """Read a file written by :func:`write_profile`, by this or an older version.

    Returns:
        (kernels, calls or None, metadata).

    Raises:
        ReportError: the file is missing, not Parquet, or not a torch_nsight profile.
    """
    import pyarrow.parquet as pq

    source = Path(path)
    if not source.is_file():  # a FIFO or a device is not opened: it could block or never end
        what = "is not a regular file" if source.exists() else "does not exist"
        raise ReportError(f"profile {source} {what}")
    check_parquet_size(source)  # a bomb refused before its columns expand
    try:
        with open(source, "rb") as file:  # pyarrow opens no name that is not UTF-8
            table = pq.read_table(file)
        frame = table.to_pandas()
    except Exception as err:  # pyarrow raises several types for non-Parquet input
        raise ReportError(f"{source} is not a Parquet file written by Profile.save, or its "
                          f"columns do not hold their stored types: {err}") from err
    metadata = table.schema.metadata or {}
    stored = metadata.get(META_KEY)
    if stored is None:
        raise ReportError(f"{source} is Parquet but not a torch_nsight profile; to read a "
                          "report use torch_nsight.load()")
    where = f"{source} (its torch_nsight.profile metadata)"
    header = loads_json(stored, where, "saved profile header")
    version = whole(field(header, "format", (int, float), where, default=0))
    if version is None:
        raise ReportError(f"{where}: field 'format' is not a format number; {DAMAGED}")
    if version > FORMAT_VERSION:
        raise ReportError(f"{source} was saved by a newer torch_nsight (format {version}; this "
                          f"one reads up to {FORMAT_VERSION}): upgrade torch_nsight")
    kernels = check_times(plain_strings(frame).rename(columns=_RENAMED),
                          str(source))
    _tuples(kernels, TUPLE_COLUMNS, str(source))
    _optional(kernels)
    _check_kinds(kernels, str(source))
    listed = [c for c in kernels.columns if c not in (*TUPLE_COLUMNS, *OPTIONAL_TUPLES)
              and kernels[c].dtype == object and any(
                  isinstance(v, (list, tuple, dict, np.ndarray)) for v in kernels[c])]
    if listed:
        raise ReportError(f"{source}: column {listed[0]!r} holds lists where single values "
                          f"belong; {DAMAGED}")
    calls = None
    if CALLS_KEY in metadata:
        calls = _calls(metadata[CALLS_KEY], f"{source} (its torch_nsight.calls metadata)")
    meta = field(header, "meta", dict, where, default={})
    try:
        return kernels, calls, ProfileMeta.from_dict(meta, version=version)
    except (TypeError, ValueError, AttributeError) as err:  # fields of the wrong type
        raise ReportError(f"{where}: its 'meta' field does not hold a profile's metadata "
                          f"({err}); {DAMAGED}") from err


def _calls(stored: bytes, where: str) -> pd.DataFrame:
    """The calls table stored as JSON records in a saved profile's metadata."""
    records = loads_json(stored, where, "calls table")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ReportError(f"{where}: expected a list of call rows; {DAMAGED}")
    calls = pd.DataFrame.from_records(records)
    for column in _CALL_SHAPES:
        if column in calls and not all(_is_sequence(v, nested=True) for v in calls[column]):
            raise ReportError(f"{where}: column {column!r} holds values that are not lists "
                              f"of shapes; {DAMAGED}")
    _tuples(calls, _CALL_TUPLES, where)
    for column in _CALL_SHAPES:
        if column in calls:
            calls[column] = [tuple(tuple(s) for s in v or ()) for v in calls[column]]
    return calls


def _is_sequence(value: Any, *, nested: bool) -> bool:
    if value is None:
        return True
    if not isinstance(value, (list, tuple, np.ndarray)):
        return False
    return not nested or all(isinstance(v, (list, tuple, np.ndarray)) for v in value)


def read_timeline(path: str | os.PathLike[str]) -> pd.DataFrame | None:
    """The timeline table saved with a profile (see :func:`write_profile`), or None; rows
    holding a time that is not a finite number in range are left out, counted.

    Raises:
        ReportError: the stored table is not JSON rows.
    """
    import pyarrow.parquet as pq

    with open(path, "rb") as file:  # pyarrow opens no name that is not UTF-8
        stored = (pq.read_schema(file).metadata or {}).get(TIMELINE_KEY)
    if stored is None:
        return None
    where = f"{path} (its torch_nsight.timeline metadata)"
    records = loads_json(stored, where, "timeline table")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ReportError(f"{where}: expected a list of timeline rows; {DAMAGED}")
    from torch_nsight.report.trace_timeline import TIMELINE_TEXT, tidy_text

    def valid(row: dict[str, Any]) -> bool:
        return all(v is None or (number(v) if k != "run" else whole(v)) is not None
                   for k, v in row.items() if k not in TIMELINE_TEXT)

    kept = [r for r in records if valid(r)]
    left = LeftOut(where, "timeline rows")
    left.add("", "invalid numbers", len(records) - len(kept))
    left.warn()
    table = pd.DataFrame.from_records(kept)
    for column in table.columns.difference(TIMELINE_TEXT):
        table[column] = pd.to_numeric(table[column]).astype(
            "Int64" if column == "run" else "float64")

    return tidy_text(table)  # JSON turns an all-None column into NaN
