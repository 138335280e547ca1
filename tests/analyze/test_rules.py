"""Nsight Compute's own rules as findings, on the conv net recorded with the full set
(tests/data/findings_rules) and on a report without analysis sections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.analyze.rules import RULES_PER_MODULE, rule_findings
from torch_nsight.vocabulary import FINDING_COLUMNS

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def kernels():
    return torch_nsight.load(DATA / "findings_rules", cache=False).kernels


def test_rules_become_findings_per_module_with_ncus_estimate(kernels) -> None:
    found = rule_findings(kernels)
    assert list(found.columns) == list(FINDING_COLUMNS)
    assert set(found["gain_basis"]) == {"ncu_rule"}
    assert set(found["confidence"]) == {"medium"}  # global estimates only
    assert found["finding"].str.startswith("ncu_").all()
    assert "ncu_LaunchConfiguration" not in set(found["finding"])  # our small_grid check
    assert found.groupby(["module", "direction"]).size().max() <= RULES_PER_MODULE
    assert list(found["est_gain_ns"]) == sorted(found["est_gain_ns"], reverse=True)
    # the top one, recomputed from the raw rule list: sum of duration x speedup / 100
    top = found.iloc[0]
    rule = top["finding"].removeprefix("ncu_")
    mine = kernels[(kernels["module"] == top["module"]) & kernels["ncu_rules"].notna()]
    expected = sum(row["duration_ns"] * r["speedup_pct"] / 100
                   for _, row in mine.iterrows() for r in json.loads(row["ncu_rules"])
                   if r["rule"] == rule and r["speedup_type"] == "global")
    assert top["est_gain_ns"] == pytest.approx(expected)
    assert "@" not in "".join(found["fix"])  # ncu's link markup is gone


def test_a_report_without_sections_has_no_rule_findings() -> None:
    plain = torch_nsight.load(DATA / "findings_conv", cache=False).kernels
    assert plain["ncu_rules"].isna().all()
    assert rule_findings(plain).empty
