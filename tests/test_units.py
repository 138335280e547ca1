"""The one duration formatter in each style its callers write (texts kept from before it
was one: each style's output is the old formatter's), and the one middle cut of a name."""

from __future__ import annotations

from fractions import Fraction

import pytest

from torch_nsight.units import format_duration, shortened

CASES = [  # ns, default (verdicts), timeline sentences, findings' evidence, table cells
    (4_200.0, "4.2 µs", "4.2 µs", "4.2 µs", "4.20"),
    (845_300.0, "845 µs", "845 µs", "845.3 µs", "845.30"),
    (999_999.6, "1,000 µs", "1,000 µs", "1000.0 µs", "1,000.00"),
    (21_340_000.0, "21.3 ms", "21.3 ms", "21.34 ms", "21,340.00"),
    (1_160_000_000.0, "1.16 s", "1160.0 ms", "1160.00 ms", "1,160,000.00"),
    (None, "-", "n/a", "n/a", "-"),
]


@pytest.mark.parametrize(("ns", "default", "timeline", "evidence", "cell"), CASES)
def test_format_duration_styles(ns: float | None, default: str, timeline: str, evidence: str,
                                cell: str) -> None:
    assert format_duration(ns) == default
    assert format_duration(ns, largest="ms", decimals=1, missing="n/a") == timeline
    assert format_duration(ns, largest="ms", decimals=2, missing="n/a") == evidence
    assert format_duration(ns, unit="µs", decimals=2, with_unit=False) == cell


def test_format_duration_in_one_unit() -> None:
    assert format_duration(845_300.0, unit="ms", decimals=3) == "0.845 ms"
    assert format_duration(5e8, largest="µs") == "500,000 µs"


def test_shortened_cuts_a_name_in_its_middle_by_the_share_given() -> None:
    """One middle cut for every caller: lines of text keep two thirds of what they keep from
    a name's start, a table's module paths one third (their end says which module it is)."""
    name = "transformer.h.0.attn.c_attn"
    assert shortened(name, len(name)) == name
    assert shortened(name, 13) == "transfor…attn"
    assert shortened(name, 13, head=Fraction(1, 3)) == "tran…n.c_attn"
