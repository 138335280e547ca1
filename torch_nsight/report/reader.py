"""Open ``.ncu-rep`` files with NVIDIA's ``ncu_report`` and pull one flat record per kernel.

Only the metrics declared in :mod:`torch_nsight.metrics` are read, each by name
(``metric_by_name``), never by walking ``metric_names()``: opening a kernel's record is the
expensive part and the per-kernel work must stay small. Large reports are read by several
processes at once, each opening the report itself. No pandas here: records are plain dicts.
"""

from __future__ import annotations

import contextlib
import logging
import lzma
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch_nsight import naming
from torch_nsight.errors import ReportError
from torch_nsight.metrics import METRICS
from torch_nsight.report.names import format_dims, short_kernel_name

logger = logging.getLogger(__name__)

SOL_RULE = "SOLBottleneck"
# Reports this large are read by short-lived worker processes (see read_records).
IN_PROCESS_MAX_KERNELS = 200
CHUNK_KERNELS = 1000

_STRING_COLUMNS = frozenset({"gpu"})
_NUMERIC = tuple((m.name, m.column) for m in METRICS
                 if m.column not in _STRING_COLUMNS and m.column != "duration_ns")
_STRINGS = tuple((m.name, m.column) for m in METRICS if m.column in _STRING_COLUMNS)
_DURATION = next(m.name for m in METRICS if m.column == "duration_ns")
_TIME_UNITS_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6,
                  "msecond": 1e6, "s": 1e9, "second": 1e9}

# When a counter is missing, the rate that Nsight Compute's own roofline-chart sections store
# gives it back: count = rate (per cycle) x cycles per second x duration, or per second x
# duration. Column -> (rate metric, clock metric or None).
_SASS_RATE = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum.per_cycle_elapsed"
_SMSP_CLOCK = "smsp__cycles_elapsed.avg.per_second"
FALLBACKS: dict[str, tuple[str, str | None]] = {
    **{f"{op}_inst": (_SASS_RATE.format(op), _SMSP_CLOCK)
       for op in ("fadd", "fmul", "ffma", "dadd", "dmul", "dfma", "hadd", "hmul", "hfma")},
    "dram_bytes": ("dram__bytes.sum.per_second", None),
}

_WORKLOADS: dict[int, str] = {}
_VERSION_RE = re.compile(rb"(\d{4}\.\d+\.\d+)(?:\.\d+)? \(build \d+\)")
_VERSION_SCAN_BYTES = 4 << 20


def _import_reader() -> Any:
    try:
        import ncu_report
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ReportError(
            "the Nsight Compute report reader is not installed: pip install ncu-report"
        ) from err
    if not _WORKLOADS:
        action = ncu_report.IAction
        for label in ("KERNEL", "GRAPH", "RANGE", "CMDLIST", "SUBGRID_SCHEDULE"):
            value = getattr(action, f"WorkloadType_{label}", None)
            if value is not None:
                _WORKLOADS[int(value)] = label.lower()
    return ncu_report


@contextlib.contextmanager
def local_report(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a readable ``.ncu-rep`` path for ``path``, decompressing ``.xz`` to a temp file.

    Args:
        path: a ``.ncu-rep`` or ``.ncu-rep.xz`` file.

    Yields:
        The path to hand to ``ncu_report.load_report``; a temporary file is removed after.

    Raises:
        ReportError: the file does not exist or is not valid xz.
    """
    source = Path(path)
    if not source.is_file():
        raise ReportError(f"report {source} does not exist: pass the path of a file "
                          "written by `ncu -o` (a .ncu-rep or .ncu-rep.xz)")
    if source.suffix != ".xz":
        yield source
        return
    handle, name = tempfile.mkstemp(suffix=".ncu-rep", prefix="torch_nsight-")
    try:
        with os.fdopen(handle, "wb") as out, lzma.open(source) as compressed:
            shutil.copyfileobj(compressed, out, length=1 << 20)
    except (lzma.LZMAError, EOFError) as err:
        os.unlink(name)
        raise ReportError(f"{source} is not a valid xz file ({err}): decompress it with "
                          "`xz -d` to check, or pass the uncompressed .ncu-rep") from err
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def open_context(local: Path, shown: str | os.PathLike[str]) -> Any:
    """Load a report with ``ncu_report`` and check that it holds kernels.

    Args:
        local: the uncompressed report on disk.
        shown: the path to name in error messages (the user's path).

    Returns:
        The ``ncu_report`` context.

    Raises:
        ReportError: the reader cannot open it, or it holds no profiled kernel.
    """
    ncu_report = _import_reader()
    try:
        context = ncu_report.load_report(str(local))
    except Exception as err:  # the reader raises assorted types for unreadable files
        raise ReportError(f"Nsight Compute's reader could not open {shown}: {err}") from err
    if context.num_ranges() == 0:
        raise ReportError(f"{shown} is not an Nsight Compute report (the reader found no "
                          "ranges in it): pass a file written by `ncu -o NAME`")
    if sum(context.range_by_idx(i).num_actions() for i in range(context.num_ranges())) == 0:
        raise ReportError(f"{shown} holds no profiled kernel: check the ncu log for "
                          "'No kernels were profiled' and the --nvtx-include filter")
    return context


def writer_version(local: Path) -> str | None:
    """Return the Nsight Compute version that wrote the report (from its header), if found."""
    with open(local, "rb") as handle:
        match = _VERSION_RE.search(handle.read(_VERSION_SCAN_BYTES))
    return match.group(1).decode() if match else None


def _value(metric: Any) -> float | None:
    return None if metric is None else metric.as_double()


def _nvtx(action: Any) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Return (torch_nsight push/pop stack, torch_nsight start/end ranges, other ranges)."""
    state = action.nvtx_state()
    stack: tuple[str, ...] = ()
    start_end: tuple[str, ...] = ()
    other: list[str] = []
    if state is None:
        return stack, start_end, ()
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        push_pop = tuple(domain.push_pop_ranges())
        ranges = tuple(domain.start_end_ranges())
        if domain.name() == naming.DOMAIN:
            stack, start_end = push_pop, ranges
        else:
            other.extend(ranges)
            other.extend(push_pop)
    return stack, start_end, tuple(other)


def _sol_title(action: Any) -> str | None:
    for result in action.rule_results():
        if result.rule_identifier() == SOL_RULE and result.has_rule_message():
            message = result.rule_message()
            return message.get("title") or None
    return None


def read_action(action: Any, range_index: int, kernel_index: int) -> dict[str, Any]:
    """Return the flat record of one profiled kernel.

    Args:
        action: an ``ncu_report`` IAction.
        range_index: its range's index in the report.
        kernel_index: its index within that range.

    Returns:
        A dict: position, names, launch shape, one entry per declared metric column (None
        when the report lacks it), the SOLBottleneck rule's title and the NVTX ranges.
    """
    ncu_report = _import_reader()
    full = action.name(ncu_report.IAction.NameBase_DEMANGLED)
    record: dict[str, Any] = {
        "range_index": range_index,
        "kernel_index": kernel_index,
        "workload": _WORKLOADS.get(int(action.workload_type()), "other"),
        "kernel": short_kernel_name(full),
        "kernel_full": full,
    }
    duration = action.metric_by_name(_DURATION)
    record["duration_ns"] = None if duration is None else (
        duration.as_double() * _TIME_UNITS_NS.get(duration.unit(), 1.0))
    for name, column in _NUMERIC:
        record[column] = _value(action.metric_by_name(name))
    for name, column in _STRINGS:
        metric = action.metric_by_name(name)
        record[column] = None if metric is None else metric.as_string()
    seconds = (record["duration_ns"] or 0.0) * 1e-9
    for column, (rate_name, clock_name) in FALLBACKS.items():
        if record.get(column) is not None or not seconds:
            continue
        rate = _value(action.metric_by_name(rate_name))
        clock = 1.0 if clock_name is None else _value(action.metric_by_name(clock_name))
        if rate is not None and clock is not None:
            record[column] = float(round(rate * clock * seconds))
    record["grid"] = format_dims(record.get("grid_x"), record.get("grid_y"), record.get("grid_z"))
    record["block"] = format_dims(record.get("block_x"), record.get("block_y"),
                                  record.get("block_z"))
    record["sol_bottleneck"] = _sol_title(action)
    record["nvtx_stack"], record["nvtx_start_end"], record["nvtx_other"] = _nvtx(action)
    return record


def _positions(context: Any) -> list[tuple[int, int]]:
    return [(r, a) for r in range(context.num_ranges())
            for a in range(context.range_by_idx(r).num_actions())]


def read_slice(local: str, start: int, stop: int) -> list[dict[str, Any]]:
    """Open ``local`` and return the records of kernels ``start:stop`` (a worker's share)."""
    context = open_context(Path(local), local)
    positions = _positions(context)[start:stop]
    return [read_action(context.range_by_idx(r).action_by_idx(a), r, a) for r, a in positions]


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _fork_context() -> multiprocessing.context.BaseContext | None:
    if sys.platform != "linux":
        return None
    return multiprocessing.get_context("fork")


def read_records(context: Any, local: Path, *, workers: int | None = None) -> list[dict[str, Any]]:
    """Return one record per kernel of an open report, in report order.

    ``ncu_report`` keeps the memory of every kernel record it opens until the process ends
    (about 0.4-0.6 MB per kernel with the SpeedOfLight section). Reports of
    :data:`IN_PROCESS_MAX_KERNELS` kernels or more are therefore read by short-lived worker
    processes, :data:`CHUNK_KERNELS` kernels each, which also spreads the work over the CPUs.

    Args:
        context: the report opened by :func:`open_context`.
        local: its uncompressed path (worker processes open it again).
        workers: processes to use at once; default one per usable CPU. 0 reads in this
            process whatever the size.

    Returns:
        The records, as :func:`read_action` makes them.
    """
    positions = _positions(context)
    fork = _fork_context()
    if workers == 0 or fork is None or len(positions) < IN_PROCESS_MAX_KERNELS:
        return [read_action(context.range_by_idx(r).action_by_idx(a), r, a)
                for r, a in positions]
    workers = max(1, workers or _usable_cpus())
    chunks = [(str(local), start, min(start + CHUNK_KERNELS, len(positions)))
              for start in range(0, len(positions), CHUNK_KERNELS)]
    logger.debug("reading %d kernels of %s in %d chunks, %d processes at once",
                  len(positions), local, len(chunks), workers)
    with warnings.catch_warnings():
        # pandas' import leaves allocator threads behind; the children touch only ncu_report.
        warnings.filterwarnings("ignore", message=r".*multi-threaded.*fork",
                                category=DeprecationWarning)
        with fork.Pool(min(workers, len(chunks)), maxtasksperchild=1) as pool:
            parts = pool.starmap(read_slice, chunks, chunksize=1)
    return [record for part in parts for record in part]
