"""The cheap tier: FLOPs from the calls table where the counters were not collected, checked
against the counters of a real recorded training step (tests/data/hand_s128)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.recorded import load_recorded
from torch_nsight import analyze as steps
from torch_nsight.analyze.roofline import SASS_COLUMNS, TENSOR_COLUMNS
from torch_nsight.report.sources import ReadOptions, read_source

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def both() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The step analyzed with its counters, and with every FLOP counter and SOL % dropped
    (what metric_set="fast" records), both with the calls table."""
    part = read_source(DATA / "hand_s128.ncu-rep.xz", ReadOptions(cache=False))
    calls = steps.attribute_calls(part.calls)
    full = steps.analyze(part.kernels, calls=calls)
    cut = part.kernels.copy()
    for column in (*SASS_COLUMNS, *TENSOR_COLUMNS, "sm_pct", "mem_pct"):
        cut[column] = float("nan")
    cut["sol_bottleneck"] = None
    return full, steps.analyze(cut, calls=calls)


def test_counters_win_where_they_were_collected(both) -> None:
    full, _ = both
    assert set(full["flops_basis"]) == {"counters"}


def test_analytic_flops_agree_with_the_counters_per_module(both) -> None:
    full, fast = both
    assert set(fast["flops_basis"]) == {"calls"}
    keys = ["module_path", "direction"]
    ratio = fast.groupby(keys)["flops"].sum() / full.groupby(keys)["flops"].sum()
    heavy = full.groupby(keys)["flops"].sum() > 1e7  # the GEMMs and the attention
    assert heavy.sum() == 12
    # tensor-core counters include tile padding (704 -> 768 columns: 0.917)
    assert ratio[heavy].between(0.9, 1.0).all(), ratio[heavy]


def test_every_kernel_is_placed_and_bound_without_counters(both) -> None:
    full, fast = both
    assert fast["pct_of_roof"].notna().all() and fast["bound"].notna().all()
    assert (fast["bound"] == full["bound"]).mean() >= 0.9
    gemm = fast[fast["module"] == "self_attn.qkv_proj"]
    assert set(gemm.loc[gemm["flops"] > 0, "precision"]) == {"tensor_bf16"}


def test_without_a_calls_table_nothing_is_invented() -> None:
    part = read_source(DATA / "hand_s128.ncu-rep.xz", ReadOptions(cache=False))
    cut = part.kernels.copy()
    for column in (*SASS_COLUMNS, *TENSOR_COLUMNS):
        cut[column] = float("nan")
    out = steps.analyze(cut)
    assert out["flops"].isna().all() and out["flops_basis"].isna().all()


def test_every_iteration_of_a_report_recorded_by_hand_gets_its_flops() -> None:
    # a by-hand report without step labels keeps every iteration under one site, while the
    # carried calls table holds the first: two copies of a real GPT-2 forward stand for two
    # iterations; each lm_head GEMM launch must get one call's FLOPs (2 M N K), not 0
    from pathlib import Path

    from torch_nsight.analyze.analytic import fill_flops_from_calls

    data = Path(__file__).resolve().parents[1] / "data" / "profile_fast" / "gpt2_hand.ncu-rep.xz"
    profile = load_recorded(data)
    once = profile.kernels.assign(flops=float("nan"))
    twice = fill_flops_from_calls(pd.concat([once, once], ignore_index=True), profile.calls)
    head = twice[(twice["module"] == "lm_head") & twice["kernel"].str.contains("gemm")]
    assert len(head) == 2 and (head["flops"] == 2 * 4096 * 768 * 50257).all()
    single = fill_flops_from_calls(once, profile.calls)
    assert twice["flops"].sum() == pytest.approx(2 * single["flops"].sum(), rel=0.02)


def test_each_arithmetic_kernel_gets_its_own_share_of_the_flops(both) -> None:
    # a Linear's backward runs two GEMMs and cuDNN's attention backward a conversion kernel
    # beside its own: the counted FLOPs go to the kernels that do them, split by their time,
    # and agree with each kernel's own counters
    full, fast = both
    heavy = full["flops"] > 1e7
    assert heavy.sum() == 17  # 5 GEMMs and the attention forward; 10 GEMMs (2 a Linear) and
    # the attention backward
    ratio = fast.loc[heavy, "flops"] / full.loc[heavy, "flops"]
    assert ratio.between(0.8, 1.2).all(), ratio
    moving = ~full["kernel"].str.contains("nvjet|sdpa")
    assert (fast.loc[moving, "flops"] == 0).all()


def test_the_attention_backward_runs_in_its_inputs_precision(both) -> None:
    # its last inputs are int64 seeds: the precision comes from the bf16 operands
    _, fast = both
    attention = fast[fast["kernel"].str.contains("sdpa") & (fast["direction"] == "bwd")]
    assert list(attention["precision"]) == ["tensor_bf16"]
