"""What the CPU was doing in a GPU gap is the user's work, never this library's own ranges
(the measured step's label, module ranges), on every recorded timeline in tests/data."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.recorded import load_recorded
from torch_nsight.naming import parse_measure_range

DATA = Path(__file__).resolve().parents[1] / "data"
TIMELINES = ["timeline_train", "timeline_decode", "timeline_copy", "compile/vit_timeline",
             "compile/reduce_overhead_timeline", "graph_captured_timeline"]


@pytest.mark.parametrize("name", TIMELINES)
def test_no_gap_names_one_of_our_ranges_as_cpu_activity(name: str) -> None:
    profile = load_recorded(DATA / name)
    gaps = profile.timeline[profile.timeline["kind"] == "gap"]
    cpu = [str(c) for c in gaps["cpu"].dropna()]
    assert len(cpu) >= 5
    modules = set(profile.kernels["module"].dropna().astype(str))
    ours = [c for c in cpu if parse_measure_range(c) is not None or c in modules]
    assert ours == []
