"""Readable numbers for tables and plots: times in µs, work in GFLOP, rates in GB/s.

Every helper takes a raw value in the unit the analysis columns carry (ns, FLOP, bytes,
bytes/s, percent) and returns a short string; a missing value (None, NaN) becomes ``-``.
Durations and byte counts with their unit (``format_duration``), which analyze writes too,
are in the stage-neutral :mod:`torch_nsight.units`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from torch_nsight.units import MISSING, format_duration, is_missing


def format_number(value: Any, decimals: int = 1) -> str:
    """Return ``value`` with thousands separators and a fixed number of decimals.

    Args:
        value: a number (or a missing value).
        decimals: digits after the point.

    Returns:
        For example ``1,234.5``; ``-`` when missing.
    """
    if is_missing(value):
        return MISSING
    return f"{float(value):,.{decimals}f}"


def format_us(duration_ns: Any) -> str:
    """Return a duration given in ns as µs with two decimals (``19.87``).

    Args:
        duration_ns: nanoseconds.

    Returns:
        The number of microseconds, without the unit (the column header carries it).
    """
    return format_duration(duration_ns, unit="µs", decimals=2, with_unit=False)


def format_pct(percent: Any) -> str:
    """Return a percentage (0..100 scale) with one decimal, without the ``%`` sign."""
    return format_number(percent, 1)


def format_giga(value: Any, decimals: int = 2) -> str:
    """Return a count or rate scaled by 1e-9 (FLOP -> GFLOP, bytes/s -> GB/s)."""
    return MISSING if is_missing(value) else format_number(float(value) / 1e9, decimals)


def format_count(value: Any) -> str:
    """Return a count, as an integer when it is one (per-run averages may not be)."""
    if is_missing(value):
        return MISSING
    number = float(value)
    return f"{int(number):,}" if number.is_integer() else f"{number:,.1f}"


def format_rate(value: Any, unit: str) -> str:
    """Return a rate with an SI prefix: ``984 TFLOP/s``, ``4.80 TB/s``.

    Args:
        value: the rate in base units per second.
        unit: ``FLOP/s`` or ``B/s``.

    Returns:
        Three significant digits and a prefix.
    """
    if is_missing(value):
        return MISSING
    number = float(value)
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(number) >= factor:
            return f"{number / factor:.3g} {prefix}{unit}"
    return f"{number:.3g} {unit}"


def shorten(text: Any, width: int) -> str:
    """Return ``text`` cut to ``width`` characters, ending in ``…`` when cut.

    Args:
        text: a string (or a missing value, which becomes ``-``).
        width: the most characters kept.

    Returns:
        The shortened text.
    """
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return MISSING
    text = str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


#: Characters a terminal acts on instead of showing (C0 and C1 controls, escape sequences,
#: bidirectional marks and overrides, line and paragraph separators), and lone surrogates
#: (a byte of a file name that is not UTF-8, which no UTF-8 stream takes): a file or kernel
#: name holding them is shown escaped.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                     "\u2066-\u2069\ud800-\udfff]")


def _escaped(char: str) -> str:
    """``\\x1b``, ``\\u202e``; a byte of a name that is not UTF-8 as itself: ``\\xff``."""
    if "\udc80" <= char <= "\udcff":
        return f"\\x{ord(char) - 0xdc00:02x}"
    return char.encode("unicode_escape").decode("ascii")


def printable(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\n``, ``\\u202e``):
    what any text the command line prints (a table, a line, a csv cell, an error) shows of
    a name read from a file. The one sanitiser: every edge where text leaves goes through it
    (json, which has escapes of its own, through :data:`CONTROL` as ``\\u001b``)."""
    return CONTROL.sub(lambda m: _escaped(m.group()), text)


def printable_rows(rows: list[list[Any]]) -> list[list[str]]:
    """The cells of a table as text, each through :func:`printable`."""
    return [[printable(str(cell)) for cell in row] for row in rows]
