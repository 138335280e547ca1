"""Where a sweep's time goes, phase by phase, from wall-clock stamps both sides take.

The child stamps when its process started (from ``/proc``), when its imports were done, when
its job was read (the model unpickled) and when it finished, and times each model build and
each item's warm-ups, calls table, sibling check and profiled iterations. The parent stamps
when it entered :func:`torch_nsight.sweep`, when it launched and saw each child end, and when
the profile was loaded. :func:`breakdown` turns those stamps into seconds per phase:

``prepare`` (argument checks, ``ncu`` queries, pickling the job), ``ncu_start`` (``ncu``
before the Python child starts), ``python_start`` (the child's interpreter and imports:
Python, torch, torch_nsight), ``job_read`` (unpickling the model, which imports the modules
its classes come from), ``settings`` (applying the caller's TF32, cuDNN and SDPA
switches), ``cuda_init`` (the child's CUDA context), ``build`` (factories and
``.to(device, dtype)``), ``warmup`` (inputs and warm-up iterations), ``calls`` (the calls
table's iteration), ``check`` (the sibling check), ``measure`` (the profiled iterations: ncu's
replay), ``cleanup`` (freeing memory after each shape), ``child_exit`` (after the child's last item until it ended: ``ncu`` writing the
report), ``load`` (reading the reports back, analysis, saving).

Plain data: no torch, no pandas.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

#: The phases, in the order they happen.
PHASES = ("prepare", "ncu_start", "python_start", "job_read", "settings", "cuda_init", "build",
          "warmup", "calls", "check", "measure", "cleanup", "child_exit", "load")
#: Each phase in words, for logs and tables.
PHASE_NAMES = {
    "prepare": "prepare (checks, ncu queries, pickling)",
    "ncu_start": "ncu start-up (in a dry run: starting the process)",
    "python_start": "child Python + torch start-up",
    "job_read": "unpickling the job (the model's imports too)",
    "settings": "applying the caller's PyTorch settings",
    "cuda_init": "CUDA start-up",
    "build": "building the model",
    "warmup": "inputs and warm-ups",
    "calls": "calls table",
    "check": "sibling check",
    "measure": "profiled iterations (replay)",
    "cleanup": "freeing memory between shapes",
    "child_exit": "report writing and exit",
    "load": "loading the profile",
}
ITEM_PHASES = ("warmup", "calls", "check", "measure", "cleanup")


def process_start_time() -> float | None:
    """When this process started (seconds since the epoch), from ``/proc``; None elsewhere."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            # the command name (field 2) may hold spaces: count fields after its ')'
            after = handle.read().rsplit(")", 1)[1].split()
        started = int(after[19]) / os.sysconf("SC_CLK_TCK")  # field 22: after boot
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
        return time.time() - (uptime - started)
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def timed(into: MutableMapping[str, float], phase: str) -> Iterator[None]:
    """Add the seconds the block took to ``into[phase]`` (also when it raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        into[phase] = round(into.get(phase, 0.0) + time.perf_counter() - start, 3)


def _span(start: Any, end: Any) -> float | None:
    if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
        return None
    return round(max(0.0, end - start), 3)


def child_phases(launched_at: float | None, ended_at: float | None,
                 results: Mapping[str, Any] | None) -> dict[str, float]:
    """Seconds per phase of one child, from the parent's stamps and the child's results.

    Args:
        launched_at: when the parent started the child's command (epoch seconds).
        ended_at: when the parent saw it end.
        results: the child's result JSON (its ``timing`` stamps, ``build_s`` and the
            ``phases_s`` of its items), or None if it wrote none.

    Returns:
        The phases that could be measured (a child that died early has fewer).
    """
    results = results or {}
    stamps = results.get("timing") or {}
    out: dict[str, float | None] = {
        "ncu_start": _span(launched_at, stamps.get("process_start")),
        "python_start": _span(stamps.get("process_start") or launched_at,
                              stamps.get("imported")),
        "job_read": _span(stamps.get("imported"), stamps.get("job_read")),
        "settings": _span(stamps.get("job_read"), stamps.get("settings_applied")),
        "cuda_init": _span(stamps.get("settings_applied") or stamps.get("job_read"),
                           stamps.get("cuda_ready")),
        "build": round(sum((results.get("build_s") or {}).values()), 3)
        if results.get("build_s") else None,
        "child_exit": _span(stamps.get("done"), ended_at),
    }
    if stamps.get("process_start") is None:  # no /proc: ncu and Python are one span
        out["ncu_start"] = None
    for phase in ITEM_PHASES:
        values = [item["phases_s"][phase] for item in results.get("items", [])
                  if phase in (item.get("phases_s") or {})]
        out[phase] = round(sum(values), 3) if values else None
    return {k: v for k, v in out.items() if v is not None}


def breakdown(*, entered: float, launched: float, settled: float, finished: float,
              children: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """The sweep's time per phase.

    Children run at once on several GPUs or workers: the phases shown are those of the
    child that ended last (the one the sweep waited for); ``children`` keeps every one.

    Args:
        entered: when :func:`torch_nsight.sweep` was entered (epoch seconds).
        launched: when the first child was started.
        settled: when the last child had ended.
        finished: when the profile was loaded (and saved).
        children: :func:`child_phases` per child, with its ``ended_at`` stamp.

    Returns:
        ``total_s``, ``phases_s`` (phase -> seconds, in :data:`PHASES` order), ``other_s``
        (what no phase accounts for: the parent's polling, waiting on a slower sibling) and
        ``children`` (each child's phases).
    """
    last = max(children, key=lambda c: c.get("ended_at") or 0.0, default={})
    phases = {"prepare": round(launched - entered, 3),
              **{k: v for k, v in last.items() if k in PHASES},
              "load": round(finished - settled, 3)}
    ordered = {k: phases[k] for k in PHASES if k in phases}
    total = round(finished - entered, 3)
    return {"total_s": total, "phases_s": ordered,
            "other_s": round(total - sum(ordered.values()), 3),
            "children": [dict(c) for c in children]}


def describe(timing: Mapping[str, Any], *, at_least: float = 0.5) -> str:
    """One line: the total, each phase of ``at_least`` seconds or more (largest first), and
    what the others add up to (``profile.meta.sweeps[i].timing`` has every phase)."""
    phases = sorted((timing.get("phases_s") or {}).items(), key=lambda kv: -kv[1])
    shown = [f"{PHASE_NAMES.get(k, k)} {v:.1f} s" for k, v in phases if v >= at_least]
    rest = timing.get("total_s", 0.0) - sum(v for _, v in phases if v >= at_least)
    if rest >= 0.05:
        shown.append(f"the rest {rest:.1f} s")
    return f"{timing.get('total_s', 0.0):.1f} s" + (": " + ", ".join(shown) if shown else "")
