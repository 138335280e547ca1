"""One profiled kernel of an ``ncu_report`` report as one flat record (a plain dict).

Only the metrics declared in :mod:`torch_nsight.metrics` are read, each by name
(``metric_by_name``), never by walking ``metric_names()``: opening a kernel's record is the
expensive part and the per-kernel work must stay small. A counter the report lacks is
rebuilt from the rate Nsight Compute's roofline sections store (:data:`FALLBACKS`); the
rules with a speedup estimate and the NVTX ranges around the kernel come with it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from torch_nsight import naming
from torch_nsight.metrics import METRICS
from torch_nsight.report.names import format_dims, short_kernel_name
from torch_nsight.report.ncu_import import WORKLOADS, import_reader

__all__ = ["read_action", "plain_message", "FALLBACKS", "SOL_RULE"]

SOL_RULE = "SOLBottleneck"
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
        "workload": WORKLOADS.get(int(action.workload_type()), "other"),
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
