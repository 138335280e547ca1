"""Hotspot ranking and next-step hints (pure pandas)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest

from torch_nsight.analyze import hotspots, next_step


def test_kernels_ranked_by_headroom_then_time(block: pd.DataFrame) -> None:
    top = hotspots(block, n=3)
    assert top["kernel"].tolist() == ["softmax", "gemm", "gemm"]
    assert top["headroom_ns"].tolist() == [15.0, 5.0, 1.0]


def test_kernels_ranked_by_time(block: pd.DataFrame) -> None:
    top = hotspots(block, n=2, by="time")
    assert top["module"].tolist() == ["attn.proj", "attn"]
    assert top["pct_of_total"].tolist() == pytest.approx([40.0, 20.0])


def test_identical_launches_aggregate_per_run(make_kernel: Callable[..., dict]) -> None:
    df = pd.DataFrame([make_kernel("Net", 10.0, run=0, headroom=2.0),
                       make_kernel("Net", 10.0, run=0, headroom=2.0),
                       make_kernel("Net", 30.0, run=1, headroom=6.0)])
    row = hotspots(df, n=5).iloc[0]
    assert row["launches"] == 1.5 and row["duration_ns"] == 25.0
    assert row["headroom_ns"] == 5.0
    assert row["pct_of_roof"] == pytest.approx(100 * (50 - 10) / 50)


def test_module_level_uses_exclusive_time(block: pd.DataFrame) -> None:
    top = hotspots(block, n=2, by="time", level="module")
    assert top["path"].tolist() == ["Block/attn/attn.proj", "Block/attn"]
    assert top["exclusive_ns"].tolist() == [40.0, 20.0]
    assert top["next_step"].str.len().gt(0).all()


@pytest.mark.parametrize("kwargs", [{"n": 0}, {"n": 2.5}, {"by": "flops"}, {"level": "op"}])
def test_bad_arguments(block: pd.DataFrame, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        hotspots(block, **kwargs)


def test_next_step_hints() -> None:
    assert "grid" in next_step("latency", "small grid (memory side, 4% of roof)", "fp32")
    assert "tensor cores" in next_step("compute", "high compute throughput", "fp32")
    assert "DRAM" in next_step("memory", "", None)
    assert "collect" in next_step(None, "", None)
