"""Open ``.ncu-rep`` files with NVIDIA's ``ncu_report`` and pull one flat record per kernel.

Only the metrics declared in :mod:`torch_nsight.metrics` are read, each by name
(``metric_by_name``), never by walking ``metric_names()``: opening a kernel's record is the
expensive part and the per-kernel work must stay small. Large reports are read by several
processes at once, each opening the report itself. No pandas here: records are plain dicts.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import lzma
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from torch_nsight import naming
from torch_nsight.errors import ReportError
from torch_nsight.files import free_space, is_full
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


def _bundled_with_ncu(origin: str | None) -> bool:
    """Whether a module file is the copy of the reader in an Nsight Compute install
    (``.../nsight-compute/<version>/extras/python``)."""
    if not origin:
        return False
    folder = Path(origin).parent
    return folder.name == "python" and folder.parent.name == "extras"


def _packaged_reader() -> Path | None:
    """The folder holding the ``ncu-report`` package from PyPI, when it is installed."""
    from importlib import metadata

    try:
        folder = Path(str(metadata.distribution("ncu-report").locate_file("")))
    except metadata.PackageNotFoundError:
        return None
    return folder if (folder / "ncu_report" / "__init__.py").is_file() else None


def _prefer_the_package() -> str | None:
    """Put the ``ncu-report`` package ahead of Nsight Compute's own copy of the reader.

    That copy (``extras/python``, on ``PYTHONPATH`` by hand) crashes the process (a
    segmentation fault in ``IMetric.unit()``) when numpy was imported before it, seen with
    ncu 2025.3.1 on the GPU machine, and torch_nsight always imports numpy first; the PyPI
    package, a dependency, does not.

    Returns:
        The folder put first on ``sys.path`` for the import (to take off again), or None.
    """
    import importlib.util

    if "ncu_report" in sys.modules:
        return None
    spec = importlib.util.find_spec("ncu_report")
    if spec is None or not _bundled_with_ncu(spec.origin):
        return None
    packaged = _packaged_reader()
    if packaged is None:
        logger.warning("the report reader comes from Nsight Compute's own copy (%s), which "
                       "crashes once numpy is loaded (ncu 2025.3.1): pip install ncu-report",
                       spec.origin)
        return None
    logger.info("reading reports with the ncu-report package in %s, not Nsight Compute's "
                "copy %s", packaged, spec.origin)
    sys.path.insert(0, str(packaged))
    return str(packaged)


@functools.cache  # once: read_action asks for it per kernel
def import_reader() -> Any:
    """Import ``ncu_report`` (the ``ncu-report`` package first, see
    :func:`_prefer_the_package`) and learn its workload types.

    Raises:
        ReportError: the reader is not installed.
    """
    first = _prefer_the_package()
    try:
        import ncu_report
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ReportError(
            "the Nsight Compute report reader is not installed: pip install ncu-report"
        ) from err
    finally:
        if first is not None and first in sys.path:  # the rest of the process as it was
            sys.path.remove(first)
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
    except BaseException as err:
        os.unlink(name)  # nothing left behind, whatever stopped it
        if isinstance(err, (lzma.LZMAError, EOFError)):
            raise ReportError(f"{source} is not a valid xz file ({err}): decompress it with "
                              "`xz -d` to check, or pass the uncompressed .ncu-rep") from err
        if isinstance(err, OSError) and is_full(err):
            folder = Path(name).parent
            raise ReportError(f"cannot decompress {source} into {folder}: {err.strerror} "
                              f"({free_space(folder)}): set TMPDIR to a folder with room, or "
                              "pass the uncompressed .ncu-rep") from err
        raise
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


#: The first bytes of every Nsight Compute report.
REPORT_MAGIC = b"NVR\0"


def _damaged(shown: str | os.PathLike[str], what: str) -> ReportError:
    return ReportError(f"{shown} is a damaged Nsight Compute report (cut short while ncu wrote "
                       f"it or while it was copied?): {what}; record it again or copy it again")


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
    ncu_report = import_reader()
    try:
        context = ncu_report.load_report(str(local))
    except Exception as err:  # the reader raises assorted types for unreadable files
        raise ReportError(f"Nsight Compute's reader could not open {shown}: {err}") from err
    if context.num_ranges() == 0:
        with open(local, "rb") as head:
            damaged = head.read(len(REPORT_MAGIC)) == REPORT_MAGIC
        if damaged:
            raise _damaged(shown, "the reader found no complete kernel in it")
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


def _nvtx(action: Any) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Return (torch_nsight push/pop stack, torch_nsight start/end ranges, other ranges)."""
    state = action.nvtx_state()
    stack: tuple[str, ...] = ()
    start_end: tuple[str, ...] = ()
    if state is None:
        return stack, start_end, ()
    other: list[str] = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        if domain.name() == naming.DOMAIN:
            stack, start_end = tuple(domain.push_pop_ranges()), tuple(domain.start_end_ranges())
        else:
            other.extend(domain.start_end_ranges())
            other.extend(domain.push_pop_ranges())
    return stack, start_end, tuple(other)


#: ncu_report's SpeedupType values: LOCAL estimates a part of the kernel (its hot spot),
#: GLOBAL the whole kernel's duration.
_SPEEDUP_TYPES = {1: "local", 2: "global"}


def plain_message(text: str) -> str:
    """A rule message without ncu's link markup: ``@section:Occupancy:Occupancy@`` ->
    ``Occupancy``, ``@url:the guide:https://...@`` -> ``the guide``."""
    def keep(match: re.Match[str]) -> str:
        parts = match.group(0).strip("@").split(":")
        return parts[2] if parts[0] == "section" and len(parts) > 2 else parts[1]

    return re.sub(r"@(?:section|url|sass|source):[^@]*@", keep, text).strip()


def _rules(action: Any) -> tuple[str | None, str | None]:
    """The SOLBottleneck rule's title, and the rules with a speedup estimate as JSON (rule,
    section, title, message, speedup type, estimated speedup in percent of the kernel's
    time), or None when there are none."""
    title = None
    rules = []
    for result in action.rule_results():
        identifier = result.rule_identifier()
        message = result.rule_message() if result.has_rule_message() else {}
        if identifier == SOL_RULE:
            title = message.get("title") or title
        if not result.has_speedup_estimation():
            continue
        estimate = result.speedup_estimation()
        speedup = float(estimate.get("speedup") or 0.0)
        if speedup <= 0:
            continue
        rules.append({"rule": identifier, "section": result.section_identifier(),
                      "title": message.get("title") or result.name(),
                      "message": plain_message(message.get("message") or ""),
                      "speedup_type": _SPEEDUP_TYPES.get(int(estimate.get("type") or 0),
                                                         "unknown"),
                      "speedup_pct": speedup})
    return title, (json.dumps(rules) if rules else None)


def read_action(action: Any, range_index: int, kernel_index: int) -> dict[str, Any] | None:
    """Return the flat record of one profiled kernel.

    Each declared metric is looked up once; a fallback rate only where its counter is missing.

    Args:
        action: an ``ncu_report`` IAction.
        range_index: its range's index in the report.
        kernel_index: its index within that range.

    Returns:
        A dict: position, names, launch shape, one entry per declared metric column (None
        when the report lacks it), the SOLBottleneck rule's title, the rules that estimate a
        speedup (``ncu_rules``, JSON) and the NVTX ranges; None for a record cut short.
    """
    metric_by_name = action.metric_by_name
    full = action.name(import_reader().IAction.NameBase_DEMANGLED)
    if full is None:  # a record cut short (the report was truncated): nothing to trust
        return None
    record: dict[str, Any] = {
        "range_index": range_index,
        "kernel_index": kernel_index,
        "workload": _WORKLOADS.get(int(action.workload_type()), "other"),
        "kernel": short_kernel_name(full),
        "kernel_full": full,
    }
    duration = metric_by_name(_DURATION)
    duration_ns = None if duration is None else (
        duration.as_double() * _TIME_UNITS_NS.get(duration.unit(), 1.0))
    record["duration_ns"] = duration_ns
    for name, column in _NUMERIC:
        metric = metric_by_name(name)
        record[column] = None if metric is None else metric.as_double()
    for name, column in _STRINGS:
        metric = metric_by_name(name)
        record[column] = None if metric is None else metric.as_string()
    if duration_ns:
        for column, (rate_name, clock_name) in FALLBACKS.items():
            if record[column] is None:
                record[column] = _rebuilt_count(metric_by_name, rate_name, clock_name,
                                                duration_ns * 1e-9)
    record["grid"] = format_dims(record["grid_x"], record["grid_y"], record["grid_z"])
    record["block"] = format_dims(record["block_x"], record["block_y"], record["block_z"])
    record["sol_bottleneck"], record["ncu_rules"] = _rules(action)
    record["range_stack"], record["range_start_end"], record["range_other"] = _nvtx(action)
    return record


def _rebuilt_count(metric_by_name: Any, rate_name: str, clock_name: str | None,
                   seconds: float) -> float | None:
    """A missing counter from its stored rate: rate x clock x duration (see FALLBACKS)."""
    rate = metric_by_name(rate_name)
    clock = None if clock_name is None else metric_by_name(clock_name)
    if rate is None or (clock_name is not None and clock is None):
        return None
    per_second = rate.as_double() * (1.0 if clock is None else clock.as_double())
    return float(round(per_second * seconds))


def _positions(context: Any) -> list[tuple[int, int]]:
    return [(r, a) for r in range(context.num_ranges())
            for a in range(context.range_by_idx(r).num_actions())]


def read_positions(context: Any, positions: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Return the records of the kernels at ``positions`` ((range, kernel) pairs) of a report."""
    ranges: dict[int, Any] = {}
    records = []
    for r, a in positions:
        if r not in ranges:
            ranges[r] = context.range_by_idx(r)
        record = read_action(ranges[r].action_by_idx(a), r, a)
        if record is not None:
            records.append(record)
    return records


def _read_chunk_into(context: Any, positions: list[tuple[int, int]], sender: Any) -> None:
    """A forked worker: read ``positions`` of the report inherited from its parent (never
    pickled) and send the records back."""
    try:
        sender.send(read_positions(context, positions))
    finally:
        sender.close()


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _fork_context() -> multiprocessing.context.ForkContext | None:
    if sys.platform != "linux":
        return None
    return multiprocessing.get_context("fork")


def read_records(context: Any, local: Path, *, workers: int | None = None) -> list[dict[str, Any]]:
    """Return one record per kernel of an open report, in report order.

    ``ncu_report`` keeps the memory of every kernel record it opens until the process ends
    (about 0.4-0.6 MB per kernel with the SpeedOfLight section). Reports of
    :data:`IN_PROCESS_MAX_KERNELS` kernels or more are therefore read by short-lived worker
    processes, :data:`CHUNK_KERNELS` kernels each, as many at once as there are usable CPUs.
    The workers are forked from this process and use the report it already opened and warmed
    up (the reader's first kernel costs about 60 ms), instead of opening it again each.

    Args:
        context: the report opened by :func:`open_context`.
        local: its uncompressed path (named in log messages).
        workers: processes to use at once; default one per usable CPU. 0 reads in this
            process whatever the size.

    Returns:
        The records, as :func:`read_action` makes them.
    """
    positions = _positions(context)
    if workers == 0 or _fork_context() is None or len(positions) < IN_PROCESS_MAX_KERNELS:
        records = read_positions(context, positions)
    else:
        logger.debug("reading the %d kernels of %s in worker processes", len(positions), local)
        records = read_in_workers(context, positions, workers or _usable_cpus())
    if positions and not records:
        raise _damaged(local.name, f"none of its {len(positions)} kernel records is complete")
    return records


def left_out(context: Any, records: list[dict[str, Any]], shown: str) -> str | None:
    """What a damaged report's reading left out, in one sentence naming ``shown`` (the file
    the user gave); None when every kernel record was complete."""
    total = len(_positions(context))
    if len(records) >= total:
        return None
    return (f"{shown} is damaged (cut short?): {total - len(records)} of its {total} kernel "
            "records are incomplete and left out")


def read_in_workers(context: Any, positions: list[tuple[int, int]],
                    workers: int) -> list[dict[str, Any]]:
    """Read the kernels at ``positions`` in forked worker processes, in order.

    Args:
        context: an open report (see :func:`read_records`).
        positions: (range, kernel) pairs to read.
        workers: processes to run at once (fewer when there are fewer chunks).

    Returns:
        The records, in the order of ``positions``; read in this process where ``fork``
        is not available.
    """
    fork = _fork_context()
    if fork is None or not positions:
        return read_positions(context, positions)
    chunks = [(start, min(start + CHUNK_KERNELS, len(positions)))
              for start in range(0, len(positions), CHUNK_KERNELS)]
    workers = max(1, min(workers, len(chunks)))
    logger.debug("reading %d kernels in %d chunks, %d processes at once",
                 len(positions), len(chunks), workers)
    first_range, first_kernel = positions[0]
    context.range_by_idx(first_range).action_by_idx(first_kernel)  # the reader's warm-up
    parts: dict[int, list[dict[str, Any]]] = {}
    pending = list(range(len(chunks)))
    running: dict[Any, tuple[int, Any]] = {}  # receiving end -> (chunk, process)
    crashed = False
    with warnings.catch_warnings():
        # pandas' import leaves allocator threads behind; the children touch only ncu_report.
        warnings.filterwarnings("ignore", message=r".*multi-threaded.*fork",
                                category=DeprecationWarning)
        while running or (pending and not crashed):
            while pending and len(running) < workers and not crashed:
                chunk = pending.pop(0)
                receiver, sender = fork.Pipe(duplex=False)
                start, stop = chunks[chunk]
                process = fork.Process(target=_read_chunk_into, daemon=True,
                                       args=(context, positions[start:stop], sender))
                process.start()
                sender.close()
                running[receiver] = (chunk, process)
            # wait() returns those of the receiving ends given it that are ready
            ready = multiprocessing.connection.wait(list(running))
            for receiver in cast("list[multiprocessing.connection.Connection]", ready):
                chunk, process = running.pop(receiver)
                try:
                    parts[chunk] = receiver.recv()
                except Exception:  # noqa: BLE001 - it died (the reader crashed in it)
                    crashed = True
                receiver.close()
                process.join()
                if chunk not in parts:
                    logger.warning("a process reading the report died (exit status %s); "
                                   "reading its kernels and the rest in this process",
                                   process.exitcode)
    for chunk in range(len(chunks)):
        if chunk not in parts:
            start, stop = chunks[chunk]
            parts[chunk] = read_positions(context, positions[start:stop])
    return [record for chunk in range(len(chunks)) for record in parts[chunk]]
