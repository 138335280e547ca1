"""What a latency-bound kernel waits on, from its warp states (numbers only).

Where a report holds the focused pass's columns (``profile --stalls``, or Nsight Compute's
Occupancy, SchedulerStats and WarpStateStats sections: :data:`torch_nsight.metrics.STALL_PASS`),
these functions give the shares of the stall reasons and of their groups, and the achieved
over theoretical occupancy; :func:`torch_nsight.analyze.limiter.latency_cause` turns them
into a cause. A stall reason's share is its ``stall_<reason>_per_issue`` (warp cycles
stalled on it per issued instruction) over the sum of all of them: the breakdown of Nsight
Compute's WarpStateStats section. The thresholds were set on the timm ViT-S training step
(``tests/data/latency/vit_s``) alone and checked, unchanged, on the torchvision ResNet-50
step (``resnet50``): docs/findings.md.

Table (columns read)::

    stall_long_scoreboard_per_issue ... stall_gmma_per_issue  achieved_occupancy_pct  eligible_warps_per_scheduler
    5.57                                0.0                   6.2                     0.07
"""

from __future__ import annotations

import math
from typing import Literal

import pandas as pd

from torch_nsight.analyze.occupancy import as_number as _number
from torch_nsight.metrics import STALL_REASONS, stall_column
from torch_nsight.report.names import function_name
from torch_nsight.report.stall_merge import config_keys

StallGroup = Literal["memory", "synchronization", "issue", "shared_memory"]
CauseKind = Literal["launch_overhead", "memory_latency", "synchronization", "instruction_issue",
                    "shared_memory_access", "few_warps", "waiting_warps"]

#: Stall reasons by what the warp waits for (Nsight Compute's "Warp Stall Reasons"):
#: global/local memory through L1TEX (long scoreboard, its queues, the stores drained at
#: exit); a barrier or memory fence; an issue slot or a busy math pipe (the tensor cores'
#: ``gmma`` included) or a fixed-latency dependency; shared memory and special math (the
#: MIO queue, short scoreboard). Instruction fetch (``no_instruction``, ``imc_miss``,
#: ``branch_resolving``) and the rest count in the total only.
STALL_GROUPS: dict[StallGroup, tuple[str, ...]] = {
    "memory": ("long_scoreboard", "lg_throttle", "tex_throttle", "drain"),
    "synchronization": ("barrier", "membar"),
    "issue": ("math_pipe_throttle", "not_selected", "dispatch_stall", "wait", "gmma"),
    "shared_memory": ("short_scoreboard", "mio_throttle"),
}
GROUP_CAUSE: dict[StallGroup, CauseKind] = {
    "memory": "memory_latency", "synchronization": "synchronization",
    "issue": "instruction_issue", "shared_memory": "shared_memory_access"}

#: A launch shorter than this (ns) is mostly fixed cost, and shorter than eager PyTorch
#: takes to launch the next kernel (tens of µs of CPU per kernel in a decode step).
LAUNCH_OVERHEAD_NS = 5_000.0
#: A stall group holding this share (%) of the stall cycles or more is the cause.
DOMINANT_STALL_PCT = 40.0
#: Fewer eligible warps per scheduler than this leave issue slots empty: occupancy is a limit.
FEW_ELIGIBLE = 1.0
#: Achieved occupancy under this fraction of the theoretical one: the grid does not fill it.
LOW_ACHIEVED_RATIO = 0.5
#: Schedulers issuing on this fraction of their active cycles or more are near issue-bound.
ISSUE_BUSY = 0.5


def has_stalls(row: dict[str, object]) -> bool:
    """Whether a kernel row holds the stall reasons (the focused pass ran on it)."""
    return stall_total(row) > 0


#: The scheduler's figures the fast set collects in its one pass (no stall reasons).
SCHEDULER_COLUMNS = ("achieved_occupancy_pct", "eligible_warps_per_scheduler",
                     "issued_warps_per_scheduler")


def has_scheduler(row: dict[str, object]) -> bool:
    """Whether a kernel row holds the scheduler's figures (the fast set since 2026-11-27, or
    the focused pass)."""
    return any(not math.isnan(_number(row.get(c))) for c in SCHEDULER_COLUMNS)


def stall_total(row: dict[str, object]) -> float:
    """The sum of the stall reasons' cycles per issued instruction (0 when none is known)."""
    values = [_number(row.get(stall_column(r))) for r in STALL_REASONS]
    return float(sum(v for v in values if not math.isnan(v)))


def stall_shares(row: dict[str, object]) -> dict[str, float]:
    """Each stall reason's share (%) of the stall cycles, largest first; empty without them."""
    total = stall_total(row)
    if total <= 0:
        return {}
    shares = {r: 100.0 * _number(row.get(stall_column(r))) / total for r in STALL_REASONS}
    return dict(sorted(((r, s) for r, s in shares.items() if not math.isnan(s)),
                       key=lambda item: -item[1]))


def group_shares(row: dict[str, object]) -> dict[StallGroup, float]:
    """Each :data:`STALL_GROUPS` group's share (%) of the stall cycles, largest first."""
    shares = stall_shares(row)
    groups = {g: sum(shares.get(r, 0.0) for r in reasons) for g, reasons in STALL_GROUPS.items()}
    return dict(sorted(groups.items(), key=lambda item: -item[1])) if shares else {}


def top_reason(row: dict[str, object], group: StallGroup | None = None) -> tuple[str, float]:
    """The largest stall reason (of ``group``, or of all) and its share (%); ("", NaN)
    without stalls."""
    shares = stall_shares(row)
    allowed = STALL_GROUPS[group] if group is not None else tuple(shares)
    for reason, share in shares.items():
        if reason in allowed:
            return reason, share
    return "", math.nan


def achieved_ratio(row: dict[str, object]) -> float:
    """Achieved over theoretical occupancy; NaN when either is unknown."""
    theoretical = _number(row.get("occupancy_pct"))
    achieved = _number(row.get("achieved_occupancy_pct"))
    return achieved / theoretical if theoretical > 0 else math.nan


def dominant_group(row: dict[str, object]) -> StallGroup | None:
    """The stall group holding :data:`DOMINANT_STALL_PCT` or more of the stalls, or None."""
    for group, share in group_shares(row).items():
        return group if share >= DOMINANT_STALL_PCT else None
    return None


#: The focused second pass profiles the kernel names that hold this share (%) of the
#: latency-bound time, the largest first ...
TARGET_COVER_PCT = 80.0
#: ... and at most this many names (ncu's ``-k`` regex stays short; each name is profiled
#: once per launch configuration).
TARGET_NAMES = 20


def stall_targets(df: pd.DataFrame, cover_pct: float = TARGET_COVER_PCT,
                  most: int = TARGET_NAMES) -> pd.DataFrame:
    """The kernel names a focused second pass should profile: by Nsight Compute's function
    name (what ``ncu -k`` matches), those holding most of the latency-bound time.

    Args:
        df: an analyzed kernel table (replicas expanded: a replicated block's kernels count
            once per block), restricted to the chosen steps as recorded.
        cover_pct: the share (%) of the latency-bound time to cover.
        most: at most this many names.

    Returns:
        One row per chosen name, the largest first::

            function         latency_ns  pct_of_latency  cumulative_pct  profiled_launches
            reduce_kernel    1297024.0   15.4            15.4            52

        ``profiled_launches`` counts the launch configurations (grid, block, dynamic shared
        memory) of that name among the first pass's profiled launches (replicas left out),
        every bound: the second pass profiles one launch of each (and, for
        ``vectorized_elementwise_kernel``, of the carrier kernels of ``instrument()``'s
        messages, which are no rows of the table).
    """
    columns = ["function", "latency_ns", "pct_of_latency", "cumulative_pct",
               "profiled_launches"]
    if df.empty or "bound" not in df:
        return pd.DataFrame(columns=columns)
    names = df["kernel_full"] if "kernel_full" in df else df["kernel"]
    functions = names.map(lambda n: function_name(n) if isinstance(n, str) else None)
    latency = df["duration_ns"].where(df["bound"] == "latency")
    table = latency.groupby(functions).sum().rename("latency_ns")
    table = table[table > 0].sort_values(ascending=False, kind="stable")
    if table.empty:
        return pd.DataFrame(columns=columns)
    out = table.rename_axis("function").reset_index()
    out["pct_of_latency"] = 100.0 * out["latency_ns"] / out["latency_ns"].sum()
    out["cumulative_pct"] = out["pct_of_latency"].cumsum()
    before = out["cumulative_pct"] - out["pct_of_latency"]  # covered before this name
    out = out[before < cover_pct].head(most)
    profiled = (df["replicated_from"].isna() if "replicated_from" in df
                else pd.Series(True, index=df.index))
    configs = config_keys(df.assign(kernel_full=names)).to_frame(index=False)
    counts = configs[profiled.to_numpy()].drop_duplicates()["function"].value_counts()
    out["profiled_launches"] = [int(counts.get(f, 0)) for f in out["function"]]
    return out.reset_index(drop=True).loc[:, columns]
