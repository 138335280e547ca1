"""What limits a latency-bound kernel, from its launch alone, and the reason text that says so.

A kernel that keeps neither its SMs nor its memory busy (``bound == "latency"``) is most
often starved of parallel work. The launch already says whether it is: the rule
(:func:`launch_limiter`) reads the waves (``launch__waves_per_multiprocessor``: the grid in
units of what all SMs hold at once) and the theoretical occupancy of
:mod:`~torch_nsight.analyze.occupancy`, in this order:

* ``small_grid``: under one wave (``waves < 1``): some SMs idle, or all under-filled;
* ``registers``, ``shared_memory``, ``block_size``, ``blocks_per_sm``: theoretical occupancy
  at most :data:`LOW_OCCUPANCY_PCT`, named by the resource that sets it;
* ``tail``: a partial last wave that leaves the SMs idle for at least :data:`TAIL_PCT` of
  the kernel's time (blocks of equal duration assumed);
* the occupancy limiter again, for any theoretical occupancy under 100% (as Nsight
  Compute's Occupancy section names it);
* None: the launch is not the limit (full occupancy, whole waves), or an input is unknown.

:func:`add_limiter` stores the verdict (``limiter``) and appends its numbers to the reason
of latency-bound rows: ``0.4 waves: 53 blocks on 132 SMs``, ``occupancy 19%: 168 registers
per thread``, or, where the launch is not the limit, ``launch not the limit: occupancy
100%, 5.8 waves`` (what limits such a kernel, memory latency or instruction issue, takes
Nsight Compute's WarpStateStats section to tell); docs/roofline.md lists every form. The
hotspot's ``next_step`` turns the verdict into a PyTorch-level fix
(:func:`torch_nsight.analyze.hotspots.next_step`).

Where the row also holds its scheduler's figures or its warp states (the fast set, the
focused pass of ``profile --stalls``: :mod:`~torch_nsight.analyze.stalls`),
:func:`latency_cause` names one cause instead, the first that holds:

* ``launch_overhead``: the launch lasts under ``LAUNCH_OVERHEAD_NS`` (5 µs);
* ``small_grid``: under one wave;
* the occupancy resource: theoretical occupancy at most :data:`LOW_OCCUPANCY_PCT` and under
  ``FEW_ELIGIBLE`` (1) eligible warp per scheduler: too few warps to hide latency;
* ``tail``: as above;
* ``memory_latency``, ``synchronization``, ``instruction_issue``, ``shared_memory_access``:
  one stall group (``STALL_GROUPS``) holds ``DOMINANT_STALL_PCT`` (40%) of the stalls;
* ``few_warps``: achieved occupancy under half the theoretical one;
* ``instruction_issue``: the schedulers issue on half their cycles or more;
* ``waiting_warps``: without stall reasons (the fast set holds the scheduler's figures
  alone), under ``FEW_ELIGIBLE`` eligible warp per scheduler: the warps are there and wait,
  on memory or a dependency (which one takes the stall reasons of ``--stalls``);
* the occupancy resource (any occupancy under 100%), else None;

The fast set collects achieved occupancy and the eligible and issued warps per scheduler
in its one replay pass, so every latency-bound kernel of a fast profile gets this verdict;
the focused pass adds the stall reasons that split ``waiting_warps`` into memory latency,
synchronization, instruction issue or shared memory. Its clause ends with the evidence: ``long scoreboard 62% of stalls: waits on global
memory; achieved occupancy 31% of 50% theoretical; 1.9 eligible warps per scheduler``.
"""

from __future__ import annotations

import math
from typing import Literal

import pandas as pd

from torch_nsight.analyze.classify import ROOF_CLAUSE, SMALL_GRID
from torch_nsight.analyze.frames import own
from torch_nsight.analyze.occupancy import as_number as _number
from torch_nsight.analyze.stalls import (
    FEW_ELIGIBLE,
    GROUP_CAUSE,
    ISSUE_BUSY,
    LAUNCH_OVERHEAD_NS,
    LOW_ACHIEVED_RATIO,
    CauseKind,
    StallGroup,
    achieved_ratio,
    dominant_group,
    group_shares,
    has_scheduler,
    has_stalls,
    top_reason,
)
from torch_nsight.metrics import STALL_REASONS, stall_column
from torch_nsight.units import format_duration

LimiterKind = Literal["small_grid", "registers", "shared_memory", "block_size",
                      "blocks_per_sm", "tail"]
#: Occupancy (% of the SM's warps) at or under which the resource that sets it is named.
LOW_OCCUPANCY_PCT = 50.0
#: A partial last wave is named when it can leave the SMs idle this share (%) of the time.
TAIL_PCT = 25.0
_RESOURCES = ("registers", "shared_memory", "block_size", "blocks_per_sm")
#: The columns the verdict and its words read (a kernel row's; absent ones unknown).
LIMITER_INPUTS = ("bound", "basis", "sol_bottleneck", "sm_pct", "mem_pct", "waves",
                  "grid_size", "block_size", "sm_count", "blocks_per_sm", "occupancy_pct",
                  "occupancy_limiter", "registers_per_thread", "shared_static_bytes",
                  "shared_dynamic_bytes", "sm_blocks", "duration_ns", "achieved_occupancy_pct",
                  "eligible_warps_per_scheduler", "issued_warps_per_scheduler",
                  *(stall_column(r) for r in STALL_REASONS))
#: What each stall group's warps wait for, in the reason.
_WAITS_ON: dict[StallGroup, str] = {
    "memory": "waits on global memory",
    "synchronization": "waits at barriers",
    "issue": "waits on an issue slot or a math pipe",
    "shared_memory": "waits on shared memory or special math (MIO)",
}


def tail_idle_pct(waves: float) -> float:
    """The share (%) of a kernel's time its SMs may idle in a partial last wave: the last
    wave lasts as long as a full one with ``waves - floor(waves)`` of it filled; 0 for whole
    waves or under one wave; NaN when unknown."""
    if math.isnan(waves) or waves < 1:
        return 0.0 if waves == waves else math.nan
    whole = math.ceil(waves - 1e-9)
    return 100.0 * (whole - waves) / whole


def small_grid_title(row: dict[str, object]) -> bool:
    """Whether the kernel's bound was Nsight Compute's ``Small Grid`` verdict (the stored rule
    title, or the rule re-applied to the SOL percentages or their stand-ins, which gives it
    under one wave): the verdict :mod:`~torch_nsight.analyze.classify` words with the waves.

    Args:
        row: a classified kernel row (``basis``, ``sol_bottleneck``, ``waves``).
    """
    basis = row.get("basis")
    if basis == "ncu_rule":  # without the percentages classify says the title alone
        return row.get("sol_bottleneck") == SMALL_GRID and not any(
            math.isnan(_number(row.get(c))) for c in ("sm_pct", "mem_pct", "waves"))
    return basis in ("sol_pct", "sol_estimate") and row.get("bound") == "latency" \
        and _number(row.get("waves")) < 1


def launch_limiter(row: dict[str, object]) -> LimiterKind | None:
    """The verdict for one kernel row (see the module docstring), whatever its bound.

    Args:
        row: a kernel row with ``waves``, ``occupancy_pct`` and ``occupancy_limiter``.

    Returns:
        The limiter, or None when the launch is not the limit or is unknown.
    """
    waves = _number(row.get("waves"))
    if waves < 1:
        return "small_grid"
    occupancy = _number(row.get("occupancy_pct"))
    limiter = row.get("occupancy_limiter")
    if not isinstance(limiter, str):
        limiter = None
    if limiter is not None and occupancy <= LOW_OCCUPANCY_PCT:
        return limiter  # type: ignore[return-value]
    if tail_idle_pct(waves) >= TAIL_PCT:
        return "tail"
    return limiter  # type: ignore[return-value]


def latency_cause(row: dict[str, object],
                  launch: LimiterKind | None) -> LimiterKind | CauseKind | None:
    """The cause of one latency-bound kernel with warp-state columns (the module docstring's
    list, first match).

    Args:
        row: a kernel row with the stall, scheduler and occupancy columns.
        launch: :func:`launch_limiter`'s verdict on its launch.

    Returns:
        The cause, or None when no single cause stands out.
    """
    if _number(row.get("duration_ns")) < LAUNCH_OVERHEAD_NS:
        return "launch_overhead"
    if launch == "small_grid":
        return launch
    eligible = _number(row.get("eligible_warps_per_scheduler"))
    occupancy = _number(row.get("occupancy_pct"))
    if launch in _RESOURCES and occupancy <= LOW_OCCUPANCY_PCT and not eligible >= FEW_ELIGIBLE:
        return launch
    if tail_idle_pct(_number(row.get("waves"))) >= TAIL_PCT:
        return "tail"
    group = dominant_group(row)
    if group is not None:
        return GROUP_CAUSE[group]
    if achieved_ratio(row) < LOW_ACHIEVED_RATIO:
        return "few_warps"
    if _number(row.get("issued_warps_per_scheduler")) >= ISSUE_BUSY:
        return "instruction_issue"
    if not has_stalls(row) and eligible < FEW_ELIGIBLE:
        return "waiting_warps"
    return launch if launch in _RESOURCES else None


def _waves(waves: float) -> str:
    if waves < 0.01:
        return "<0.01"
    return f"{waves:.2g}" if waves < 0.95 else f"{waves:.3g}"  # 0.996 stays under one


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _blocks(value: float) -> str:
    return f"{_count(value)} block" + ("" if value == 1 else "s")


def _occupancy(row: dict[str, object], kind: str) -> str:
    pct = f"occupancy {_number(row.get('occupancy_pct')):.0f}%"
    block = _count(_number(row.get("block_size")))
    if kind == "registers":
        return f"{pct}: {_number(row.get('registers_per_thread')):.0f} registers per thread"
    if kind == "shared_memory":
        shared = sum(_number(row.get(c)) for c in ("shared_static_bytes",
                                                    "shared_dynamic_bytes"))
        return f"{pct}: {shared / 1024:.0f} KB shared memory per block"
    if kind == "block_size":
        return f"{pct}: blocks of {block} threads"
    return (f"{pct}: blocks of {block} threads, at most "
            f"{_number(row.get('sm_blocks')):.0f} per SM")


def describe_limiter(row: dict[str, object], kind: LimiterKind | None) -> str:
    """The verdict's numbers in words: ``0.4 waves: 53 blocks on 132 SMs``.

    Args:
        row: the kernel row the verdict was made on.
        kind: :func:`launch_limiter`'s verdict.

    Returns:
        One clause, without a trailing period; for None, the numbers that rule the launch
        out, or empty when they are unknown.
    """
    waves = _number(row.get("waves"))
    grid, sms = _number(row.get("grid_size")), _number(row.get("sm_count"))
    per_sm = _number(row.get("blocks_per_sm"))
    if kind == "small_grid":
        if grid < sms or math.isnan(per_sm):
            where = "" if math.isnan(sms) else f" on {_count(sms)} SMs"
            return f"{_waves(waves)} waves: {_blocks(grid)}{where}"
        return (f"{_waves(waves)} waves: {_blocks(grid)}, room for "
                f"{_count(per_sm * sms)} ({per_sm:.0f} per SM on {_count(sms)} SMs)")
    if kind == "tail":
        room = grid / waves
        partial = grid - math.floor(waves) * room
        return (f"{_waves(waves)} waves: a last wave of {_blocks(partial)} "
                f"(SMs idle up to {tail_idle_pct(waves):.0f}% of the time)")
    if kind is None:
        occupancy = _number(row.get("occupancy_pct"))
        if math.isnan(occupancy) or math.isnan(waves):
            return ""  # unknown: nothing to say rather than a guess
        plural = "" if _waves(waves) == "1" else "s"
        return f"launch not the limit: occupancy {occupancy:.0f}%, {_waves(waves)} wave{plural}"
    return _occupancy(row, kind)


def _reason_words(reason: str) -> str:
    return reason.replace("_", " ").replace("mio", "MIO").replace("lg ", "LG ").replace(
        "imc", "IMC")


def _stall_share(row: dict[str, object], group: StallGroup | None = None) -> str:
    """``long scoreboard 62% of stalls``, with the group's share where it is larger by 5
    points or more: ``long scoreboard 55% of stalls (memory 62%)``."""
    reason, share = top_reason(row, group)
    if not reason:
        return ""
    text = f"{_reason_words(reason)} {share:.0f}% of stalls"
    whole = group_shares(row).get(group, share) if group is not None else share
    if whole - share >= 5:
        text += f" ({str(group).replace('_', ' ')} {whole:.0f}%)"
    return text


def _warps(row: dict[str, object], *, achieved: bool = True) -> str:
    """``achieved occupancy 31% of 50% theoretical; 1.9 eligible warps per scheduler``."""
    parts = []
    done, theory = (_number(row.get(c)) for c in ("achieved_occupancy_pct", "occupancy_pct"))
    if achieved and not math.isnan(done):
        parts.append(f"achieved occupancy {done:.0f}%" + (
            "" if math.isnan(theory) else f" of {theory:.0f}% theoretical"))
    eligible = _number(row.get("eligible_warps_per_scheduler"))
    if not math.isnan(eligible):
        count = f"{eligible:.2g}" if eligible < 10 else f"{eligible:.0f}"
        parts.append(f"{count} eligible warp{'' if count == '1' else 's'} per scheduler")
    return "; ".join(parts)


def describe_cause(row: dict[str, object], kind: LimiterKind | CauseKind | None) -> str:
    """:func:`latency_cause`'s verdict in words, with the warp-state numbers behind it.

    Args:
        row: the kernel row the verdict was made on (with its stall columns).
        kind: the verdict.

    Returns:
        ``long scoreboard 62% of stalls: waits on global memory; achieved occupancy 31% of
        50% theoretical; 1.9 eligible warps per scheduler``, or the launch's clause
        (:func:`describe_limiter`) followed by the same numbers and the top stall.
    """
    group = dominant_group(row)
    if kind in GROUP_CAUSE.values() and group is not None and GROUP_CAUSE[group] == kind:
        head, tail = f"{_stall_share(row, group)}: {_WAITS_ON[group]}", _warps(row)
    elif kind == "instruction_issue":
        issued = 100 * _number(row.get("issued_warps_per_scheduler"))
        head, tail = (f"schedulers issue on {issued:.0f}% of cycles: instruction-bound",
                      "; ".join(p for p in (_warps(row), _stall_share(row)) if p))
    elif kind == "few_warps":
        done, theory = (_number(row.get(c)) for c in ("achieved_occupancy_pct", "occupancy_pct"))
        head = (f"achieved occupancy {done:.0f}% of {theory:.0f}% theoretical at "
                f"{_waves(_number(row.get('waves')))} waves: too few or uneven blocks")
        tail = "; ".join(p for p in (_warps(row, achieved=False), _stall_share(row)) if p)
    elif kind == "launch_overhead":
        duration = format_duration(row.get("duration_ns"), decimals=3)  # 4.99, not 5.0
        head = (f"{duration} launch: too short to fill the GPU (under "
                f"{LAUNCH_OVERHEAD_NS / 1e3:g} µs)")
        tail = "; ".join(p for p in (_warps(row), _stall_share(row)) if p)
    elif kind == "waiting_warps":
        issued = 100 * _number(row.get("issued_warps_per_scheduler"))
        head = (f"{_warps(row)}: warps wait on memory or a dependency (--stalls tells "
                "which)")
        tail = "" if math.isnan(issued) else f"schedulers issue on {issued:.0f}% of cycles"
    elif kind is None and not has_stalls(row):
        head, tail = describe_limiter(row, None), _warps(row)
    elif kind is None:
        head = f"no single cause: {_stall_share(row)}"
        tail = _warps(row)
    else:
        head = describe_limiter(row, kind)  # type: ignore[arg-type]
        tail = "; ".join(p for p in (_warps(row), _stall_share(row)) if p)
    return "; ".join(p for p in (head, tail) if p)


def with_clause(reason: object, words: str) -> str:
    """``reason`` with ``words`` after its evidence and before its DRAM roofline clause
    (which stays last, as :mod:`~torch_nsight.analyze.classify` writes it)."""
    if not isinstance(reason, str) or not reason:
        return words
    evidence, roof, position = reason.partition(f"; {ROOF_CLAUSE}")
    return f"{evidence}; {words}{roof}{position}" if roof else f"{reason}; {words}"


def add_limiter(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``limiter`` to latency-bound rows and its numbers to their ``reason``.

    Args:
        df: a classified kernel table with the columns of
            :func:`~torch_nsight.analyze.occupancy.add_occupancy` (rows without them, or
            without ``waves``, get no limiter).

    Returns:
        A copy with ``limiter`` (None on other rows) and, on latency-bound rows, the
        verdict's numbers in ``reason`` (before its DRAM roofline clause).
    """
    out = own(df)
    limiters: list[object] = [None] * len(out)
    reasons = out["reason"].tolist() if "reason" in out else [None] * len(out)
    if "bound" in out:
        latency = [at for at, bound in enumerate(out["bound"].tolist()) if bound == "latency"]
        rows = out[[c for c in LIMITER_INPUTS if c in out]].iloc[latency].to_dict("records")
        for at, row in zip(latency, rows, strict=True):  # the latency-bound rows alone
            kind: LimiterKind | CauseKind | None = launch_limiter(row)
            if has_stalls(row) or has_scheduler(row):
                kind = latency_cause(row, kind)  # type: ignore[arg-type]
                words = describe_cause(row, kind)
            else:
                words = describe_limiter(row, kind)  # type: ignore[arg-type]
            limiters[at] = kind
            if kind == "small_grid" and small_grid_title(row):
                words = words.partition(": ")[2]  # the reason has the waves already
            if words:
                reasons[at] = with_clause(reasons[at], words)
    out["limiter"] = pd.Series(limiters, index=out.index, dtype=object)
    if "reason" in out:
        out["reason"] = pd.Series(reasons, index=out.index, dtype=object)
    return out
