"""Chrome traces of PyTorch's profiler -> the raw kernel table and the timeline table.

PyTorch's profiler (Kineto, CUPTI underneath) records every GPU activity (``kernel``,
``gpu_memcpy``, ``gpu_memset``) with the correlation id of the CUDA call that launched it
(``cuda_runtime`` / ``cuda_driver``, on the launching thread), and the ``record_function``
ranges of :class:`~torch_nsight.capture.ranges.emitter.RecordFunctionEmitter` as
``user_annotation`` events on the thread that opened them. An activity's range stack is the
annotations open on its launching thread when the launch call started: backward kernels,
launched on autograd's thread, get the ``bwd:`` ranges opened there. The measured
iterations are the annotations named by
:func:`~torch_nsight.naming.format_measure_range`; an activity belongs to the one whose CPU
span holds its launch, whatever the thread.

The timeline table (:mod:`torch_nsight.report.trace_timeline`) has one ``step`` row per
measured iteration and one ``gap`` row per idle interval inside it.
"""

from __future__ import annotations

import bisect
import logging
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight import naming
from torch_nsight.files import path_text
from torch_nsight.report.compiled_attribution import read_maps, resolve_compiled
from torch_nsight.report.kernel_table import RAW_COLUMNS
from torch_nsight.report.launch_ops import launch_message
from torch_nsight.report.names import format_dims
from torch_nsight.report.trace_events import (
    Activity,
    Call,
    Span,
    TraceEvents,
    collector_paused,
    is_compiled_map,
    read_trace,
)
from torch_nsight.report.trace_timeline import (
    Intervals,
    LazyThreads,
    timeline_table,
)

logger = logging.getLogger(__name__)

#: Columns a trace adds to the raw table.
TRACE_COLUMNS = ("kind", "start_ns", "stream", "device", "launch_ns", "launch_thread",
                 "bytes", "copy_kind", "pinned")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|<unnamed>::")  # the profiler's, ncu's
#: CUTLASS's generic kernels, which Nsight Compute names by their operator type.
_WRAPPERS = frozenset({"Kernel", "Kernel2"})


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
#: :mod:`torch_nsight.report.compiled_attribution`) gives such a kernel its module.
GRAPH_REPLAY = "CUDA graph replay"


def _dims(value: tuple[int, int, int] | None) -> str | None:
    """``(256, 1, 1)`` -> ``"(256, 1, 1)"``, as the Nsight Compute reader writes dims."""
    return format_dims(*value) if value is not None else None


def _copy_facts(name: str) -> tuple[str | None, bool | None]:
    """``Memcpy HtoD (Pageable -> Device)`` -> ("HtoD", False)."""
    parts = name.split()
    kind = parts[1] if len(parts) > 1 and parts[0] == "Memcpy" else None
    if "Pageable" in name:
        return kind, False
    if "Pinned" in name:
        return kind, True
    return kind, None


def _by_thread(spans: Mapping[Any, list[Span]]) -> dict[Any, Intervals]:
    return {tid: Intervals(items) for tid, items in spans.items()}


class _OpenAtLaunch:
    """What was open on a launch call's thread when it started: torch_nsight's ranges, and
    where none was, the range of the PyTorch call that launched it
    (:mod:`~torch_nsight.report.launch_ops`); the other annotations."""

    def __init__(self, ranges: Mapping[Any, list[Span]], annotations: Mapping[Any, list[Span]],
                 ops: Mapping[Any, list[Span]]) -> None:
        self.stacks, self.others = _by_thread(ranges), _by_thread(annotations)
        self.ops = LazyThreads(ops)  # asked only for activities outside every range
        # the answer for what was open (thread, range, annotation, graph replay), where the
        # ranges name what launched: thousands of launches share one, and its tuples
        self.named: dict[tuple[Any, int, int, bool],
                         tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def at(self, call: Call) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(range stack, other annotations) of an activity launched by ``call``."""
        thread, launch = call.tid, call.start
        stacks, others = self.stacks.get(thread), self.others.get(thread)
        ranged = -1 if stacks is None else stacks.index_at(launch)
        annotated = -1 if others is None else others.index_at(launch)
        key = (thread, ranged, annotated, call.name == "cudaGraphLaunch")
        if key in self.named:
            return self.named[key]
        cut = len(naming.RECORD_PREFIX)
        stack = tuple([m[cut:] for m in stacks.open_from(ranged)]) if stacks is not None \
            else ()
        other = tuple(others.open_from(annotated)) if others is not None else ()
        named = _names_kernel(stack)
        if not named:
            launched_in = self.ops.get(thread)
            launcher = launch_message(other, launched_in.open_at(launch)
                                      if launched_in is not None else ())
            if launcher is not None:
                stack = (*stack, launcher)
        if call.name == "cudaGraphLaunch":
            other = (*other, GRAPH_REPLAY)  # said in the context, never silently outside
        if named:  # else the answer depends on the op open too
            self.named[key] = (stack, other)
        return stack, other


def trace_tables(path: Path, steps: Mapping[str, Mapping[str, Any]] | None = None, *,
                 measured_only: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    """:func:`parse_trace` of :func:`~torch_nsight.report.trace_events.read_trace` of
    ``path`` (its resolved path the ``source``), the collector paused over both: the events
    are dropped before it runs again, so it never walks them."""
    with collector_paused():
        return parse_trace(read_trace(path), path_text(path.resolve()), steps,
                           measured_only=measured_only)


def parse_trace(events: TraceEvents, source: str,
                steps: Mapping[str, Mapping[str, Any]] | None = None, *,
                measured_only: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    """Turn a trace's events into the raw kernel table and the timeline table.

    Args:
        events: the trace's checked events (:func:`~torch_nsight.report.trace_events.read_trace`).
        source: its path, for the ``source`` column.
        steps: per (variant, shape) label ``"variant|shape"``, step times measured outside
            the profiler (``bare_ns``, ``ranged_ns``), from the timeline manifest.
        measured_only: keep only the GPU activity launched inside a measured iteration
            (what :func:`torch_nsight.timeline` records; warm-ups are left out).

    Returns:
        (kernels, timeline, gpu name): the raw table (:data:`RAW_COLUMNS` and
        :data:`TRACE_COLUMNS`, one row per GPU activity, in start order) and the timeline
        table (:data:`~torch_nsight.report.trace_timeline.TIMELINE_COLUMNS`); times in ns,
        counted from the trace's first event.
    """
    with collector_paused():  # the events and the rows hold no cycles
        return _parse(events, source, steps or {}, measured_only)


def _parse(events: TraceEvents, source: str, steps: Mapping[str, Mapping[str, Any]],
           measured_only: bool) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    cut = len(naming.RECORD_PREFIX)
    calls = events.calls
    maps = read_maps([name[cut:] for (_, _, name), _ in events.ranges
                      if is_compiled_map(name)], source)
    labels: list[tuple[float, float, str]] = []
    ranges: dict[Any, list[Span]] = defaultdict(list)
    for span, tid in events.ranges:
        start, end, name = span
        message = name[cut:]
        # only a message that starts so can be a measured iteration's (most are modules')
        if message.startswith(naming.MEASURE_PREFIX) and naming.parse_measure_range(message):
            labels.append((start, end, message))
        elif not is_compiled_map(name):
            ranges[tid].append(span)
    labels.sort()
    label_starts = [label[0] for label in labels]
    opened = _OpenAtLaunch(ranges, events.annotations, events.ops)

    def label_at(t: float) -> tuple[float, float, str] | None:
        index = bisect.bisect_right(label_starts, t) - 1
        if index >= 0 and labels[index][1] > t:
            return labels[index]
        return None

    # what each launch call had open, and its measured iteration: the only per-launch work
    # (the activities' own fields go to the table a column at a time)
    activities = events.activities
    opened_at: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    launched: list[Call | None] = []
    in_label: list[tuple[str, ...]] = []
    kept: list[int] = []
    nowhere: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    for position, activity in enumerate(activities):
        call = calls.get(activity.correlation)  # type: ignore[arg-type]
        if call is None:
            label = None
            opened_at.append(nowhere)
        else:
            label = label_at(call.start)
            opened_at.append(opened.at(call))
        if measured_only and label is None:
            opened_at.pop()
            continue
        kept.append(position)
        launched.append(call)
        in_label.append((label[2],) if label else ())
    if len(kept) < len(activities):
        activities = [activities[i] for i in kept]
    frame = _kernel_frame(_columns(activities, launched, opened_at, in_label, events.gpus),
                          source)
    frame = resolve_compiled(frame, maps)
    timeline = timeline_table(frame, labels, events, source, steps)
    origin = events.origin  # times from the trace's start
    for column in ("start_ns", "launch_ns"):
        frame[column] = frame[column] - origin
    for column in ("start_ns", "end_ns"):
        timeline[column] = timeline[column] - origin
    gpus = frame["gpu"].dropna().unique()  # in the order first seen
    gpu = gpus[0] if len(gpus) else None
    return frame, timeline, gpu


def _columns(activities: list[Activity], launched: list[Call | None],
             opened_at: list[tuple[tuple[str, ...], tuple[str, ...]]],
             in_label: list[tuple[str, ...]], gpus: Mapping[int, str]) -> dict[str, list[Any]]:
    """The kernel table's columns, in file order: the activities' fields and what their
    launch calls had open. Kernels repeat: each distinct name and launch shape is worked
    out once."""
    fields = dict(zip(Activity._fields, map(list, zip(*activities, strict=True)),
                      strict=True)) if activities else {f: [] for f in Activity._fields}
    names, kinds = fields["name"], fields["kind"]
    short: dict[str, str] = {}
    dims: dict[tuple[int, int, int] | None, str | None] = {}
    copies: dict[str, tuple[str | None, bool | None]] = {}
    for name, kind in zip(names, kinds, strict=True):
        if kind == "kernel" and name not in short:
            short[name] = function_name(name)
        elif kind == "memcpy" and name not in copies:
            copies[name] = _copy_facts(name)
    for shape in (*dict.fromkeys(fields["grid"]), *dict.fromkeys(fields["block"])):
        if shape not in dims:
            dims[shape] = _dims(shape)
    copy_facts = [copies[n] if k == "memcpy" else (None, None)
                  for n, k in zip(names, kinds, strict=True)]
    return {
        "kernel": [short[n] if k == "kernel" else n for n, k in zip(names, kinds, strict=True)],
        "kernel_full": names, "grid": [dims[g] for g in fields["grid"]],
        "block": [dims[b] for b in fields["block"]], "duration_ns": fields["duration"],
        "gpu": [gpus.get(d) for d in fields["device"]],
        "range_stack": [o[0] for o in opened_at], "range_start_end": in_label,
        "range_other": [o[1] for o in opened_at], "kind": kinds, "start_ns": fields["start"],
        "stream": [-1 if v is None else v for v in fields["stream"]],
        "device": fields["device"],
        "launch_ns": [float("nan") if c is None else c.start for c in launched],
        "launch_thread": [c.tid if c is not None and isinstance(c.tid, int) else -1
                          for c in launched],
        "bytes": [float("nan") if v is None else v for v in fields["bytes"]],
        "copy_kind": [c[0] for c in copy_facts], "pinned": [c[1] for c in copy_facts],
        "registers_per_thread": fields["registers"]}


_FRAME_COLUMNS = list(dict.fromkeys([*RAW_COLUMNS, *TRACE_COLUMNS]))
_NOT_NUMERIC = frozenset({"source", "kernel", "kernel_full", "grid", "block", "gpu", "kind",
                          "range_stack", "range_start_end", "range_other", "copy_kind",
                          "pinned", "workload", "sol_bottleneck"})  # the rest is float64
_RANGES = ("range_stack", "range_start_end", "range_other")


def _kernel_frame(given: dict[str, list[Any]], source: str) -> pd.DataFrame:
    """The columns as a table of :data:`RAW_COLUMNS` and :data:`TRACE_COLUMNS` in start order
    (the columns they lack all NaN, numbers float64), each column built whole, in the order
    of a stable sort of the start times: one table, not the 100 blocks of columns added
    one by one (pandas then warns that the frame is fragmented).

    ======================  ====================================================
    given (file order)      the table (start order)
    ======================  ====================================================
    kernel, grid, ...       as given, text columns ``str`` (object where none is)
    duration_ns, start_ns   float64
    (a column not given)    NaN
    range_index             0.0
    kernel_index            0.0, 1.0, ... in start order
    ======================  ====================================================
    """
    size = len(given["start_ns"])
    order = np.argsort(np.array(given["start_ns"], dtype="float64"), kind="stable")
    columns: dict[str, Any] = {}
    nothing = np.full(size, np.nan)  # one array for every column none has (the constructor
    # copies each into the table's block of numbers)
    for column in _FRAME_COLUMNS:
        if column == "source":
            values: Any = [source] * size
        elif column in given:
            values = given[column]
            values = [values[i] for i in order] if column in _NOT_NUMERIC else \
                np.array(values, dtype="float64")[order] if size else np.empty(0)
        elif size:  # none of the rows has it
            columns[column] = nothing
            continue
        else:
            values = []
        if column in _RANGES:
            columns[column] = values
        elif column in _NOT_NUMERIC:
            columns[column] = pd.Series(values, dtype=None if size else object)
        else:
            columns[column] = values if size else np.empty(0)
    columns.update(range_index=np.zeros(size), kernel_index=np.arange(size, dtype="float64"))
    return pd.DataFrame(columns, index=pd.RangeIndex(size))


def _names_kernel(stack: tuple[str, ...]) -> bool:
    """Whether a range of ``stack`` names what launched a kernel (a module, op, step or
    compiled graph's range; not a warm-up's)."""
    return stack.count(naming.WARMUP_MESSAGE) < len(stack)  # a message other than it


