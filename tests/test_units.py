"""The one duration formatter in each style its callers write (texts kept from before it
was one: each style's output is the old formatter's)."""

from __future__ import annotations

import pytest

from torch_nsight.units import format_duration

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
