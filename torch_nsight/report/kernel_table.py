"""One report file -> one tidy table: a row per profiled kernel, a column per fact."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight.checks import say_left_out
from torch_nsight.files import path_text
from torch_nsight.metrics import METRIC_SETS, METRICS, OPTIONAL_KINDS
from torch_nsight.report import cache as report_cache
from torch_nsight.report import reader
from torch_nsight.report.read_worker import ReadReport, read_report_file

logger = logging.getLogger(__name__)

# Bump when the columns or their meaning change: older caches are then read again.
SCHEMA_VERSION = 7  # 7: achieved occupancy, scheduler warps and stall reasons (optional)

# Columns of the raw (report-stage) table, in order.
RAW_COLUMNS: tuple[str, ...] = (
    "source", "range_index", "kernel_index", "workload", "kernel", "kernel_full", "grid",
    "block", *(m.column for m in METRICS), "sol_bottleneck", "ncu_rules", "range_stack",
    "range_start_end", "range_other",
)
#: What each raw column holds, by the name of a kind of
#: :data:`~torch_nsight.report.cache.COLUMN_KINDS`: a cache whose Parquet types differ is
#: read again from its report.
RAW_KINDS: dict[str, str] = {
    **{c: "number" for c in RAW_COLUMNS}, "range_index": "integer", "kernel_index": "integer",
    **{c: "text" for c in ("source", "workload", "kernel", "kernel_full", "grid", "block",
                           "gpu", "sol_bottleneck", "ncu_rules")},
    **{c: "texts" for c in ("range_stack", "range_start_end", "range_other")}}
_PERCENT_COLUMNS = tuple(m.column for m in METRICS if m.kind == "percent")
_PEAK_COLUMNS = tuple(m.column for m in METRICS if m.kind == "peak")
#: The metrics a report is expected to hold: the optional ones (the focused pass's warp
#: states) are never listed as missing, and do not change which set a report was made with.
_EXPECTED = tuple(m for m in METRICS if m.kind not in OPTIONAL_KINDS)


def empty_raw_table() -> pd.DataFrame:
    """A raw kernel table with no rows."""
    return pd.DataFrame({c: pd.Series(dtype=object) for c in RAW_COLUMNS})


def records_to_frame(records: list[dict[str, Any]], source: str) -> pd.DataFrame:
    """Turn reader records into the raw kernel table.

    Args:
        records: one dict per kernel, as
            :func:`torch_nsight.report.kernel_record.read_action` makes.
        source: the report path, stored in the ``source`` column.

    Returns:
        A DataFrame with exactly :data:`RAW_COLUMNS`; metrics the report lacks are NaN.
    """
    frame = pd.DataFrame.from_records(records)
    frame["source"] = source
    for column in RAW_COLUMNS:
        if column not in frame:
            frame[column] = None
    numeric = [m.column for m in METRICS if m.column != "gpu"]
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce").astype("float64")
    return frame.loc[:, list(RAW_COLUMNS)]


def _metric_set(missing: set[str]) -> str:
    # the busy counters joined the fast set later: a fast report with or without them is fast
    names = {m.name for m in _EXPECTED if m.kind != "busy"}
    missing = missing & names
    for name in ("roofline", "lean", "fast", "duration"):
        if missing == names - set(METRIC_SETS[name].metrics):
            return name
    return "custom"


def describe(frame: pd.DataFrame, read: ReadReport) -> dict[str, Any]:
    """Return the metadata of one report: GPU, versions, metrics it lacks, NVTX presence,
    what a damaged report lost (what the cache keeps beside the table)."""
    missing = {m.name for m in _EXPECTED if frame[m.column].isna().all()}
    partial = sorted(m.name for m in _EXPECTED
                     if m.name not in missing and frame[m.column].isna().any())
    gpus = [g for g in pd.unique(frame["gpu"].dropna())]
    has_nvtx = bool((frame["range_stack"].map(len) + frame["range_start_end"].map(len)
                     + frame["range_other"].map(len)).gt(0).any())
    return {
        "gpu": gpus[0] if len(gpus) == 1 else gpus,
        "ncu_version": read.ncu_version,
        "reader_version": read.reader_version,
        "kernels": int(len(frame)),
        "ranges": read.ranges,
        "missing_metrics": sorted(missing),
        "partial_metrics": partial,
        "metric_set": _metric_set(missing),
        "nvtx": has_nvtx,
        "left_out": read.left_out,
    }


#: The types of a report's metadata (:func:`describe`), by key: a cache whose metadata holds
#: others (a forged one) is read again from its report.
_META_TYPES: dict[str, tuple[type, ...]] = {
    "gpu": (str, list, type(None)), "ncu_version": (str, type(None)),
    "reader_version": (str, type(None)), "kernels": (int,), "ranges": (int,),
    "missing_metrics": (list,), "partial_metrics": (list,), "metric_set": (str, type(None)),
    "nvtx": (bool,), "left_out": (str, type(None))}


def meta_fits(meta: dict[str, Any]) -> bool:
    """Whether ``meta`` has every key of :func:`describe` with its type, and names (GPUs,
    metrics) as text."""
    if set(meta) != set(_META_TYPES) or not all(
            isinstance(meta[key], types) for key, types in _META_TYPES.items()):
        return False
    names = [*meta["missing_metrics"], *meta["partial_metrics"],
             *(meta["gpu"] if isinstance(meta["gpu"], list) else [])]
    return all(isinstance(name, str) for name in names)


def read_report(path: str | os.PathLike[str], *, cache: bool = True,
                cache_dir: str | os.PathLike[str] | None = None,
                workers: int | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read one ``.ncu-rep`` / ``.ncu-rep.xz`` into its raw kernel table.

    Args:
        path: the report file.
        cache: read and write the report's cache (see :mod:`torch_nsight.report.cache`).
        cache_dir: where the cache lives (default: beside the report, or
            ``$TORCH_NSIGHT_CACHE_DIR``).
        workers: processes used to read it (see :func:`torch_nsight.report.reader.read_records`).

    Returns:
        (table, meta): the table has :data:`RAW_COLUMNS`, one row per profiled kernel in
        report order; meta is the report's metadata (see :func:`describe`).

    Raises:
        ReportError: the file is missing, not a report, or holds no kernel.
    """
    source = Path(path).resolve()
    named = Path(path).absolute()  # its cache goes in the folder read, not where a link leads
    if cache and source.is_file():
        cached = report_cache.read_cache(named, SCHEMA_VERSION, cache_dir, RAW_COLUMNS,
                                          RAW_KINDS)
        if cached is not None and not meta_fits(cached[1]):
            logger.info("the cache of %s holds metadata of other types; reading the report "
                        "again", source.name)
        elif cached is not None:
            frame, meta = cached
            frame["source"] = path_text(source)
            if meta.get("left_out"):  # the damage is said on every read, not only the first
                say_left_out(meta["left_out"], logger)
            return frame, meta
    with reader.local_report(source) as local:  # NVIDIA's reader in a recycled worker
        read = read_report_file(local, str(path), workers)
    frame = records_to_frame(read.records, path_text(source))
    meta = describe(frame, read)
    del read
    if meta["left_out"]:
        say_left_out(meta["left_out"], logger)
    if meta["missing_metrics"]:
        logger.info("%s lacks %d of the declared metrics (set: %s); their columns are NaN",
                    source.name, len(meta["missing_metrics"]), meta["metric_set"])
    if cache:
        report_cache.write_cache(named, frame, meta, SCHEMA_VERSION, cache_dir)
    return frame, meta
