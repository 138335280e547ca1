"""The events of a Chrome trace, checked before :mod:`torch_nsight.report.trace` reads them.

A trace is JSON anyone can edit or damage: an event whose times are not finite,
non-negative numbers, or whose ``args`` is not an object, is left out with one counted
warning per trace ("3 kernel events with invalid durations left out"); fields a reader
takes from ``args`` (correlation, device, stream, bytes, grid, block) keep their value
only when it has the right type. What comes out holds only valid values::

    {"ph": "X", "cat": "kernel" | ... | None, "name": str, "tid": int | str | None,
     "ts": float >= 0, "dur": float >= 0, "args": {"correlation": int, "device": int,
     "stream": int, "bytes": float, "grid": [int, int, int], "block": [...], ...}}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch_nsight.checks import LeftOut, number, whole

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: ``args`` fields read as whole numbers, with the value a missing or invalid one gets.
_WHOLE_ARGS = {"correlation": None, "device": 0, "stream": None,
               "registers per thread": None}


def _args(raw: Any) -> dict[str, Any] | None:
    """The ``args`` of an event with invalid values removed; None when it is no object."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return None
    args = {k: v for k, v in raw.items() if k not in _WHOLE_ARGS
            and k not in ("bytes", "grid", "block")}
    for key, default in _WHOLE_ARGS.items():
        value = whole(raw.get(key))
        if value is not None or default is not None:
            args[key] = value if value is not None else default
    size = number(raw.get("bytes"))
    if size is not None:
        args["bytes"] = size
    for key in ("grid", "block"):
        dims = raw.get(key)
        if isinstance(dims, list) and len(dims) == 3 and all(
                whole(d) is not None for d in dims):
            args[key] = [whole(d) for d in dims]
    return args


def clean_events(document: Mapping[str, Any], where: str
                 ) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The complete (``ph: X``) events of a trace with valid fields, and its GPUs by id.

    Args:
        document: the parsed trace (a dict with a ``traceEvents`` list).
        where: the trace's path, for the warning.

    Returns:
        (events, {device id: GPU name}); one warning logged when events were left out.
    """
    left = LeftOut(where)
    events = []
    for raw in document["traceEvents"]:
        if not isinstance(raw, dict) or raw.get("ph") != "X":
            continue
        cat = raw.get("cat") if isinstance(raw.get("cat"), str) else None
        what = GPU_CATEGORIES.get(cat or "", "CPU")
        # µs; beyond 1e17 (3,000 years) a time is damage, not a measurement
        start = number(raw.get("ts"), maximum=1e17)
        duration = number(raw.get("dur"), maximum=1e17)
        if start is None or duration is None:
            left.add(what, "invalid start times" if start is None else "invalid durations")
            continue
        args = _args(raw.get("args"))
        if args is None:
            left.add(what, "args that are not an object")
            continue
        name, tid = raw.get("name"), raw.get("tid")
        events.append({**raw, "cat": cat, "ts": start, "dur": duration, "args": args,
                       "name": name if isinstance(name, str) else str(name or ""),
                       "tid": tid if isinstance(tid, (int, str)) and not isinstance(tid, bool)
                       else None})
    left.warn()
    gpus: dict[int, str] = {}
    properties = document.get("deviceProperties")
    for index, item in enumerate(properties if isinstance(properties, list) else []):
        if isinstance(item, dict):
            device = whole(item.get("id", index))
            if device is not None:
                gpus[device] = str(item.get("name"))
    return events, gpus
