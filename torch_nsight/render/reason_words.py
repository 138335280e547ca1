"""The words of a kernel's verdict (``reason``): the evidence for its bound, the numbers
of what limits a latency-bound launch, then its place on the DRAM roofline, written here,
once, from the codes and numbers analysis leaves in the row.

Analysis decides (:mod:`torch_nsight.analyze.classify`: ``bound``, ``basis`` and
``reason_code``, the Nsight Compute verdict it followed; :mod:`torch_nsight.analyze.limiter`:
``limiter``) and keeps the numbers (SOL percentages, waves, occupancy, warp states); nothing
there reads these words back. docs/roofline.md lists every form::

    SOL memory 96% > compute 19% (L1/L2/DRAM); DRAM roofline: 10% of bf16 tensor roof
    small grid (0.4 waves), SOL memory 3%, compute 2%; 53 blocks on 132 SMs; DRAM roofline: ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from torch_nsight.analyze.classify import (
    BALANCED,
    LATENCY_ISSUE,
    LATENCY_PCT,
    ROOF_LATENCY_PCT,
    SMALL_GRID,
    TITLE_OF_CODE,
    estimate_sol,
)
from torch_nsight.analyze.limiter import (
    LimiterKind,
    small_grid_title,
    tail_idle_pct,
)
from torch_nsight.analyze.occupancy import as_number as _number
from torch_nsight.analyze.stalls import (
    GROUP_CAUSE,
    LAUNCH_OVERHEAD_NS,
    CauseKind,
    StallGroup,
    dominant_group,
    group_shares,
    has_scheduler,
    has_stalls,
    top_reason,
)
from torch_nsight.units import format_duration

#: The units ncu's memory throughput (``mem_pct``) covers: its busiest memory unit.
MEMORY_UNITS = "L1/L2/DRAM"


def _pct(value: float, below: float = math.inf) -> str:
    """A whole percentage; one decimal, rounded down, where rounding would reach ``below``."""
    if 0 < value < 0.5:
        return "<1%"
    if value < below <= round(value):
        return f"{math.floor(value * 10) / 10:.1f}%"
    return f"{value:.0f}%"


def _compare(first: float, second: float) -> tuple[str, str, str]:
    """Both percentages and the sign between them; a decimal where whole numbers tie."""
    sign = ">" if first > second else "<" if first < second else "="
    if f"{first:.0f}" == f"{second:.0f}" and first != second:
        return f"{first:.1f}%", sign, f"{second:.1f}%"
    return _pct(first), sign, _pct(second)


def _waves(waves: float) -> str:
    if waves < 0.01:
        return "<0.01"
    return f"{waves:.2g}" if waves < 0.95 else f"{waves:.3g}"  # 0.996 stays under one


def roof_name(side: object, precision: object = None) -> str:
    """Name the roofline ceiling a kernel sits under: ``DRAM roof``, ``bf16 tensor roof``...

    Args:
        side: ``roofline_side`` (``compute``/``memory``) or None.
        precision: the kernel's dominant precision (``tensor_bf16``, ``fp32``...) or None.

    Returns:
        The roof's name; ``roof`` when the side is unknown.
    """
    if side == "memory":
        return "DRAM roof"
    if side != "compute":
        return "roof"
    if isinstance(precision, str) and precision.startswith("tensor_"):
        return f"{precision.removeprefix('tensor_')} tensor roof"
    if isinstance(precision, str) and precision != "none":
        return f"{precision} roof"
    return "compute roof"


#: How the reason's DRAM roofline clause starts.
ROOF_CLAUSE = "DRAM roofline: "


def _roof_fact(side: object, pct: float, precision: object) -> str:
    """The DRAM roofline position, labelled as such: ``DRAM roofline: 10% of bf16 tensor
    roof``; empty when unknown."""
    if pd.isna(pct):
        return ""
    return f"{ROOF_CLAUSE}{_pct(pct, ROOF_LATENCY_PCT)} of {roof_name(side, precision)}"


def _sol_evidence(title: str, sm_pct: float, mem_pct: float, waves: float,
                  bound: str | None) -> str:
    """The SOL percentages behind a rule's title, the limiting side first."""
    if pd.isna(sm_pct) or pd.isna(mem_pct):
        return f"ncu rule: {title.lower()}"
    if title in (SMALL_GRID, LATENCY_ISSUE):
        mem, sm = _pct(mem_pct, LATENCY_PCT), _pct(sm_pct, LATENCY_PCT)
        if title == LATENCY_ISSUE:
            return f"SOL memory {mem}, compute {sm}, both < {LATENCY_PCT:.0f}%"
        grid = "small grid" if pd.isna(waves) else f"small grid ({_waves(waves)} waves)"
        return f"{grid}, SOL memory {mem}, compute {sm}"
    if bound == "memory":
        mem, sign, sm = _compare(mem_pct, sm_pct)
        pair = f"memory {mem} {sign} compute {sm}"
    else:
        sm, sign, mem = _compare(sm_pct, mem_pct)
        pair = f"compute {sm} {sign} memory {mem}"
    return f"SOL {pair} ({MEMORY_UNITS})" + (", balanced" if title == BALANCED else "")


def _estimate_evidence(title: str, compute: float, compute_unit: str, memory: float,
                       memory_unit: str, waves: float, bound: str | None) -> str:
    """``SOL estimate: compute 83% (tensor pipe) > memory 26% (DRAM)`` and the like."""
    sm = f"compute {_pct(compute, LATENCY_PCT)} ({compute_unit})"
    mem = f"memory {_pct(memory, LATENCY_PCT)} ({memory_unit})"
    if title in (SMALL_GRID, LATENCY_ISSUE):
        grid = "" if title == LATENCY_ISSUE or pd.isna(waves) else f"small grid ({_waves(waves)} waves), "
        return f"SOL estimate: {grid}{mem}, {sm}, both < {LATENCY_PCT:.0f}%"
    first, second = (mem, sm) if bound == "memory" else (sm, mem)
    sign = "=" if compute == memory else ">"
    return f"SOL estimate: {first} {sign} {second}" + (", balanced" if title == BALANCED else "")



#: What each stall group's warps wait for, in the reason.
_WAITS_ON: dict[StallGroup, str] = {
    "memory": "waits on global memory",
    "synchronization": "waits at barriers",
    "issue": "waits on an issue slot or a math pipe",
    "shared_memory": "waits on shared memory or special math (MIO)",
}


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
    if kind == "one_block":
        where = "" if math.isnan(sms) else f" of {_count(sms)}"
        threads = _number(row.get("block_size"))
        block = "one block" if math.isnan(threads) else f"one block of {_count(threads)} threads"
        return f"{block}, on one SM{where}"
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




def _evidence(row: Mapping[str, object]) -> str:
    """classify's verdict in words: the SOL evidence (or the roofline's), then the DRAM
    roofline clause."""
    code, basis, bound = row.get("reason_code"), row.get("basis"), row.get("bound")
    sm, mem, waves = (_number(row.get(c)) for c in ("sm_pct", "mem_pct", "waves"))
    roof = _roof_fact(row.get("roofline_side"), _number(row.get("pct_of_roof")),
                      row.get("precision"))
    title = TITLE_OF_CODE.get(code) if isinstance(code, str) else None
    if title is not None and basis in ("ncu_rule", "sol_pct"):
        evidence = _sol_evidence(title, sm, mem, waves, bound if isinstance(bound, str) else None)
    elif title is not None and basis == "sol_estimate":
        compute, compute_unit, memory, memory_unit = estimate_sol(
            {c: _number(v) for c, v in row.items()})
        evidence = _estimate_evidence(title, compute, compute_unit, memory, memory_unit, waves,
                                      bound if isinstance(bound, str) else None)
    elif basis == "roofline" and bound == "latency":
        return f"{roof}, < {ROOF_LATENCY_PCT:.0f}%"
    elif basis == "roofline":
        return roof
    else:
        return "no SOL or roofline metrics"
    return evidence + (f"; {roof}" if roof else "")


def reason_words(row: Mapping[str, object]) -> str:
    """The ``reason`` of one kernel row: classify's evidence and, on a latency-bound row,
    the numbers of its ``limiter`` before the DRAM roofline clause.

    Args:
        row: a kernel row's codes (``reason_code``, ``basis``, ``bound``, ``limiter``) and
            the numbers they rest on (absent ones unknown).

    Returns:
        ``SOL memory 96% > compute 19% (L1/L2/DRAM); DRAM roofline: 10% of bf16 tensor
        roof`` and the like (docs/roofline.md lists every form).
    """
    reason = _evidence(row)
    if row.get("bound") != "latency":
        return reason
    facts = dict(row)
    kind = facts.get("limiter")
    kind = kind if isinstance(kind, str) else None
    if has_stalls(facts) or has_scheduler(facts):
        words = describe_cause(facts, kind)  # type: ignore[arg-type]
    else:
        words = describe_limiter(facts, kind)  # type: ignore[arg-type]
    if kind == "small_grid" and small_grid_title(facts):
        words = words.partition(": ")[2]  # the reason has the waves already
    return with_clause(reason, words) if words else reason


def dominant_reason(facts: object) -> tuple[str | None, str | None]:
    """The reason of a hotspot: of its launches' reasons (``reason_facts``: each distinct
    set of codes and numbers with the time it holds, as
    :func:`torch_nsight.analyze.hotspots.kernel_hotspots` keeps them), the one holding the
    most time (ties: the first seen), with the ``reason_code`` of the launches it words. A
    table saved before the codes carries its words (``said``) and no code."""
    if not isinstance(facts, tuple) or len(facts) != 2 or not facts[1]:
        return None, None
    names, sets = facts
    held: dict[str, list] = {}
    for weight, values in sets:
        row = dict(zip(names, values, strict=True))
        words = (row["said"] or "") if "said" in row else reason_words(row)
        held.setdefault(words, [0.0, row.get("reason_code")])[0] += weight
    words, (_, code) = max(held.items(), key=lambda item: item[1][0])  # the first largest
    return words or None, code
