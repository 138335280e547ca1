"""Hotspot ranking and next-step hints (pure pandas; the hints worded by render)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest

from tests.recorded import load_recorded
from torch_nsight.analyze import hotspots, next_step_code
from torch_nsight.render.hotspot_words import next_step_words, word_hotspots


def next_step(bound: object, small_grid: bool, precision: object, *args: object,
              **kwargs: object) -> str:
    """The next step analysis codes for a kernel of this class, in render's words."""
    words = next_step_words(next_step_code(bound, small_grid, precision, *args, **kwargs),
                            {"precision": precision})
    assert words is not None
    return words


def test_kernels_ranked_by_headroom_then_time(block: pd.DataFrame) -> None:
    top = hotspots(block, n=3)
    assert top["kernel"].tolist() == ["softmax", "gemm", "gemm"]
    assert top["headroom_ns"].tolist() == [15.0, 5.0, 1.0]


def test_kernels_ranked_by_time(block: pd.DataFrame) -> None:
    top = hotspots(block, n=2, order="time")
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
    top = hotspots(block, n=2, order="time", level="module")
    assert top["module_path"].tolist() == ["Block/attn/attn.proj", "Block/attn"]
    assert top["exclusive_ns"].tolist() == [40.0, 20.0]
    assert top["next_step_code"].tolist() == ["less_work", "less_work"]  # compute-bound
    assert word_hotspots(top)["next_step"].str.len().gt(0).all()


@pytest.mark.parametrize("kwargs", [{"n": 0}, {"n": 2.5}, {"order": "flops"}, {"level": "op"}])
def test_bad_arguments(block: pd.DataFrame, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        hotspots(block, **kwargs)


def test_next_step_hints() -> None:
    # Nsight Compute's Small Grid verdict, as a code: the reason's words are not read
    assert next_step("latency", True, "fp32").startswith("fuse it or give it more blocks")
    # no launch limiter: the stalls are what is left to look at
    assert "launch is not the limit" in next_step("latency", False, None)
    # a launch limiter: its fix, action first, then its name
    assert next_step("latency", False, None, limiter="registers").endswith(
        "occupancy limited by registers")
    assert next_step("latency", True, None, limiter="small_grid").startswith(
        "give it more work")
    assert next_step("memory", False, None, limiter="registers").startswith(
        "cut memory traffic")
    assert "tensor cores" in next_step("compute", False, "fp32", "compute", 85.0)
    assert "near the FLOP roof" in next_step("compute", False, "tensor_bf16", "compute", 85.0)
    assert "near" not in next_step("compute", False, "tensor_bf16", "compute", 30.0)
    assert "profile it under Nsight Compute" in next_step(None, False, None)


def test_dram_advice_only_on_the_memory_side_of_the_dram_roofline() -> None:
    # memory-bound by ncu's SOL and below the ridge: DRAM traffic is what to cut
    assert next_step("memory", False, "fp32", "memory", 80.0).startswith("cut DRAM traffic")
    # memory-bound by ncu's SOL (L1/L2/DRAM) but above the ridge: DRAM is not the limit
    on_chip = next_step("memory", False, "fp32", "compute", 10.0, "my_stencil_kernel")
    assert on_chip.startswith("cut L1/L2 traffic")
    assert "DRAM roofline is not the limit" in on_chip
    gemm = next_step("memory", False, "tensor_bf16", "compute", 10.0,
                     "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_32x2_tn_align1")
    assert gemm.startswith("check shapes, alignment and dtype")
    assert "DRAM roofline is not the limit" in gemm
    # the same GEMM near its roof: the shapes are not the suspect, on-chip traffic is
    assert next_step("memory", False, "tensor_bf16", "compute", 75.0, "cutlass_gemm").startswith(
        "cut L1/L2 traffic")
    # side unknown (no roofline): no claim about DRAM either way
    unknown = next_step("memory", False, None)
    assert "DRAM" not in unknown and unknown.startswith("cut memory traffic")
    for step in (on_chip, gemm, unknown):
        assert "cut DRAM" not in step


def test_compute_bound_below_the_ridge_is_not_told_to_use_tensor_cores() -> None:
    # SM busy but few FLOPs per DRAM byte (a layout transform): the FLOPs are not the work
    step = next_step("compute", False, "fp32", "memory", 8.0, "nchwToNhwcKernel")
    assert step.startswith("cut instructions") and "tensor" not in step


def test_hotspots_pass_the_roofline_side_to_the_next_step(block: pd.DataFrame) -> None:
    # every kernel memory-bound by ncu; softmax and norm below the ridge, the GEMMs above
    work = block.assign(bound="memory", roofline_side=["memory", "compute", "memory",
                                                       "compute", "memory"])
    # tensor-core GEMMs (a GEMM of fp32 FLOPs on CUDA cores is told tensor cores first)
    work["precision"] = work["precision"].mask(work["kernel"] == "gemm", "tensor_bf16")
    mlp = work["module_path"] == "Block/mlp"
    work.loc[mlp, ["headroom_ns", "roof_time_ns"]] = [18.0, 2.0]  # 2 of 20 ns: 10% of roof
    top = word_hotspots(hotspots(work, n=5)).set_index("module_path")
    assert top.loc["Block/attn", "next_step"].startswith("cut DRAM traffic")
    # attn.proj's GEMM runs at (40 - 5) / 40 = 87.5% of its roof: on-chip traffic, not shapes
    assert top.loc["Block/attn/attn.proj", "pct_of_roof"] == pytest.approx(87.5)
    assert top.loc["Block/attn/attn.proj", "next_step"].startswith("cut L1/L2 traffic")
    assert top.loc["Block/mlp", "pct_of_roof"] == pytest.approx(10.0)
    assert top.loc["Block/mlp", "next_step"].startswith("check shapes, alignment and dtype")


def test_a_site_shows_the_evidence_of_its_own_bound() -> None:
    # HF GPT-2's GELU sites: 6 of 8 launches latency-bound with reasons a percent apart, 2
    # memory-bound with one repeated reason; the row must not say latency with memory evidence
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "profile_fast" / "gpt2_hand.ncu-rep.xz"
    profile = load_recorded(data)
    k = profile.kernels
    launches = set(zip(k["module"], k["kernel"], k["bound"], k["reason"], strict=True))
    sites = profile.hotspots(n=400, order="time", fold=False)
    mixed = 0
    for row in sites.itertuples():
        assert (row.module, row.kernel, row.bound, row.reason) in launches
        mixed += k[(k["module"] == row.module) & (k["kernel"] == row.kernel)]["bound"].nunique() > 1
    assert mixed > 0  # the report has such sites


def test_by_is_not_a_sort_order(block: pd.DataFrame) -> None:
    # by= named the order in 0.1 and the kind of row elsewhere: it went before 1.0
    with pytest.raises(TypeError, match="by"):
        hotspots(block, n=2, by="time")  # type: ignore[call-arg]


def test_the_dominant_value_is_the_same_with_the_groups_given() -> None:
    """kernel_hotspots groups its keys once and hands each column the group numbers: the
    values and their order are those of grouping the keys again (a recorded sweep)."""
    from pathlib import Path

    import torch_nsight
    from torch_nsight.analyze.frames import dominant, filled, keyed
    from torch_nsight.vocabulary import KERNEL_KEYS

    data = Path(__file__).resolve().parents[1] / "data"
    kernels = torch_nsight.load(data / "hand_s128.ncu-rep.xz").kernels
    work = keyed(kernels, list(KERNEL_KEYS), ["duration_ns", "bound", "reason", "precision"])
    codes = work.groupby(list(KERNEL_KEYS), sort=False).ngroup().to_numpy()
    agrees = (work["duration_ns"] > work["duration_ns"].median()).to_numpy()
    distinct = 0
    for column in ("bound", "reason", "precision"):
        # by definition: the (keys, value) sums, the largest of each group, ties first seen
        sums = (work.assign(_value=filled(work[column]))
                .groupby([*KERNEL_KEYS, "_value"], sort=False, dropna=False)["duration_ns"]
                .sum().reset_index().sort_values("duration_ns", ascending=False,
                                                 kind="stable"))
        expected = sums.drop_duplicates(subset=list(KERNEL_KEYS)).set_index(
            list(KERNEL_KEYS))["_value"]
        distinct = max(distinct, expected.nunique())
        for given in (None, codes):  # (types aside: object text, or pandas' str)
            pd.testing.assert_series_equal(
                dominant(work, KERNEL_KEYS, column, groups=given), expected,
                check_dtype=False, check_index_type=False)
        pd.testing.assert_series_equal(
            dominant(work[agrees], KERNEL_KEYS, column),
            dominant(work[agrees], KERNEL_KEYS, column, groups=codes[agrees]))
        assert agrees.any() and not agrees.all()
    assert distinct > 1  # a column whose sites differ
