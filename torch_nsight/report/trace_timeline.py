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
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

import pandas as pd

from torch_nsight import naming
from torch_nsight.checks import number
from torch_nsight.report.trace_events import Span, TraceEvents
from torch_nsight.vocabulary import outside_module

#: Idle intervals shorter than this are not gaps (a launch's own latency is ~2-5 µs).
MIN_GAP_NS = 1000.0
TIMELINE_COLUMNS = ("source", "variant", "shape", "run", "kind", "start_ns", "end_ns",
                    "cpu_ns", "busy_ns", "launches", "sync_ns", "bare_ns", "ranged_ns",
                    "bare_spread_pct", "cpu", "prev_module", "next_module")
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
        index = self.index_at(t)
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
    rows: list[dict[str, Any]] = []
    # the columns read below: a label's rows taken from these alone, not from every column
    narrow = frame[["start_ns", "duration_ns", "range_stack", "launch_thread"]]
    modules: dict[tuple[str, ...], str | None] = {}  # each distinct stack's module, once
    for cpu_start, cpu_end, message in labels:
        label = naming.parse_measure_range(message) or {}
        variant, shape = label.get("variant") or None, label.get("shape") or None
        run = int(label["run"]) if label.get("run", "").isdigit() else 0
        mine = narrow.iloc[by_label.get(message, [])]
        spans = list(zip(mine["start_ns"], mine["start_ns"] + mine["duration_ns"],
                         strict=True))
        end = max([cpu_end, *(e for _, e in spans)])
        clipped = [(max(s, cpu_start), min(e, end)) for s, e in spans]
        busy = _union([(s, e) for s, e in clipped if e > s])  # what ran inside the window
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
            module = modules[stack] if stack in modules else modules.setdefault(
                stack, _module_of(stack))
            if start - cursor >= MIN_GAP_NS:
                rows.append(_gap(source, variant, shape, run, cursor, start, previous,
                                 module, cpu_events.get(thread)))
            if stop > cursor:
                cursor, previous = stop, module
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
                                       for v in table[column].tolist()], index=table.index,
                                      dtype=object)
    return table


def _gap(source: str, variant: str | None, shape: str | None, run: int, start: float,
         end: float, previous: str | None, following: str | None,
         cpu: Intervals | None) -> dict[str, Any]:
    doing = cpu.innermost_at((start + end) / 2) if cpu is not None else None
    return {"source": source, "variant": variant, "shape": shape, "run": run, "kind": "gap",
            "start_ns": start, "end_ns": end,
            "cpu": doing.removeprefix(naming.RECORD_PREFIX) if doing else "",
            "prev_module": previous, "next_module": following}
