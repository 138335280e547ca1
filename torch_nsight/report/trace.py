"""Chrome traces of PyTorch's profiler -> the raw kernel table and the timeline table.

PyTorch's profiler (Kineto, CUPTI underneath) records every GPU activity (``kernel``,
``gpu_memcpy``, ``gpu_memset``) with the correlation id of the CUDA call that launched it
(``cuda_runtime`` / ``cuda_driver``, on the launching thread), and the ``record_function``
ranges of :class:`~torch_nsight.capture.emitter.RecordFunctionEmitter` as
``user_annotation`` events on the thread that opened them. An activity's range stack is the
annotations open on its launching thread when the launch call started: backward kernels,
launched on autograd's thread, get the ``bwd:`` ranges opened there. The measured
iterations are the annotations named by
:func:`~torch_nsight.naming.format_measure_range`; an activity belongs to the one whose CPU
span holds its launch, whatever the thread.

The timeline table has one ``step`` row per measured iteration (its window runs from the
iteration's CPU start to the end of its last GPU activity) and one ``gap`` row per idle
interval of at least :data:`MIN_GAP_NS` inside a window, with what the launching thread was
doing then.
"""

from __future__ import annotations

import bisect
import gzip
import json
import logging
import lzma
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight import formats, naming
from torch_nsight.errors import ReportError
from torch_nsight.report.compiled import read_maps, resolve_compiled
from torch_nsight.report.names import format_dims
from torch_nsight.report.table import RAW_COLUMNS

logger = logging.getLogger(__name__)

#: Idle intervals shorter than this are not gaps (a launch's own latency is ~2-5 µs).
MIN_GAP_NS = 1000.0
GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
CPU_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
#: Columns a trace adds to the raw table.
TRACE_COLUMNS = ("kind", "start_ns", "stream", "device", "launch_ns", "launch_thread",
                 "bytes", "copy_kind", "pinned")
TIMELINE_COLUMNS = ("source", "variant", "shape", "run", "kind", "start_ns", "end_ns",
                    "cpu_ns", "busy_ns", "launches", "sync_ns", "bare_ns", "ranged_ns",
                    "bare_spread_pct", "cpu", "prev_module", "next_module")
_ENQUEUE = ("Launch", "Memcpy", "Memset")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::")
#: CUTLASS's generic kernels, which Nsight Compute names by their operator type.
_WRAPPERS = frozenset({"Kernel", "Kernel2"})
_SYNC = ("Synchronize",)


def function_name(kernel: str, *, for_filter: bool = False) -> str:
    """The short name Nsight Compute shows for a kernel named as the PyTorch profiler names
    it: ``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` ->
    ``vectorized_elementwise_kernel``; CUTLASS's ``cutlass::Kernel2<Op>`` -> ``Op``.

    Args:
        kernel: the demangled name.
        for_filter: the name ncu's ``-k`` matches instead (``--kernel-name-base function``):
            ``Kernel2`` for CUTLASS's.
    """
    text = _ANONYMOUS.sub("", kernel.strip())
    if text.startswith("void "):
        text = text[len("void "):]
    cut = min([i for i in (text.find("<"), text.find("(")) if i >= 0], default=len(text))
    name = text[:cut].rsplit("::", 1)[-1].strip()
    if name in _WRAPPERS and text[cut:cut + 1] == "<" and not for_filter:
        # ncu shows CUTLASS's generic kernels by their operator (but -k matches Kernel2)
        inner = re.split(r"[<>,(]", text[cut + 1:], maxsplit=1)[0]
        return inner.rsplit("::", 1)[-1].strip() or name
    return name


#: The context of a kernel replayed from a CUDA graph: module ranges are pushed while a
#: graph is captured, not when it replays, so only a compiled graph's own range (see
#: :mod:`torch_nsight.report.compiled`) gives such a kernel its module.
GRAPH_REPLAY = "CUDA graph replay"


def trace_opener(path: Path) -> Any:
    """The ``open`` for a trace file: gzip's, xz's or the plain one, by its suffix."""
    return {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)


def read_trace_file(path: Path) -> dict[str, Any]:
    """Read a Chrome trace (``.json``, ``.json.gz``, ``.json.xz``).

    Raises:
        ReportError: it is not a readable trace of PyTorch's profiler.
    """
    opener = trace_opener(path)
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise ReportError(f"{path} does not exist") from None
    except (OSError, EOFError, ValueError, lzma.LZMAError) as err:
        raise ReportError(f"{path} is not a readable Chrome trace ({err}): pass a trace "
                          "written by torch.profiler (export_chrome_trace)") from err
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise ReportError(f"{path} is JSON but not a Chrome trace (no traceEvents list): pass "
                          "a trace written by torch.profiler (export_chrome_trace)")
    return document


def _dims(value: Any) -> str | None:
    """``[256, 1, 1]`` -> ``"(256, 1, 1)"``, as the Nsight Compute reader writes dims."""
    return format_dims(*value) if isinstance(value, list) and len(value) == 3 else None


def _ns(event: Mapping[str, Any], key: str = "ts") -> float:
    return float(event.get(key) or 0.0) * 1000.0


def _copy_facts(name: str) -> tuple[str | None, bool | None]:
    """``Memcpy HtoD (Pageable -> Device)`` -> ("HtoD", False)."""
    parts = name.split()
    kind = parts[1] if len(parts) > 1 and parts[0] == "Memcpy" else None
    if "Pageable" in name:
        return kind, False
    if "Pinned" in name:
        return kind, True
    return kind, None


class _Intervals:
    """The CPU events of one thread, for "what was open at time t" queries.

    Events of one thread nest; each keeps its parent (the innermost event holding its
    start), so a query walks up from the last event started before ``t``: O(depth).
    """

    def __init__(self, events: list[tuple[float, float, str]]) -> None:
        self.events = sorted(events, key=lambda e: (e[0], -e[1]))
        self.starts = [e[0] for e in self.events]
        self.parents: list[int] = []
        open_: list[int] = []
        for index, (start, _, _) in enumerate(self.events):
            while open_ and self.events[open_[-1]][1] <= start:
                open_.pop()
            self.parents.append(open_[-1] if open_ else -1)
            open_.append(index)

    def open_at(self, t: float) -> list[str]:
        """Names of the events holding ``t`` (start <= t < end), outermost first."""
        index = bisect.bisect_right(self.starts, t) - 1
        while index >= 0 and self.events[index][1] <= t:
            index = self.parents[index]
        chain = []
        while index >= 0:
            chain.append(self.events[index][2])
            index = self.parents[index]
        return chain[::-1]


def _spread_pct(measured: Mapping[str, Any]) -> float | None:
    """How far apart the steps timed without the profiler were: (max - min) over their
    median, in percent; None where the manifest does not say."""
    try:
        low, high, median = (float(measured[k]) for k in ("bare_min_ns", "bare_max_ns",
                                                           "bare_ns"))
    except (KeyError, TypeError, ValueError):
        return None
    return 100.0 * (high - low) / median if median > 0 else None


def _by_thread(events: Iterable[Mapping[str, Any]]) -> dict[Any, _Intervals]:
    grouped: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
    for event in events:
        start = _ns(event)
        grouped[event.get("tid")].append((start, start + _ns(event, "dur"),
                                          str(event.get("name", ""))))
    return {tid: _Intervals(items) for tid, items in grouped.items()}


def parse_trace(document: Mapping[str, Any], source: str,
                steps: Mapping[str, Mapping[str, Any]] | None = None, *,
                measured_only: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    """Turn a trace into the raw kernel table and the timeline table.

    Args:
        document: the parsed Chrome trace.
        source: its path, for the ``source`` column.
        steps: per (variant, shape) label ``"variant|shape"``, step times measured outside
            the profiler (``bare_ns``, ``ranged_ns``), from the timeline manifest.
        measured_only: keep only the GPU activity launched inside a measured iteration
            (what :func:`torch_nsight.timeline` records; warm-ups are left out).

    Returns:
        (kernels, timeline, gpu name): the raw table (:data:`RAW_COLUMNS` and
        :data:`TRACE_COLUMNS`, one row per GPU activity, in start order) and the timeline
        table (:data:`TIMELINE_COLUMNS`); times in ns from the trace's first event.
    """
    events = [e for e in document["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in events
             if e.get("cat") in CALL_CATEGORIES and "correlation" in (e.get("args") or {})}
    annotations = [e for e in events if e.get("cat") == "user_annotation"]
    # the fast path of record_function files its ranges as cpu_op events
    ours = [e for e in events if e.get("cat") in ("user_annotation", "cpu_op")
            and str(e.get("name", "")).startswith(naming.RECORD_PREFIX)]
    maps = read_maps([e["name"][len(naming.RECORD_PREFIX):] for e in ours if e["name"].startswith(
        naming.RECORD_PREFIX + formats.COMPILED_MAP_PREFIX)], source)
    ours = [e for e in ours
            if not e["name"].startswith(naming.RECORD_PREFIX + formats.COMPILED_MAP_PREFIX)]
    labels = []
    for event in ours:
        message = event["name"][len(naming.RECORD_PREFIX):]
        if naming.parse_measure_range(message):
            labels.append((_ns(event), _ns(event) + _ns(event, "dur"), message, event))
    labels.sort()
    label_starts = [label[0] for label in labels]
    stacks = _by_thread(e for e in ours
                        if not naming.parse_measure_range(e["name"][len(naming.RECORD_PREFIX):]))
    others = _by_thread(e for e in annotations
                        if not str(e.get("name", "")).startswith(naming.RECORD_PREFIX))

    def label_at(t: float) -> tuple[float, float, str, Any] | None:
        index = bisect.bisect_right(label_starts, t) - 1
        if index >= 0 and labels[index][1] > t:
            return labels[index]
        return None

    gpus = {int(p.get("id", i)): str(p.get("name")) for i, p in
            enumerate(document.get("deviceProperties") or []) if isinstance(p, dict)}
    rows = []
    for event in events:
        kind = GPU_CATEGORIES.get(event.get("cat", ""))
        if kind is None:
            continue
        args = event.get("args") or {}
        call = calls.get(args.get("correlation"))
        launch = _ns(call) if call is not None else float("nan")
        thread = call.get("tid") if call is not None else None
        stack = (tuple(m[len(naming.RECORD_PREFIX):] for m in stacks[thread].open_at(launch))
                 if call is not None and thread in stacks else ())
        other = (tuple(others[thread].open_at(launch))
                 if call is not None and thread in others else ())
        if call is not None and call.get("name") == "cudaGraphLaunch":
            other = (*other, GRAPH_REPLAY)  # said in the context, never silently outside
        label = label_at(launch) if call is not None else None
        if measured_only and label is None:
            continue
        name = str(event.get("name", ""))
        copy_kind, pinned = _copy_facts(name) if kind == "memcpy" else (None, None)
        device = int(args.get("device", 0) or 0)
        grid, block = args.get("grid"), args.get("block")
        rows.append({
            "source": source, "kernel": function_name(name) if kind == "kernel" else name,
            "kernel_full": name,
            "grid": _dims(grid), "block": _dims(block),
            "duration_ns": _ns(event, "dur"), "gpu": gpus.get(device),
            "range_stack": stack, "range_start_end": (label[2],) if label else (),
            "range_other": other, "kind": kind, "start_ns": _ns(event),
            "stream": int(args.get("stream", -1) if args.get("stream") is not None else -1),
            "device": device, "launch_ns": launch,
            "launch_thread": int(thread) if isinstance(thread, int) else -1,
            "bytes": float(args["bytes"]) if "bytes" in args else float("nan"),
            "copy_kind": copy_kind, "pinned": pinned,
            "registers_per_thread": args.get("registers per thread"),
        })
    frame = pd.DataFrame.from_records(rows, columns=list(dict.fromkeys(
        [*RAW_COLUMNS, *TRACE_COLUMNS])))
    frame = frame.sort_values("start_ns", kind="stable").reset_index(drop=True)
    frame["range_index"] = 0
    frame["kernel_index"] = np.arange(len(frame))
    for column in ("range_stack", "range_start_end", "range_other"):
        frame[column] = [v if isinstance(v, tuple) else () for v in frame[column]]
    numeric = [c for c in frame.columns if c not in (
        "source", "kernel", "kernel_full", "grid", "block", "gpu", "range_stack",
        "range_start_end", "range_other", "kind", "copy_kind", "pinned", "workload",
        "sol_bottleneck")]
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce").astype("float64")
    frame = resolve_compiled(frame, maps)
    timeline = _timeline(frame, labels, events, calls, source, steps or {})
    origin = min((_ns(e) for e in events), default=0.0)  # times from the trace's start
    for column in ("start_ns", "launch_ns"):
        frame[column] = frame[column] - origin
    for column in ("start_ns", "end_ns"):
        timeline[column] = timeline[column] - origin
    gpu = next(iter(dict.fromkeys(frame["gpu"].dropna())), None)
    return frame, timeline, gpu


def _module_of(stack: tuple[str, ...]) -> str | None:
    for message in reversed(stack):
        parsed = naming.parse_message(message)
        if parsed.kind == "module":
            return parsed.name
    return None


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _timeline(frame: pd.DataFrame, labels: list[tuple[float, float, str, Any]],
              events: list[dict[str, Any]], calls: Mapping[Any, dict[str, Any]], source: str,
              steps: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Step and gap rows of every measured iteration."""
    # what the CPU was doing: its ops and calls, never this library's own ranges
    cpu_events = _by_thread(e for e in events
                            if e.get("cat") in (*CPU_CATEGORIES, *CALL_CATEGORIES)
                            and not str(e.get("name", "")).startswith(naming.RECORD_PREFIX))
    call_list = sorted((_ns(c), _ns(c) + _ns(c, "dur"), str(c.get("name", "")))
                       for c in calls.values())
    call_starts = [c[0] for c in call_list]
    rows: list[dict[str, Any]] = []
    for cpu_start, cpu_end, message, _ in labels:
        label = naming.parse_measure_range(message) or {}
        variant, shape = label.get("variant") or None, label.get("shape") or None
        run = int(label.get("run", 0))
        mine = frame.loc[frame["range_start_end"].map(lambda r, m=message: m in r)
                         .astype(bool)]
        spans = list(zip(mine["start_ns"], mine["start_ns"] + mine["duration_ns"],
                         strict=True))
        end = max([cpu_end, *(e for _, e in spans)])
        busy = _union([(max(s, cpu_start), min(e, end)) for s, e in spans])
        inside = call_list[bisect.bisect_left(call_starts, cpu_start):
                           bisect.bisect_left(call_starts, cpu_end)]
        measured = steps.get(f"{variant or ''}|{shape or ''}", {})
        rows.append({
            "source": source, "variant": variant, "shape": shape, "run": run, "kind": "step",
            "start_ns": cpu_start, "end_ns": end, "cpu_ns": cpu_end - cpu_start,
            "busy_ns": sum(e - s for s, e in busy),
            "launches": sum(1 for _, _, n in inside if any(w in n for w in _ENQUEUE)),
            "sync_ns": sum(e - s for s, e, n in inside
                           if any(w in n for w in _SYNC) or n == "cudaMemcpy"),
            "bare_ns": measured.get("bare_ns"), "ranged_ns": measured.get("ranged_ns"),
            "bare_spread_pct": _spread_pct(measured)})
        order = mine.sort_values("start_ns")
        activity = list(zip(order["start_ns"], order["start_ns"] + order["duration_ns"],
                            order["range_stack"], order["launch_thread"], strict=True))
        cursor, previous = cpu_start, None
        for start, stop, stack, thread in activity:
            if start - cursor >= MIN_GAP_NS:
                rows.append(_gap(source, variant, shape, run, cursor, start, previous,
                                 _module_of(stack), cpu_events.get(thread)))
            if stop > cursor:
                cursor, previous = stop, _module_of(stack)
        if end - cursor >= MIN_GAP_NS:
            rows.append(_gap(source, variant, shape, run, cursor, end, previous, None, None))
    table = pd.DataFrame.from_records(rows, columns=list(TIMELINE_COLUMNS))
    for column in ("start_ns", "end_ns", "cpu_ns", "busy_ns", "launches", "sync_ns",
                   "bare_ns", "ranged_ns", "bare_spread_pct"):
        table[column] = pd.to_numeric(table[column], errors="coerce").astype("float64")
    table["run"] = table["run"].astype("Int64")
    return tidy_text(table)


#: The text columns of the timeline table (None where a row has no value).
TIMELINE_TEXT = ("source", "variant", "shape", "kind", "cpu", "prev_module", "next_module")


def tidy_text(table: pd.DataFrame) -> pd.DataFrame:
    """Text columns of a timeline table as object columns with None for "no value" (NaN
    after a JSON round trip or a missing key)."""
    for column in TIMELINE_TEXT:
        if column in table:
            table[column] = pd.Series([v if isinstance(v, str) else None
                                       for v in table[column]], index=table.index, dtype=object)
    return table


def _gap(source: str, variant: str | None, shape: str | None, run: int, start: float,
         end: float, previous: str | None, following: str | None,
         cpu: _Intervals | None) -> dict[str, Any]:
    doing = cpu.open_at((start + end) / 2) if cpu is not None else []
    return {"source": source, "variant": variant, "shape": shape, "run": run, "kind": "gap",
            "start_ns": start, "end_ns": end,
            "cpu": doing[-1].removeprefix(naming.RECORD_PREFIX) if doing else "",
            "prev_module": previous, "next_module": following}
