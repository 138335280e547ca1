"""Bound classification against Nsight Compute's SOLBottleneck rule (pure pandas)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from torch_nsight.analyze import classify, sol_title
from torch_nsight.analyze.classify import classify_one

NAN = math.nan


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


@pytest.mark.parametrize(("title", "sm", "mem", "bound"), [
    ("High Compute Throughput", 70.0, 20.0, "compute"),
    ("High Memory Throughput", 20.0, 70.0, "memory"),
    ("Small Grid", 5.0, 5.0, "latency"),
    ("Latency Issue", 30.0, 40.0, "latency"),
    ("High Throughput", 50.0, 90.0, "memory"),
    ("High Throughput", 90.0, 50.0, "compute"),
    ("Balanced Throughput", 70.0, 65.0, "compute"),
])
def test_stored_rule_title_decides(title: str, sm: float, mem: float, bound: str) -> None:
    got = classify_one(title, sm, mem, NAN, None, NAN)
    assert got == (bound, title.lower(), "ncu_rule")


def test_roofline_position_is_added_to_the_rule_reason() -> None:
    bound, reason, basis = classify_one("Small Grid", 5.0, 5.0, 0.2, "memory", 4.2)
    assert (bound, basis) == ("latency", "ncu_rule")
    assert reason == "small grid (memory side, 4% of roof)"


def test_percentages_used_when_the_rule_is_absent() -> None:
    assert classify_one(None, 85.0, 20.0, 4.0, None, NAN) == (
        "compute", "high throughput", "sol_pct")


def test_unknown_title_falls_back_to_percentages() -> None:
    assert classify_one("Some Future Title", 20.0, 75.0, 4.0, None, NAN)[::2] == (
        "memory", "sol_pct")


def test_roofline_basis_without_sol_metrics() -> None:
    assert classify_one(None, NAN, NAN, NAN, "memory", 85.0) == (
        "memory", "85% of memory roof", "roofline")
    assert classify_one(None, NAN, NAN, NAN, "compute", 12.0) == (
        "latency", "12% of roof (compute side)", "roofline")


def test_nothing_to_judge_from() -> None:
    assert classify_one(None, NAN, NAN, NAN, None, NAN) == (
        None, "no SOL or roofline metrics", "none")


def test_classify_adds_columns_per_row() -> None:
    df = pd.DataFrame({"sol_bottleneck": ["High Memory Throughput", None],
                       "sm_pct": [10.0, 90.0], "mem_pct": [70.0, 5.0]})
    out = classify(df)
    assert out["bound"].tolist() == ["memory", "compute"]
    assert out["basis"].tolist() == ["ncu_rule", "sol_pct"]


def test_classify_without_any_metric_column() -> None:
    out = classify(pd.DataFrame({"duration_ns": [1.0]}))
    assert out["basis"].tolist() == ["none"]
