"""A focused sweep's kernels: the functions Nsight Compute profiles (those that carry the
time, :func:`focus_set`, filtered by :func:`kernel_filter`) and the timeline's stand-in rows
for the rest (:func:`stand_in_rows`), so that nothing disappears.

``sweep(..., focus=0.9)`` first records a timeline (``DIR/timeline``), keeps the kernels
(by function name, as ncu's ``-k`` filters them) that carry that share of each shape's GPU
time, and profiles only those under ``ncu``. When the directory is read, every kernel of
the timeline's median step whose function is not among them joins the ncu rows of its
(variant, shape, run) as a stand-in row: its module, direction, op and duration, no
counters, ``deep_profiled`` False.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight import formats, naming
from torch_nsight.report.source_base import ReadOptions
from torch_nsight.report.timeline_source import TimelineDirectory
from torch_nsight.report.trace import function_name

TIMELINE_FOLDER = formats.FOCUS_FOLDER


def focus_set(kernels: pd.DataFrame, share: float) -> tuple[list[str], list[str], float]:
    """The kernels that carry ``share`` of each (variant, shape)'s kernel time.

    Args:
        kernels: a timeline's kernel rows (``kind``, ``kernel``, ``kernel_full``,
            ``duration_ns``, ``variant``, ``shape``).
        share: 0 < share <= 1.

    Returns:
        (their names as the tables show them, sorted; the names ncu's ``-k`` matches,
        sorted; the share of all kernel time they carry).
    """
    rows = kernels[kernels["kind"] == "kernel"]
    keys = rows[["variant", "shape"]].astype(object).fillna("")
    chosen: set[str] = set()
    for _, group in rows.groupby([keys["variant"], keys["shape"]], sort=False):
        times = group.groupby("kernel")["duration_ns"].sum().sort_values(ascending=False)
        cumulative = times.cumsum() / times.sum()
        count = int((cumulative < share).sum()) + 1
        chosen.update(times.index[:count])
    picked = rows["kernel"].isin(chosen)
    filters = {function_name(n, for_filter=True) for n in rows.loc[picked, "kernel_full"]}
    total = rows["duration_ns"].sum()
    carried = rows.loc[picked, "duration_ns"].sum()
    return sorted(chosen), sorted(filters), float(carried / total) if total else 0.0


def kernel_filter(names: Iterable[str]) -> str:
    """ncu's ``-k`` value keeping exactly these function names."""
    return "regex:^(?:" + "|".join(re.escape(n) for n in names) + ")$"


def _labels(frame: pd.DataFrame) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(variant, shape) -> [(label message, report path)] of the ncu rows, one per run."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for ranges, source in zip(frame["range_start_end"], frame["source"], strict=True):
        for message in ranges or ():
            parsed = naming.parse_measure_range(message)
            if parsed:
                key = (parsed.get("variant", ""), parsed.get("shape", ""))
                if (message, source) not in out.setdefault(key, []):
                    out[key].append((message, source))
    return out


def _in_replica(stack: Iterable[str], replicas: set[str]) -> bool:
    return any(naming.parse_message(m).name in replicas for m in stack)


def stand_in_rows(ncu_rows: pd.DataFrame, folder: Path, focused: Sequence[str],
                  replication: Sequence[Mapping[str, Any]] = ()
                  ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The timeline's rows for the kernels the focused sweep did not profile.

    Rows inside a replicated module are left out: the representative's rows (deep or
    stand-in) are copied to its replicas when the directory is analyzed, as for any sweep.

    Args:
        ncu_rows: the sweep's raw ncu table.
        folder: the sweep's timeline directory.
        focused: the function names ncu profiled.
        replication: the sweep's replicated sibling groups (``replicas`` each).

    Returns:
        (raw rows to append, with ``deep_profiled`` False, and the timeline table), or an
        empty table and None when the folder holds no timeline.
    """
    if not formats.is_timeline_dir(folder):
        return ncu_rows.iloc[0:0], None
    data = TimelineDirectory().read(folder, ReadOptions(cache=False))
    rows = data.kernels[data.kernels["kind"] == "kernel"]
    profiled = set(focused)  # shown names, or the names -k matched (older manifests)
    rows = rows[~rows["kernel"].isin(profiled) & ~rows["kernel_full"].map(
        lambda n: function_name(n, for_filter=True) in profiled)]
    replicas = {name for group in replication for name in group.get("replicas", ())}
    if replicas:
        rows = rows[~rows["range_stack"].map(lambda s: _in_replica(s, replicas))]
    steps = data.timeline[data.timeline["kind"] == "step"] if data.timeline is not None \
        else pd.DataFrame()
    labels = _labels(ncu_rows)
    pieces = []
    for (variant, shape), group in steps.groupby(
            [steps["variant"].fillna(""), steps["shape"].fillna("")], sort=False):
        wall = group["end_ns"] - group["start_ns"]
        median_run = group.loc[(wall - wall.median()).abs().idxmin(), "run"]
        message = naming.format_measure_range(variant=variant, shape=shape, run=median_run)
        mine = rows[rows["range_start_end"].map(lambda r, m=message: m in r)]
        for label, source in labels.get((variant, shape), []):
            pieces.append(mine.assign(range_start_end=[(label,)] * len(mine), source=source))
    out = pd.concat(pieces, ignore_index=True) if pieces else rows.iloc[0:0]
    return out.assign(deep_profiled=False), data.timeline
