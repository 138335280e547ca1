"""Launches replicated (``torch-nsight profile --replicate-launches``): a step's repeated launches
profiled a few times, every other launch given the counters of the nearest of them.

A recurrent layer launches the same few kernels once per time step from inside one ATen
call (a 2-layer ``nn.LSTM`` over 128 steps: 1,477 launches a training step), where no
module range can tell them apart. So the command runs twice:

1. Without ncu, its chosen steps recorded by PyTorch's profiler into
   :data:`~torch_nsight.formats.LAUNCH_FOLDER` beside the report: the *launch list*, every
   kernel in launch order with its function, grid, block, registers, duration and module
   ranges (:func:`launch_list`).
2. Under ncu with ``--kernel-id ::regex:.*:(N1|N2|...)``: ncu numbers each kernel function's
   launches inside the chosen steps (1, 2, ...), exactly as the launch list does (checked
   on an H100, ``bench/launch_sampling_probe.py``), and profiles the numbers kept.
   :func:`plan_representatives` keeps, per *group* of alike launches (same kernel, grid, block,
   registers and step, durations within :data:`SPLIT` of each other), :data:`REPRESENTATIVES`
   spread over the step (first, middle, last); one set of numbers serves every function
   (ncu refuses a second ``--kernel-id``: ``bench/roofline_passes.py``), so ncu profiles a
   superset, never fewer.

Reading the report (:func:`with_replicated_launches`) aligns its rows with the launches ncu was
to profile, then gives every other launch a copy of the measured row of its group nearest
in duration, with its own module ranges and ``representative_index`` naming the measured row
(``kernel_index``)::

    launch list (step 12)                    ncu rows          table
    #  function          grid  dur  kept     kernel_index      rows     representative_index
    1  elemWiseRNNcell   8     9 us  yes  -> 0             ->  0        NaN
    2  elemWiseRNNcell   8     9 us  no                        (copy)   0
    3  elemWiseRNNcell   8     9 us  yes  -> 1                 1        NaN
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight import formats
from torch_nsight.checks import whole
from torch_nsight.errors import ReportError
from torch_nsight.report.compiled_attribution import FUSED_COLUMN, compiled_at
from torch_nsight.report.source_base import ReadOptions
from torch_nsight.report.timeline_source import TimelineDirectory
from torch_nsight.report.trace import GRAPH_REPLAY, function_name
from torch_nsight.vocabulary import INDUCTOR_LAUNCH, REPRESENTATIVE_INDEX

logger = logging.getLogger(__name__)

#: Launches profiled per group of alike launches, spread over the step.
REPRESENTATIVES = 3
#: A group's durations (in the launch list) further apart than this ratio are profiled as
#: launches of their own kind: the same kernel, grid and block can still do other work (a
#: GEMM's K is not in its grid).
SPLIT = 1.25
#: Numbers kept after each function's last launch of the chosen steps: the kernels that carry
#: messages into the report (the calls table, at the last chosen step's end) launch there,
#: under ncu only.
CARRIERS = 4
#: Columns that place a launch (its module ranges): a copy takes its own launch's.
_PLACE = ("range_stack", "range_other")
_KEY = ("step", "kernel_full", "grid", "block", "registers_per_thread")


@dataclass(frozen=True)
class LaunchPlan:
    """Which launches of the chosen steps ncu profiles.

    Attributes:
        launches: launches in the launch list.
        invocations: the invocation numbers ncu keeps, sorted (every function).
        profiled: launches ncu profiles with them.
        report: the file name of the report profiled with it (without ``.xz``); a report of
            another name in the same folder is read without it.
    """

    launches: int
    invocations: tuple[int, ...]
    profiled: int
    report: str = ""

    @property
    def kernel_id(self) -> str:
        """ncu's ``--kernel-id`` value that keeps :attr:`invocations` of every function."""
        return "::regex:.*:(" + "|".join(str(n) for n in self.invocations) + ")"

    def document(self) -> dict[str, Any]:
        """The plan as :data:`~torch_nsight.formats.LAUNCH_PLAN` holds it."""
        return {"kind": formats.LAUNCH_KIND, "format": formats.LAUNCH_FORMAT,
                "launches": self.launches, "profiled": self.profiled, "report": self.report,
                "invocations": list(self.invocations)}

    @classmethod
    def read(cls, path: Path) -> LaunchPlan:
        """Read a plan file.

        Raises:
            ReportError: not a launch plan, or damaged.
        """
        try:
            data = formats.read_tagged(path, formats.LAUNCH_KIND, formats.LAUNCH_FORMAT)
        except formats.FormatError as err:
            raise ReportError(str(err)) from err
        # a plan written before it named its report was profile's one report's
        numbers, report = data.get("invocations"), data.get("report", "report.ncu-rep")
        launches, profiled = whole(data.get("launches")), whole(data.get("profiled"))
        if (not isinstance(numbers, list) or launches is None or profiled is None
                or not isinstance(report, str)
                or any((whole(n) or 0) < 1 for n in numbers)):
            raise ReportError(f"{path} is not a launch plan (its numbers are damaged)")
        return cls(launches, tuple(sorted({int(n) for n in numbers})), profiled, report)


def launch_list(kernels: pd.DataFrame) -> pd.DataFrame:
    """The chosen steps' kernel launches, in launch order, as ncu numbers them.

    Args:
        kernels: a timeline's raw kernel table (``kind``, ``kernel_full``, ``grid``,
            ``block``, ``registers_per_thread``, ``duration_ns``, ``launch_ns``,
            ``range_start_end``, ``range_stack``, ``range_other``).

    Returns:
        One row per launch, index 0..n-1, with ``function`` (the name ncu numbers),
        ``step`` (the step's range) and ``invocation`` (1, 2, ... per function).

    Raises:
        ReportError: a launch without a launch call (a CUDA graph's replay): ncu numbers
            those in another order; or a compiled graph ran in the chosen steps: under ncu,
            its first call there launches the kernel that carries its kernel map
            (:mod:`torch_nsight.capture.compiled.ranges`), a launch the list does not hold,
            which shifts the numbers of the launches after it.
    """
    rows = kernels[(kernels["kind"] == "kernel") & kernels["range_start_end"].map(bool)]
    replayed = rows["launch_ns"].isna() | rows["range_stack"].map(lambda s: GRAPH_REPLAY in s)
    if replayed.any():
        raise ReportError(f"{int(replayed.sum())} kernel(s) of the chosen steps replay a CUDA "
                          "graph, which ncu numbers in another order than the launch list: "
                          "profile without --replicate-launches")
    if ran_compiled(rows):
        raise ReportError("compiled graphs ran in the chosen steps: under ncu each carries its "
                          "kernel map with a launch of its own, which shifts the numbers ncu "
                          "gives the launches after it: profile without --replicate-launches")
    rows = rows.sort_values("launch_ns", kind="stable").reset_index(drop=True)
    out = rows.loc[:, ["kernel_full", "grid", "block", "registers_per_thread", "duration_ns",
                       *_PLACE]]
    out["step"] = [r[0] for r in rows["range_start_end"]]
    return numbered(out)


def ran_compiled(rows: pd.DataFrame) -> bool:
    """Whether any of ``rows`` ran in a compiled graph: an Inductor kernel (``triton_*``), a
    kernel its map gave fused modules or a launch, or one left in its ``compiled:`` range."""
    if rows.empty:
        return False
    marked = [c for c in (FUSED_COLUMN, INDUCTOR_LAUNCH) if c in rows]
    return bool(rows["kernel_full"].astype(str).str.startswith("triton").any()
                or any(rows[c].notna().any() for c in marked)
                or rows["range_stack"].map(
                    lambda stack: compiled_at(tuple(map(str, stack or ()))) is not None).any())


def check_steps_listed(launches: pd.DataFrame, count: int) -> None:
    """Refuse a launch list that holds fewer steps than the ``count`` chosen: ncu's run would
    carry the calls table at the last chosen step's end, which the command never reaches.

    Raises:
        ReportError: the steps the command ran, against those chosen.
    """
    ran = int(launches["step"].nunique())
    if 0 < ran < count:  # none at all: no kernel ran, said by the caller
        raise ReportError(f"the command ran {ran} of the {count} chosen steps: choose steps it "
                          "runs (--steps), or let it run longer")


def numbered(launches: pd.DataFrame) -> pd.DataFrame:
    """``launches`` (in launch order, ``kernel_full``) with ``function``, the name ncu numbers
    a kernel by, and ``invocation``, its number (1, 2, ... per function)."""
    launches["function"] = [function_name(n, for_filter=True) for n in launches["kernel_full"]]
    launches["invocation"] = launches.groupby("function", sort=False).cumcount() + 1
    return launches


def _groups(launches: pd.DataFrame, split: float) -> pd.Series:
    """Each launch's group: alike launches (:data:`_KEY`) whose durations lie within
    ``split`` of the group's shortest."""
    group = pd.Series(-1, index=launches.index)
    number = 0
    keys = launches.loc[:, list(_KEY)].astype(str)
    for _, members in launches.groupby([keys[k] for k in _KEY], sort=False):
        durations = members["duration_ns"].fillna(0.0).sort_values(kind="stable")
        floor = None
        for position, duration in durations.items():
            if floor is None or duration > floor * split:
                number, floor = number + 1, max(duration, 1.0)
            group[position] = number
    return group


def plan_representatives(launches: pd.DataFrame, *, representatives: int = REPRESENTATIVES,
                         split: float = SPLIT) -> LaunchPlan:
    """The invocation numbers to profile: :data:`REPRESENTATIVES` launches of each group spread
    over the step (every launch of a smaller group), and :data:`CARRIERS` after each
    function's last launch of the chosen steps.

    Args:
        launches: :func:`launch_list`'s table.
        representatives: launches profiled per group (at least 1).
        split: see :data:`SPLIT`.
    """
    keep: set[int] = set()
    for _, members in launches.groupby(_groups(launches, split), sort=False):
        invocations = members["invocation"].tolist()
        if len(invocations) <= representatives:
            keep.update(invocations)
        else:
            last = len(invocations) - 1
            keep.update(invocations[round(i * last / max(representatives - 1, 1))]
                        for i in range(representatives))
    for top in launches.groupby("function", sort=False)["invocation"].max():
        keep.update(range(int(top) + 1, int(top) + 1 + CARRIERS))
    profiled = int(launches["invocation"].isin(keep).sum())
    return LaunchPlan(len(launches), tuple(sorted(keep)), profiled)


def replicated_count(kernels: pd.DataFrame) -> tuple[int, int]:
    """How many launches a profile measured, and how many ``--replicate-launches`` would have
    profiled: :func:`plan_representatives` over every launch of its steps, ncu's durations
    standing in for the launch list's. The option profiles identical blocks one by one, so
    the launches copied from another block count as launches there.

    Args:
        kernels: a kernel table (``kernel_full``, ``grid``, ``block``, ``duration_ns``,
            ``range_start_end``; ``registers_per_thread``, ``replicated_from`` when present).
    """
    rows = kernels[kernels["kernel_full"].notna()]
    if rows.empty:
        return 0, 0
    measured = int(rows["replicated_from"].isna().sum()) if "replicated_from" in rows \
        else len(rows)
    listed = pd.DataFrame({
        "kernel_full": rows["kernel_full"].to_numpy(), "grid": rows["grid"].to_numpy(),
        "block": rows["block"].to_numpy(), "duration_ns": rows["duration_ns"].to_numpy(),
        "registers_per_thread": rows.get("registers_per_thread", pd.Series(
            float("nan"), index=rows.index)).to_numpy(),
        "step": rows["range_start_end"].astype(str).to_numpy()})
    return measured, plan_representatives(numbered(listed)).profiled


def _aligned(frame: pd.DataFrame, expected: pd.DataFrame) -> list[int] | None:
    """For each expected launch, the position in ``frame`` of its ncu row (-1: none): rows
    matched in order by function, grid and block, a few launches skipped where ncu did not
    profile one; None when a row matches no launch near its place."""
    names = [function_name(n, for_filter=True) for n in frame["kernel_full"]]
    wanted = list(zip(expected["function"], expected["grid"].astype(str),
                      expected["block"].astype(str), strict=True))
    found = [-1] * len(wanted)
    at = 0
    for row, key in enumerate(zip(names, frame["grid"].astype(str), frame["block"].astype(str),
                                  strict=True)):
        ahead = [i for i in range(at, min(at + 1 + CARRIERS, len(wanted))) if wanted[i] == key]
        if not ahead:
            return None
        found[ahead[0]] = row
        at = ahead[0] + 1
    return found


def _sources(launches: pd.DataFrame, measured: Sequence[int]) -> list[int]:
    """For each launch, the measured launch whose counters it takes: itself when measured,
    else the measured launch of its kind (:data:`_KEY`) nearest in duration (-1: none)."""
    keys = [tuple(map(str, k)) for k in zip(*(launches[c] for c in _KEY), strict=True)]
    durations = launches["duration_ns"].fillna(0.0).tolist()
    pools: dict[tuple[str, ...], list[tuple[float, int]]] = {}
    for launch in measured:
        pools.setdefault(keys[launch], []).append((durations[launch], launch))
    for pool in pools.values():
        pool.sort()
    chosen = []
    measured_set = set(measured)
    for launch, key in enumerate(keys):
        found = pools.get(key)
        if launch in measured_set or not found:
            chosen.append(launch if launch in measured_set else -1)
            continue
        at = bisect.bisect_left(found, (durations[launch], -1))
        near = [found[i] for i in (at - 1, at) if 0 <= i < len(found)]
        chosen.append(min(near, key=lambda p: (abs(p[0] - durations[launch]),
                                               abs(p[1] - launch)))[1])
    return chosen


def replicated_table(frame: pd.DataFrame, plan: LaunchPlan, launches: pd.DataFrame
                  ) -> pd.DataFrame | None:
    """The ncu rows with a row for every launch ncu did not profile, in launch order (see
    the module's table), or None when the rows do not line up with the plan's launches.

    Args:
        frame: the report's raw table (the carriers of messages already taken out).
        plan: what ncu was to profile.
        launches: the launch list (:func:`launch_list`).
    """
    launches = launches.reset_index(drop=True)
    if len(launches) != plan.launches or len(frame) > plan.profiled:
        return None
    order = frame.sort_values(["range_index", "kernel_index"], kind="stable")
    expected = launches["invocation"].isin(set(plan.invocations))
    positions = _aligned(order, launches[expected])
    if positions is None:
        return None
    launch_of = launches.index[expected].tolist()
    row_of = {launch_of[i]: p for i, p in enumerate(positions) if p >= 0}
    sources = _sources(launches, sorted(row_of))
    picked = [row_of[s] for s in sources if s >= 0]
    out = order.iloc[picked].reset_index(drop=True)
    copied = [launch for launch, s in enumerate(sources) if s >= 0 and s != launch]
    at = {launch: i for i, launch in enumerate(n for n, s in enumerate(sources) if s >= 0)}
    out[REPRESENTATIVE_INDEX] = float("nan")
    for launch in copied:
        i, source = at[launch], sources[launch]
        out.at[i, REPRESENTATIVE_INDEX] = out.at[at[source], "kernel_index"]
        if launches.at[launch, "range_stack"] != launches.at[source, "range_stack"]:
            for column in _PLACE:
                out.at[i, column] = launches.at[launch, column]
    missing = sum(1 for s in sources if s < 0)
    if missing:
        logger.warning("%d launch(es) of the chosen steps have no measured launch of their "
                       "kind and are left out", missing)
    return out


def with_replicated_launches(frame: pd.DataFrame, report: Path, options: ReadOptions
                          ) -> pd.DataFrame:
    """``frame`` with a row for every launch ncu did not profile, when ``report`` was
    profiled with ``--replicate-launches`` (a launch plan beside it); unchanged otherwise, or
    with a warning when the plan or the launch list cannot be read or do not line up."""
    path = formats.launch_plan_of(report)
    if not path.is_file():
        return frame
    try:
        plan = LaunchPlan.read(path)
        if plan.report != report.name.removesuffix(".xz"):
            logger.debug("%s: the launch plan in %s is another report's (%s)", report.name,
                         path.parent, plan.report)
            return frame
        data = TimelineDirectory().read(path.parent, options)
        merged = replicated_table(frame, plan, launch_list(data.kernels))
    except ReportError as err:
        logger.warning("%s: the launches ncu did not profile are left out: %s", report.name,
                       err)
        return frame
    if merged is None:
        logger.warning("%s: ncu's kernels do not line up with the launch list in %s (in "
                       "order, by function, grid and block): the launches ncu did not profile "
                       "are left out", report.name, path.parent)
        return frame
    return merged
