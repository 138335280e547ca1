"""The timeline table of a PyTorch-profiler trace: one ``step`` row per measured iteration
(its window runs from the iteration's CPU start to the end of its last GPU activity) and
one ``gap`` row per idle interval of at least :data:`MIN_GAP_NS` inside a window, with what
the launching thread was doing then (:func:`timeline_table`, called by
:func:`~torch_nsight.report.trace.parse_trace`); and the CPU events of a thread as
intervals, asked what was open at a time (:class:`Intervals`).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight import naming
from torch_nsight.checks import number
from torch_nsight.report.trace_events import Span, TraceEvents
from torch_nsight.vocabulary import outside_module

#: Idle intervals shorter than this are not gaps (a launch's own latency is ~2-5 µs).
MIN_GAP_NS = 1000.0
TIMELINE_COLUMNS = ("source", "variant", "shape", "run", "kind", "start_ns", "end_ns",
                    "cpu_ns", "busy_ns", "copy_busy_ns", "launches", "sync_ns", "bare_ns",
                    "ranged_ns", "bare_spread_pct", "cpu", "prev_module", "next_module")
_ENQUEUE = ("Launch", "Memcpy", "Memset")
_SYNC = ("Synchronize",)


class Intervals:
    """The CPU events of one thread, for "what was open at time t" queries.

    Events of one thread nest; each keeps its parent (the innermost event holding its
    start), so a query walks up from the last event started before ``t``: O(depth).
    """

    def __init__(self, events: Sequence[tuple[float, float, str]]) -> None:
        # by start, the longer first where two start together (two stable sorts: quicker
        # than one on a (start, -end) key)
        self.events = sorted(sorted(events, key=itemgetter(1), reverse=True),
                             key=itemgetter(0))
        self.starts = [e[0] for e in self.events]
        self.parents: list[int] = []
        open_: list[int] = []
        for index, (start, _, _) in enumerate(self.events):
            while open_ and self.events[open_[-1]][1] <= start:
                open_.pop()
            self.parents.append(open_[-1] if open_ else -1)
            open_.append(index)

    def index_at(self, t: float) -> int:
        """The number of the innermost event holding ``t`` (-1 for none): two times with
        the same number have the same events open."""
        index = bisect.bisect_right(self.starts, t) - 1
        while index >= 0 and self.events[index][1] <= t:
            index = self.parents[index]
        return index

    def innermost_at(self, t: float) -> str | None:
        """The name of the innermost event holding ``t``, or None."""
        index = self.index_at(t)
        return self.events[index][2] if index >= 0 else None

    def open_at(self, t: float) -> list[str]:
        """Names of the events holding ``t`` (start <= t < end), outermost first."""
        return self.open_from(self.index_at(t))

    def open_from(self, index: int) -> list[str]:
        """Names of the event numbered ``index`` (:meth:`index_at`) and of those holding
        it, outermost first."""
        chain = []
        while index >= 0:
            chain.append(self.events[index][2])
            index = self.parents[index]
        return chain[::-1]


class LazyThreads:
    """:class:`Intervals` of each thread, built when first asked for."""

    def __init__(self, spans: Mapping[Any, list[Span]]) -> None:
        self.spans = spans
        self.built: dict[Any, Intervals] = {}

    def get(self, tid: Any) -> Intervals | None:
        if tid not in self.built and tid in self.spans:
            self.built[tid] = Intervals(self.spans[tid])
        return self.built.get(tid)


def _spread_pct(measured: Mapping[str, Any]) -> float | None:
    """How far apart the steps timed without the profiler were: (max - min) over their
    median, in percent; None where the manifest does not say."""
    try:
        low, high, median = (float(measured[k]) for k in ("bare_min_ns", "bare_max_ns",
                                                           "bare_ns"))
    except (KeyError, TypeError, ValueError):
        return None
    # a manifest's damaged numbers give no spread, never inf or a negative one
    return number(100.0 * (high - low) / median) if median > 0 else None


def _module_of(stack: tuple[str, ...]) -> str | None:
    """The innermost module of ``stack``; else, outside every module, the row of its
    innermost op (``(outside) cross_entropy``), as the analysis names the kernel."""
    op = None
    for message in reversed(stack):
        parsed = naming.parse_message(message)
        if parsed.kind == "module":
            return parsed.name
        if parsed.kind == "op" and op is None:
            op = parsed.name
    return outside_module(op) if op is not None else None


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


class _Columns:
    """The timeline table's rows, kept a column at a time (a dict per gap row, 66,429 of
    them in a large trace, and ``from_records`` over them were a third of the reading)."""

    def __init__(self) -> None:
        self.values: dict[str, list[Any]] = {c: [] for c in TIMELINE_COLUMNS}

    def step(self, row: Mapping[str, Any]) -> None:
        for column, values in self.values.items():
            values.append(row.get(column))

    def gaps(self, fixed: Mapping[str, Any], starts: list[float], ends: list[float],
             varying: Mapping[str, list[Any]]) -> None:
        """Gap rows: ``fixed`` the same in each, ``varying`` (and the times) one a row."""
        count = len(starts)
        self.values["start_ns"].extend(starts)
        self.values["end_ns"].extend(ends)
        for column, values in self.values.items():
            if column in varying:
                values.extend(varying[column])
            elif column not in ("start_ns", "end_ns"):
                values.extend([fixed.get(column)] * count)

    def table(self, steps: list[int]) -> pd.DataFrame:
        """The table: numbers float64 (NaN where none), ``run`` Int64, text as objects with
        None (as :func:`tidy_text` makes them); ``steps`` are the step rows' numbers,
        whose measured times came from a manifest and are read as ``pd.to_numeric`` reads
        them."""
        values, size = self.values, len(self.values["kind"])
        columns: dict[str, Any] = {}
        for column in TIMELINE_COLUMNS:
            if column in TIMELINE_TEXT:  # each value a str or None already
                columns[column] = pd.Series(values[column], dtype=object)
            elif column == "run":
                columns[column] = pd.array(values[column], dtype="Int64")
            elif column in _MEASURED:
                numbers = np.full(size, np.nan)
                read = pd.to_numeric(pd.Series([values[column][i] for i in steps],
                                               dtype=object), errors="coerce")
                numbers[steps] = read.astype("float64").to_numpy()
                columns[column] = numbers
            elif column in _STEP_ONLY:  # NaN in every gap row
                numbers = np.full(size, np.nan)
                numbers[steps] = np.array([values[column][i] for i in steps], dtype="float64")
                columns[column] = numbers
            else:
                columns[column] = np.array(values[column], dtype="float64") if size \
                    else np.empty(0)
        return pd.DataFrame(columns, index=pd.RangeIndex(size))


#: The step rows' numbers read from the timeline manifest (any JSON value).
_MEASURED = ("bare_ns", "ranged_ns")
#: The step rows' numbers worked out here.
_STEP_ONLY = ("cpu_ns", "busy_ns", "copy_busy_ns", "launches", "sync_ns", "bare_spread_pct")


def timeline_table(frame: pd.DataFrame, labels: list[tuple[float, float, str]],
                   events: TraceEvents, source: str,
                   steps: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Step and gap rows of every measured iteration."""
    # what the CPU was doing: its ops and calls, never this library's own ranges
    cpu_events = LazyThreads(events.cpu)
    call_list = sorted((c.start, c.end, c.name) for c in events.calls.values())
    call_starts = [c[0] for c in call_list]
    by_label: dict[str, list[int]] = defaultdict(list)  # the rows launched in each label
    for position, labelled in enumerate(frame["range_start_end"]):
        for message in labelled:
            by_label[message].append(position)
    # the columns read below, once, as arrays and lists
    starts, durations = frame["start_ns"].to_numpy(), frame["duration_ns"].to_numpy()
    copies = (frame["kind"] == "memcpy").to_numpy()
    stacks, threads = frame["range_stack"].tolist(), frame["launch_thread"].tolist()
    modules: dict[tuple[str, ...], str | None] = {}  # each distinct stack's module, once
    rows, step_rows = _Columns(), []
    enqueues = _each_name(lambda n: any(w in n for w in _ENQUEUE))
    waits = _each_name(lambda n: any(w in n for w in _SYNC) or n == "cudaMemcpy")
    for cpu_start, cpu_end, message in labels:
        label = naming.parse_measure_range(message) or {}
        variant, shape = label.get("variant") or None, label.get("shape") or None
        run = int(label["run"]) if label.get("run", "").isdigit() else 0
        mine = np.array(by_label.get(message, []), dtype=np.intp)
        began = starts[mine]
        stopped = began + durations[mine]
        spans = list(zip(began.tolist(), stopped.tolist(), strict=True))
        end = max([cpu_end, *(e for _, e in spans)])
        clipped = [(max(s, cpu_start), min(e, end)) for s, e in spans]
        busy = _union([(s, e) for s, e in clipped if e > s])  # what ran inside the window
        # the time some copy ran (copies on several streams overlap: not their sum)
        copying = _union([(s, e) for (s, e), copy in zip(clipped, copies[mine].tolist(),
                                                            strict=True) if copy and e > s])
        inside = call_list[bisect.bisect_left(call_starts, cpu_start):
                           bisect.bisect_left(call_starts, cpu_end)]
        measured = steps.get(f"{variant or ''}|{shape or ''}", {})
        fixed = {"source": source, "variant": variant, "shape": shape, "run": run}
        step_rows.append(len(rows.values["kind"]))
        rows.step({
            **fixed, "kind": "step", "start_ns": cpu_start, "end_ns": end,
            "cpu_ns": cpu_end - cpu_start, "busy_ns": sum(e - s for s, e in busy),
            "copy_busy_ns": sum(e - s for s, e in copying),
            "launches": sum(1 for _, _, n in inside if enqueues(n)),
            "sync_ns": sum(e - s for s, e, n in inside if waits(n)),
            "bare_ns": measured.get("bare_ns"), "ranged_ns": measured.get("ranged_ns"),
            "bare_spread_pct": _spread_pct(measured)})
        order = mine[np.argsort(began, kind="quicksort")]  # as sort_values("start_ns")
        activity = zip(starts[order].tolist(), (starts[order] + durations[order]).tolist(),
                       [stacks[i] for i in order], [threads[i] for i in order], strict=True)
        _gaps(rows, fixed, (cpu_start, end), activity, modules, cpu_events)
    return rows.table(step_rows)


def _each_name(test: Callable[[str], bool]) -> Callable[[str], bool]:
    """``test``, worked out once per distinct call name."""
    known: dict[str, bool] = {}

    def cached(name: str) -> bool:
        answer = known.get(name)
        if answer is None:
            answer = known[name] = test(name)
        return answer

    return cached


def _gaps(rows: _Columns, fixed: dict[str, Any], window: tuple[float, float],
          activity: Iterable[tuple[float, float, tuple[str, ...], float]],
          modules: dict[tuple[str, ...], str | None], cpu_events: LazyThreads) -> None:
    """The gap rows of one measured iteration: each idle stretch of ``window`` between
    its activity (in start order), with the modules around it and what the CPU did."""
    cursor, end = window
    previous: str | None = None
    starts: list[float] = []
    ends: list[float] = []
    before: list[str | None] = []
    after: list[str | None] = []
    doing: list[str] = []
    cut = len(naming.RECORD_PREFIX)
    threads: dict[Any, Intervals | None] = {}
    for start, stop, stack, thread in activity:
        module = modules[stack] if stack in modules else modules.setdefault(
            stack, _module_of(stack))
        if start - cursor >= MIN_GAP_NS:
            cpu = threads[thread] if thread in threads else threads.setdefault(
                thread, cpu_events.get(thread))
            name = cpu.innermost_at((cursor + start) / 2) if cpu is not None else None
            starts.append(cursor)
            ends.append(start)
            before.append(previous)
            after.append(module)
            doing.append(name[cut:] if name and name.startswith(naming.RECORD_PREFIX)
                         else name or "")
        if stop > cursor:
            cursor, previous = stop, module
    if end - cursor >= MIN_GAP_NS:
        starts.append(cursor)
        ends.append(end)
        before.append(previous)
        after.append(None)
        doing.append("")
    rows.gaps({**fixed, "kind": "gap"}, starts, ends,
              {"cpu": doing, "prev_module": before, "next_module": after})


#: The text columns of the timeline table (None where a row has no value).
TIMELINE_TEXT = ("source", "variant", "shape", "kind", "cpu", "prev_module", "next_module")


def tidy_text(table: pd.DataFrame) -> pd.DataFrame:
    """Text columns of a timeline table as object columns with None for "no value" (NaN
    after a JSON round trip or a missing key)."""
    for column in TIMELINE_TEXT:
        if column in table:
            table[column] = pd.Series([v if isinstance(v, str) else None
                                       for v in table[column].tolist()], index=table.index,
                                      dtype=object)
    return table
