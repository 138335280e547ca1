"""FLOP counting, peaks and roofline placement (pure pandas; expectations from the formulas)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from torch_nsight.analyze import add_flops, add_peaks, add_roofline
from torch_nsight.analyze.roofline import SASS_COLUMNS, TENSOR_COLUMNS


def counters(**values: float) -> dict[str, float]:
    row = {c: 0.0 for c in (*SASS_COLUMNS, *TENSOR_COLUMNS)}
    row.update(values)
    return row


def test_cuda_core_flops_count_fma_twice() -> None:
    out = add_flops(pd.DataFrame([counters(fadd_inst=3, fmul_inst=5, ffma_inst=7, dfma_inst=1,
                                           hadd_inst=2, hmul_inst=1, hfma_inst=4)]))
    row = out.iloc[0]
    assert row["flops_fp32"] == 3 + 5 + 2 * 7
    assert row["flops_fp64"] == 2 * 1
    assert row["flops_fp16"] == 2 + 1 + 2 * 4
    assert row["flops"] == 22 + 2 + 11
    assert row["precision"] == "fp32"
    assert bool(row["flops_complete"])


def test_tensor_counters_are_taken_as_flops_and_summed() -> None:
    out = add_flops(pd.DataFrame([counters(tensor_bf16_flops=1000.0, ffma_inst=10)]))
    assert out.iloc[0]["flops"] == 1000.0 + 20.0
    assert out.iloc[0]["precision"] == "tensor_bf16"


def test_kernel_without_float_work_has_precision_none() -> None:
    out = add_flops(pd.DataFrame([counters()]))
    assert out.iloc[0]["flops"] == 0.0 and out.iloc[0]["precision"] == "none"


def test_missing_counter_inside_a_collected_family_counts_zero() -> None:
    row = counters(tensor_bf16_flops=64.0)
    row["tensor_fp8_flops"] = np.nan  # a path this GPU does not have
    out = add_flops(pd.DataFrame([row]))
    assert out.iloc[0]["flops"] == 64.0 and bool(out.iloc[0]["flops_complete"])


def test_missing_family_marks_flops_incomplete() -> None:
    row = counters(ffma_inst=10)
    row.update({c: np.nan for c in TENSOR_COLUMNS})
    zero = counters()
    zero.update({c: np.nan for c in TENSOR_COLUMNS})
    out = add_flops(pd.DataFrame([row, zero]))
    assert out["flops"].tolist() == [20.0, 0.0]
    assert not out["flops_complete"].any()
    assert out["precision"].tolist() == ["fp32", None]  # zero counted FLOPs prove nothing


def test_nothing_collected_gives_nan_flops() -> None:
    out = add_flops(pd.DataFrame({"duration_ns": [1.0]}))
    assert math.isnan(out.iloc[0]["flops"]) and out.iloc[0]["precision"] is None


def test_peaks_are_per_cycle_peak_times_the_kernels_clock() -> None:
    df = pd.DataFrame({
        "source": ["r", "r"], "precision": ["tensor_bf16", "fp32"],
        "sm_clock_hz": [1.5e9, 2.0e9], "dram_clock_hz": [3.0e9, 3.2e9],
        "peak_tensor_bf16_per_cycle": [1000.0, np.nan],
        "peak_ffma_per_cycle": [np.nan, 128.0],
        "peak_dram_bytes_per_cycle": [1504.0, np.nan],
    })
    out = add_peaks(df)
    assert out["peak_flops_per_s"].tolist() == [1000.0 * 1.5e9, 128.0 * 2 * 2.0e9]
    # a device constant missing on one kernel is taken from another kernel of the report
    assert out["peak_bytes_per_s"].tolist() == [1504.0 * 3.0e9, 1504.0 * 3.2e9]


def roof_frame(flops: float, dram: float, duration: float) -> pd.DataFrame:
    return pd.DataFrame({"flops": [flops], "flops_complete": [True], "dram_bytes": [dram],
                         "duration_ns": [duration], "peak_flops_per_s": [1e12],
                         "peak_bytes_per_s": [1e11]})


def test_compute_side_kernel() -> None:
    row = add_roofline(roof_frame(flops=2e6, dram=1e3, duration=4000.0)).iloc[0]
    assert row["roof_time_ns"] == pytest.approx(2000.0)  # 2e6 / 1e12 s
    assert row["pct_of_roof"] == pytest.approx(50.0)
    assert row["headroom_ns"] == pytest.approx(2000.0)
    assert row["intensity"] == pytest.approx(2000.0)
    assert row["ridge_intensity"] == pytest.approx(10.0)
    assert row["roofline_side"] == "compute"
    assert row["achieved_flops_per_s"] == pytest.approx(2e6 / 4e-6)


def test_memory_side_kernel() -> None:
    row = add_roofline(roof_frame(flops=0.0, dram=1e6, duration=20_000.0)).iloc[0]
    assert row["roof_time_ns"] == pytest.approx(10_000.0)
    assert row["headroom_ns"] == pytest.approx(10_000.0) and not row["above_roof"]
    assert row["roofline_side"] == "memory"


def test_a_kernel_above_its_ceiling_is_an_attribution_error_not_a_place(
        caplog: pytest.LogCaptureFixture) -> None:
    # 1 MB in 5 µs at 100 GB/s would be twice the memory roof: no roofline place is shown
    row = add_roofline(roof_frame(flops=0.0, dram=1e6, duration=5000.0)).iloc[0]
    assert row["above_roof"]
    assert math.isnan(row["pct_of_roof"]) and math.isnan(row["headroom_ns"])
    assert row["roofline_side"] is None
    assert "1 kernel(s) (100.0% of GPU time) came out above their roofline ceiling" in caplog.text


def test_incomplete_flops_leave_the_ceiling_unknown() -> None:
    df = roof_frame(flops=2e6, dram=1e3, duration=4000.0).assign(flops_complete=[False])
    row = add_roofline(df).iloc[0]
    assert math.isnan(row["pct_of_roof"]) and row["roofline_side"] is None
