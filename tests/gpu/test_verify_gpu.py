"""Measured gains on the GPU: the fixes rebuilt from the recorded calls tables, timed with
CUDA events, against the gain the recorded fixed variants show (within 2x)."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.collect.benchmark_fixes import benchmark_findings

DATA = Path(__file__).resolve().parents[1] / "data"


def recorded_gain(slow: str, fixed: str, variant_slow: str | None = None,
                  variant_fixed: str | None = None) -> float:
    """The slow form's GPU time minus the fixed form's, per run, from the fixtures."""
    def time(path: str, variant: str | None) -> float:
        k = torch_nsight.load(DATA / path, cache=False).kernels
        return float(k.loc[k["variant"] == variant, "duration_ns"].sum() if variant
                     else k["duration_ns"].sum())
    return time(slow, variant_slow) - time(fixed, variant_fixed)


@pytest.mark.gpu
@pytest.mark.parametrize(("path", "finding", "expected"), [
    ("findings_gemm", "gemm_misaligned",
     lambda: recorded_gain("findings_gemm", "findings_gemm", "n50257", "n50304")),
    ("findings_fp32_off", "fp32_no_tensor_cores",
     lambda: recorded_gain("findings_fp32_off", "findings_fp32_on")),
])
def test_measured_gain_agrees_with_the_recorded_fix(path: str, finding: str,
                                                    expected: object) -> None:
    found = benchmark_findings(torch_nsight.load(DATA / path, cache=False), top=3)
    row = found[found["finding"] == finding].iloc[0]
    assert bool(row["benchmarked"]) and row["gain_basis"] == "measured"
    assert row["after_ns"] < row["before_ns"]
    gain = expected()  # type: ignore[operator]
    assert gain / 2 <= row["est_gain_ns"] <= gain * 2


@pytest.mark.gpu
def test_channels_last_is_timed_for_the_layout_finding() -> None:
    found = benchmark_findings(torch_nsight.load(DATA / "findings_conv", cache=False), top=10)
    layout = found[(found["finding"] == "layout_conversion") & found["benchmarked"]
                   & found["before_ns"].notna()]  # (not a row whose calls another counts)
    assert len(layout) >= 1
    assert (layout["after_ns"] < layout["before_ns"]).all()


@pytest.mark.gpu
def test_channels_last_switch_timed_against_the_recorded_pair() -> None:
    """EfficientNet-B0's step recorded NCHW and channels-last (tests/data/channels_last):
    its convolutions and batch norms timed in both layouts on this GPU add up to the
    kernel time the recorded pair saved, within 2x."""
    nchw = torch_nsight.load(DATA / "channels_last" / "efficientnet_nchw.ncu-rep.xz",
                             cache=False)
    found = benchmark_findings(nchw, top=5, samples=10)
    switch = found[found["fix_code"].eq("channels_last")]
    assert switch["benchmarked"].all() and len(switch) > 2
    gain = recorded_gain("channels_last/efficientnet_nchw.ncu-rep.xz",
                         "channels_last/efficientnet_b0.ncu-rep.xz")
    assert gain > 0
    assert gain / 2 <= switch["est_gain_ns"].sum() <= gain * 2
