"""Bound classification against Nsight Compute's SOLBottleneck rule (pure pandas), and the
reason render words from its codes and numbers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from torch_nsight.analyze import classify, sol_title
from torch_nsight.analyze.classify import classify_one
from torch_nsight.render.reason_words import reason_words, roof_name

NAN = math.nan


def classified(title: object, sm: float, mem: float, waves: float, side: object, pct: float,
               precision: object = None) -> tuple[str | None, str, str]:
    """classify's verdict on one kernel, its reason worded by render: (bound, reason,
    basis)."""
    bound, code, basis = classify_one(title, sm, mem, waves, side, pct)
    row = {"reason_code": code, "bound": bound, "basis": basis, "sol_bottleneck": title,
           "sm_pct": sm, "mem_pct": mem, "waves": waves, "roofline_side": side,
           "pct_of_roof": pct, "precision": precision}
    return bound, reason_words(row), basis


@pytest.mark.parametrize(("sm", "mem", "waves", "title"), [
    (10.0, 20.0, 0.5, "Small Grid"),
    (10.0, 20.0, 3.0, "Latency Issue"),
    (10.0, 20.0, NAN, "Latency Issue"),
    (59.9, 59.9, 0.5, "Small Grid"),
    (75.0, 60.0, 2.0, "High Compute Throughput"),
    (50.0, 60.0, 2.0, "High Memory Throughput"),
    (65.0, 70.0, 2.0, "Balanced Throughput"),
    (80.0, 10.0, 2.0, "High Throughput"),
    (NAN, 10.0, 2.0, None),
])
def test_sol_title_reproduces_the_rule(sm: float, mem: float, waves: float,
                                       title: str | None) -> None:
    assert sol_title(sm, mem, waves) == title


@pytest.mark.parametrize(("title", "sm", "mem", "bound", "reason"), [
    ("High Compute Throughput", 70.0, 20.0, "compute",
     "SOL compute 70% > memory 20% (L1/L2/DRAM)"),
    ("High Memory Throughput", 20.0, 70.0, "memory",
     "SOL memory 70% > compute 20% (L1/L2/DRAM)"),
    ("Small Grid", 5.0, 5.0, "latency", "small grid, SOL memory 5%, compute 5%"),
    ("Latency Issue", 30.0, 40.0, "latency", "SOL memory 40%, compute 30%, both < 60%"),
    ("High Throughput", 50.0, 90.0, "memory", "SOL memory 90% > compute 50% (L1/L2/DRAM)"),
    ("High Throughput", 90.0, 50.0, "compute", "SOL compute 90% > memory 50% (L1/L2/DRAM)"),
    ("Balanced Throughput", 70.0, 65.0, "compute",
     "SOL compute 70% > memory 65% (L1/L2/DRAM), balanced"),
    ("Balanced Throughput", 65.0, 65.0, "compute",
     "SOL compute 65% = memory 65% (L1/L2/DRAM), balanced"),
])
def test_stored_rule_title_decides(title: str, sm: float, mem: float, bound: str,
                                   reason: str) -> None:
    # the reason states the percentages the title was given for, the limiting side first
    assert classified(title, sm, mem, NAN, None, NAN) == (bound, reason, "ncu_rule")


def test_memory_bound_on_the_compute_side_of_the_dram_roofline() -> None:
    # ncu: High Throughput, memory 96% > compute 19% -> memory; the DRAM roofline puts the
    # kernel under its bf16 tensor roof at 10%: two facts, each labelled, none contradicted
    bound, reason, basis = classified("High Throughput", 19.4, 96.1, 48.5, "compute", 9.7,
                                        "tensor_bf16")
    assert (bound, basis) == ("memory", "ncu_rule")
    assert reason == ("SOL memory 96% > compute 19% (L1/L2/DRAM); "
                      "DRAM roofline: 10% of bf16 tensor roof")
    assert "high throughput" not in reason


def test_roofline_position_is_a_separate_labelled_fact() -> None:
    bound, reason, basis = classified("Small Grid", 5.0, 5.0, 0.2, "memory", 4.2)
    assert (bound, basis) == ("latency", "ncu_rule")
    assert reason == ("small grid (0.2 waves), SOL memory 5%, compute 5%; "
                      "DRAM roofline: 4% of DRAM roof")
    assert classified("High Compute Throughput", 82.0, 40.0, 2.0, "compute", 82.0, "fp32")[1] \
        == "SOL compute 82% > memory 40% (L1/L2/DRAM); DRAM roofline: 82% of fp32 roof"


@pytest.mark.parametrize(("side", "precision", "roof"), [
    ("memory", "tensor_bf16", "DRAM roof"),
    ("compute", "tensor_tf32", "tf32 tensor roof"),
    ("compute", "fp64", "fp64 roof"),
    ("compute", None, "compute roof"),
    (None, None, "roof"),
])
def test_roof_names(side: str | None, precision: str | None, roof: str) -> None:
    assert roof_name(side, precision) == roof


def test_rounding_never_crosses_a_threshold() -> None:
    # 59.6% would round to 60%, which "both < 60%" contradicts: one decimal, rounded down
    reason = classified("Latency Issue", 59.6, 28.0, 4.5, None, NAN)[1]
    assert reason == "SOL memory 28%, compute 59.6%, both < 60%"
    # equal whole numbers get a decimal, so the sign between them holds
    assert classified(None, 65.4, 65.2, 2.0, None, NAN)[1] == (
        "SOL compute 65.4% > memory 65.2% (L1/L2/DRAM), balanced")
    assert classified(None, NAN, NAN, NAN, "compute", 59.96)[1] == (
        "DRAM roofline: 59.9% of compute roof, < 60%")
    assert classified("Small Grid", 0.3, 0.7, 0.001, "memory", 0.2)[1] == (
        "small grid (<0.01 waves), SOL memory 1%, compute <1%; DRAM roofline: <1% of DRAM roof")


def test_percentages_used_when_the_rule_is_absent() -> None:
    assert classified(None, 85.0, 20.0, 4.0, None, NAN) == (
        "compute", "SOL compute 85% > memory 20% (L1/L2/DRAM)", "sol_pct")


def test_stored_title_without_percentages() -> None:
    assert classified("High Memory Throughput", NAN, NAN, NAN, "memory", 70.0) == (
        "memory", "ncu rule: high memory throughput; DRAM roofline: 70% of DRAM roof",
        "ncu_rule")


def test_unknown_title_falls_back_to_percentages() -> None:
    assert classified("Some Future Title", 20.0, 75.0, 4.0, None, NAN)[::2] == (
        "memory", "sol_pct")


def test_roofline_basis_without_sol_metrics() -> None:
    assert classified(None, NAN, NAN, NAN, "memory", 85.0) == (
        "memory", "DRAM roofline: 85% of DRAM roof", "roofline")
    assert classified(None, NAN, NAN, NAN, "compute", 12.0, "tensor_bf16") == (
        "latency", "DRAM roofline: 12% of bf16 tensor roof, < 60%", "roofline")


def test_nothing_to_judge_from() -> None:
    assert classified(None, NAN, NAN, NAN, None, NAN) == (
        None, "no SOL or roofline metrics", "none")


def test_classify_adds_columns_per_row() -> None:
    df = pd.DataFrame({"sol_bottleneck": ["High Memory Throughput", None],
                       "sm_pct": [10.0, 90.0], "mem_pct": [70.0, 5.0]})
    out = classify(df)
    assert out["bound"].tolist() == ["memory", "compute"]
    assert out["reason_code"].tolist() == ["high_memory", "high_throughput"]
    assert "reason" not in out  # words are render's
    assert out["basis"].tolist() == ["ncu_rule", "sol_pct"]


def test_classify_without_any_metric_column() -> None:
    out = classify(pd.DataFrame({"duration_ns": [1.0]}))
    assert out["basis"].tolist() == ["none"]
