"""Nsight Compute's own rules as evidence on the findings of their kernels, on the conv net
recorded with the full set (tests/data/findings_rules) and on a report without analysis
sections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze.findings.prepare import prepare
from torch_nsight.analyze.rules import RULES_PER_FINDING, rule_evidence

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def profile() -> torch_nsight.Profile:
    return load_recorded(DATA / "findings_rules")


def test_rules_are_evidence_never_a_fix(profile: torch_nsight.Profile) -> None:
    found = profile.finding_table(fold=False)
    assert not found["finding"].str.startswith("ncu_").any()
    messages = {rule["message"].split(". ")[0] for text in profile.kernels["ncu_rules"].dropna()
                for rule in json.loads(text)}
    assert not any(m and m in fix for fix in found["fix"] for m in messages)
    with_rules = found[[bool(f.get("ncu_rules")) for f in found["facts"]]]
    assert len(with_rules) > 0
    for _, row in with_rules.iterrows():
        rules = row["facts"]["ncu_rules"]
        assert len(rules) <= RULES_PER_FINDING
        assert [r["gain_ns"] for r in rules] == sorted((r["gain_ns"] for r in rules),
                                                       reverse=True)
        assert "LaunchConfiguration" not in {r["rule"] for r in rules}  # our small_grid
        for rule in rules:
            assert f"Nsight Compute's {rule['rule']} rule: {rule['title']}" in row["evidence"]


def test_a_rules_gain_is_its_kernels_duration_times_speedup(
        profile: torch_nsight.Profile) -> None:
    work = prepare(profile.kernels)
    rows = work[(work["module"] == "stem.1") & (work["ncu_rules"] != "")]
    top = rule_evidence(rows)[0]
    expected = sum(duration * rule["speedup_pct"] / 100
                   for text, duration in zip(rows["ncu_rules"], rows["duration_ns"], strict=True)
                   for rule in json.loads(text)
                   if rule["rule"] == top["rule"] and rule["speedup_type"] == "global")
    assert top["gain_ns"] == pytest.approx(expected)  # one run


def test_a_report_without_sections_has_no_rule_evidence() -> None:
    plain = load_recorded(DATA / "findings_conv")
    assert plain.kernels["ncu_rules"].isna().all()
    assert rule_evidence(prepare(plain.kernels)) == []
    assert not any("ncu_rules" in facts for facts in plain.finding_table()["facts"])
