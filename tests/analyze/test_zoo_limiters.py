"""What limits the latency-bound hotspots of zoo models nothing was tuned on, from the fast
set's one pass alone (tests/data/zoo_fast: recorded with the scheduler's three figures,
achieved occupancy and the eligible and issued warps per scheduler, no stall reason).
Every number a reason states is read back from the kernel's own columns."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from tests.recorded import load_recorded
from torch_nsight.analyze import hotspots
from torch_nsight.analyze.limiter import LIMITER_CODES
from torch_nsight.analyze.stalls import FEW_ELIGIBLE, ISSUE_BUSY, SCHEDULER_COLUMNS
from torch_nsight.render.hotspot_words import word_hotspots

DATA = Path(__file__).resolve().parents[1] / "data" / "zoo_fast"
MODELS = ("bert", "roberta_ragged", "llama_decode", "convnext_t")


@pytest.fixture(scope="module", params=MODELS)
def kernels(request: pytest.FixtureRequest) -> pd.DataFrame:
    frame = load_recorded(DATA / f"{request.param}.ncu-rep.xz").kernels
    return frame[frame["duration_ns"].notna()]


def test_every_latency_bound_kernel_has_the_schedulers_figures(kernels) -> None:
    latency = kernels[kernels["bound"] == "latency"]
    assert len(latency) > 50
    assert latency[list(SCHEDULER_COLUMNS)].notna().all().all()


def test_at_most_one_top_10_latency_row_without_a_named_cause(kernels) -> None:
    """Issue 32's target, on recorded reports of models that only verify."""
    top = word_hotspots(hotspots(kernels, n=10))
    latency = top[top["bound"] == "latency"]
    assert len(latency) > 0
    unnamed = latency[~latency["next_step_code"].isin(LIMITER_CODES)]
    assert len(unnamed) <= 1, list(unnamed["reason"])
    for reason in latency["reason"]:
        assert re.search(r"\d", reason.rpartition("latency")[2]), reason  # numbers behind it


def test_each_cause_from_the_schedulers_figures_is_said_with_them(kernels) -> None:
    rows = kernels[kernels["bound"] == "latency"].to_dict("records")
    seen = set()
    for row in rows:
        kind, reason = row["limiter"], row["reason"]
        seen.add(kind)
        eligible = row["eligible_warps_per_scheduler"]
        issued = 100 * row["issued_warps_per_scheduler"]
        if kind == "waiting_warps":
            assert eligible < FEW_ELIGIBLE and issued < 100 * ISSUE_BUSY
            assert f"{eligible:.2g} eligible warp" in reason
            assert "warps wait on memory or a dependency" in reason
            assert f"schedulers issue on {issued:.0f}% of cycles" in reason
        if kind == "instruction_issue":
            assert issued >= 100 * ISSUE_BUSY
            assert f"schedulers issue on {issued:.0f}% of cycles: instruction-bound" in reason
        if kind == "few_warps":
            assert row["achieved_occupancy_pct"] < row["occupancy_pct"] / 2
            assert f"achieved occupancy {row['achieved_occupancy_pct']:.0f}% of " in reason
        assert "% of stalls" not in reason  # no stall reason was recorded
    assert seen & {"waiting_warps", "instruction_issue", "few_warps", "launch_overhead"}
