"""Durations and byte counts as a person reads them, for every stage.

Stage-neutral (no pandas): analyze writes these into its evidence sentences, render into
tables and plot titles. Each helper takes a raw value in the unit the analysis columns carry
(ns, bytes) and returns a short string with its unit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

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


#: The units a duration is written in, largest first, with their length in ns.
_UNITS = {"s": 1e9, "ms": 1e6, "µs": 1e3}
#: The units chosen by size (below the smallest, µs).
_SCALE_UNITS = ("s", "ms")
DurationUnit = Literal["s", "ms", "µs"]


def format_duration(duration_ns: Any, *, largest: DurationUnit = "s",
                    unit: DurationUnit | None = None, decimals: int | None = None,
                    missing: str = MISSING, with_unit: bool = True) -> str:
    """Return a duration given in ns as a person reads it: the one duration formatter.

    Args:
        duration_ns: the duration in ns.
        largest: the largest unit the value may be written in (from the largest that fits,
            down to µs).
        unit: always this unit instead (``0.845 ms``); ``decimals`` then apply as given.
        decimals: decimals in s and ms, and one fewer in µs (still 0 from 10 µs, 1 below).
            None: 2 below 10 of a unit, else 1.
        missing: what a missing value reads as.
        with_unit: False leaves the unit out (a table whose header carries it).

    Returns:
        For example ``1.16 s``, ``21.3 ms``, ``845 µs``, ``4.2 µs`` (the defaults); with
        ``largest="ms", decimals=2`` (findings' evidence) ``21.34 ms``, ``845.3 µs``; with
        ``largest="ms", decimals=1`` (the timeline's) ``1160.0 ms``, ``845 µs``; with
        ``unit="µs", decimals=2, with_unit=False`` (tables) ``1,019.87``.
    """
    if is_missing(duration_ns):
        return missing
    ns = float(duration_ns)
    sizes = _SCALE_UNITS[_SCALE_UNITS.index(largest):] if largest in _SCALE_UNITS else ()
    chosen: str = unit or next((name for name in sizes if abs(ns) >= _UNITS[name]), "µs")
    if unit is not None:
        places = 2 if decimals is None else decimals
    elif chosen == "µs":  # 845 µs, 4.2 µs; at least decimals - 1
        places = 0 if abs(ns) >= 1e4 else 1
        places = places if decimals is None else max(places, decimals - 1)
    else:  # 1.16 s, 21.3 ms
        places = (decimals if decimals is not None
                  else 2 if abs(ns) < 10 * _UNITS[chosen] else 1)
    # thousands separated in µs, except where findings' 999,999.6 ns read "1000.0 µs"
    separator = "," if chosen == "µs" and (unit or (decimals or 1) <= 1) else ""
    text = f"{ns / _UNITS[chosen]:{separator}.{places}f}"
    return f"{text} {chosen}" if with_unit else text


def format_bytes(count: float) -> str:
    """Return a byte count with a decimal prefix: ``1.2 GB``, ``3.4 MB``, ``5.0 kB``,
    ``12 B``."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` with its noun, singular for one (``1 kernel``, ``3 kernels``,
    ``2 kernel launches``; ``plural`` where adding an ``s`` is wrong).

    Args:
        count: how many.
        noun: the noun for one.
        plural: the noun for several (default: ``noun`` + ``s``).

    Returns:
        The words, the count with thousands separators.
    """
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


#: Names :func:`listed` gives before it says how many more there are.
NAMES_LISTED = 12


#: The longest name a line of text shows whole (:func:`shortened`).
NAME_CHARS = 100
#: The share of a :func:`shortened` name's kept characters taken from its start.
HEAD_SHARE = Fraction(2, 3)


def shortened(name: object, limit: int = NAME_CHARS, *, head: Fraction = HEAD_SHARE) -> str:
    """``name`` as text, one of more than ``limit`` characters cut in its middle (``…``):
    its start and its end say which it is, and a line stays a line. ``head`` is the share
    of the ``limit - 1`` characters kept that comes from its start (rounded down)."""
    text = str(name)
    if len(text) <= limit:
        return text
    start = math.floor((limit - 1) * head)
    return text[:start] + "…" + text[len(text) - (limit - 1 - start):]


def listed(names: Sequence[object]) -> str:
    """``names`` joined with commas, each :func:`shortened`: the first :data:`NAMES_LISTED`
    of many, then how many more (a trace of thousands of shapes, named on one line)."""
    shown = ", ".join(shortened(name) for name in names[:NAMES_LISTED])
    more = len(names) - NAMES_LISTED
    return shown + (f" and {more:,} more" if more > 0 else "")
