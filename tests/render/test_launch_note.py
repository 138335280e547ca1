"""A bound on kernels' time is no bound on a fix that also removes launches (issue 43).

Compiling the whole model measured 9.29 ms a step on torchaudio's Conformer (interval 5.49 to
16.14 ms, 16 pairs; ``bench/zoo_verify.py``, H100, 2026-11-28, docs/zoo.md) against a bound
of 4.98 ms summed over its latency-bound rows: the kernels' time above their roof, where
compiling also cuts launches whose CPU time no kernel profile sees. The recording is that
run's own report."""

from __future__ import annotations

import pandas as pd
import pytest

import torch_nsight
from tests.golden_sources import DATA
from tests.recorded import load_recorded
from torch_nsight.analyze.findings.codes import CUTS_LAUNCHES
from torch_nsight.cli.verify import verified_lines
from torch_nsight.render.findings import render_findings

CONFORMER = DATA / "zoo_families" / "conformer.ncu-rep.xz"
#: What ``--verify`` measured for ``compile`` on the steps of the run that recorded it.
MEASURED_NS, PAIRS = 9_285_170.0, 16


def _bounded_launch_cutting(found: pd.DataFrame) -> pd.Series:
    return (found["est_gain_ns"].isna() & found["gain_bound_ns"].notna()
            & found["fix_code"].isin(CUTS_LAUNCHES))


@pytest.fixture(scope="module")
def profile() -> torch_nsight.Profile:
    """The recording, read and its findings computed once for the module (a Profile keeps
    its findings and hands out copies)."""
    return load_recorded(CONFORMER)


def test_the_table_says_the_bound_is_the_kernels_alone(profile: torch_nsight.Profile) -> None:
    found = profile.findings()
    mine = _bounded_launch_cutting(found)
    assert mine.any()
    text = render_findings(found, "plain", profile.kernels)
    assert "--verify measures it" in " ".join(text.split())
    assert "--verify measures" not in render_findings(found[~mine], "plain", profile.kernels)


def test_a_measurement_above_the_bound_is_said_to_be(profile: torch_nsight.Profile) -> None:
    found = profile.finding_table(fold=False)
    rows = found[_bounded_launch_cutting(found)
                 & (found["fix_code"] == "compile_module")].copy()
    assert len(rows) and rows["gain_bound_ns"].sum() < MEASURED_NS
    rows[["verify_status", "verify_fix", "verify_detail"]] = ["measured", "compile", ""]
    rows[["measured_gain_ns", "steps_timed"]] = [MEASURED_NS, PAIRS]
    line, = verified_lines(rows)
    assert "above the bound on its kernels" in line
    rows["measured_gain_ns"] = rows["gain_bound_ns"].sum() / 2
    assert "above the bound" not in verified_lines(rows)[0]
    # a fix that cuts no launch is bounded by its kernels: no such words
    rows[["measured_gain_ns", "fix_code"]] = [MEASURED_NS, "channels_last"]
    assert "above the bound" not in verified_lines(rows)[0]


def test_no_line_once_the_fixes_are_measured(profile: torch_nsight.Profile) -> None:
    found = profile.findings()
    assert _bounded_launch_cutting(found).any()
    measured = found.assign(measured_gain_ns=float("nan"))
    assert "--verify measures" not in " ".join(
        render_findings(measured, "plain", profile.kernels).split())
