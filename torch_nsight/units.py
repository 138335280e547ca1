"""Durations and byte counts as a person reads them, for every stage.

Stage-neutral (no pandas): analyze writes these into its evidence sentences, render into
tables and plot titles. Each helper takes a raw value in the unit the analysis columns carry
(ns, bytes) and returns a short string with its unit.
"""

from __future__ import annotations

import math
from typing import Any

#: What a missing value (None, NaN) reads as in a table.
MISSING = "-"


def is_missing(value: Any) -> bool:
    """Return True for None, NaN and other values that cannot be read as a number.

    Args:
        value: anything.

    Returns:
        Whether the value is absent.
    """
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def _microseconds(ns: float) -> str:
    """``845 µs`` from 10 µs up, ``4.2 µs`` below."""
    return f"{ns / 1e3:,.0f} µs" if abs(ns) >= 1e4 else f"{ns / 1e3:.1f} µs"


def format_duration(duration_ns: Any) -> str:
    """Return a duration given in ns with its unit, as a person says it: ``1.16 s``,
    ``21.3 ms``, ``845 µs``, ``4.2 µs``; ``-`` when missing."""
    if is_missing(duration_ns):
        return MISSING
    ns = float(duration_ns)
    for scale, unit in ((1e9, "s"), (1e6, "ms")):
        if abs(ns) >= scale:
            return f"{ns / scale:.{2 if abs(ns) < 10 * scale else 1}f} {unit}"
    return _microseconds(ns)


def format_duration_ms(duration_ns: Any, precision: int = 1) -> str:
    """Return a duration given in ns in ms, or in µs below 1 ms; ``n/a`` when missing (the
    evidence sentences of the timeline and of findings).

    Args:
        duration_ns: the duration in ns.
        precision: decimals in ms (1 or more). At 1, the timeline's: ``1160.0 ms``,
            ``21.3 ms``, ``845 µs``, ``4.2 µs``; above, µs have one decimal fewer than ms,
            as findings' 2: ``21.34 ms``, ``845.3 µs``, ``4.2 µs``.

    Returns:
        The duration with its unit.
    """
    if is_missing(duration_ns):
        return "n/a"
    ns = float(duration_ns)
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.{precision}f} ms"
    return _microseconds(ns) if precision == 1 else f"{ns / 1e3:.{precision - 1}f} µs"


def format_bytes(count: float) -> str:
    """Return a byte count with a decimal prefix: ``1.2 GB``, ``3.4 MB``, ``5.0 kB``,
    ``12 B``."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"
