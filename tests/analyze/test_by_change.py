"""Findings gathered by the change a user makes, on recorded steps (H200, 2026-11-29: the
R3D-18 video network, NCDHW, and Faster R-CNN, fp32)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from torch_nsight.analyze.findings.by_change import CHANGE_COLUMNS, by_change
from torch_nsight.analyze.findings.codes import FIX_CODES
from torch_nsight.analyze.findings.step_idle import add_step_idle, step_idle
from torch_nsight.analyze.findings.switch_fixes import fix_target
from torch_nsight.render.changes import change_words, render_changes

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


@pytest.fixture(scope="module")
def r3d() -> torch_nsight.Profile:
    return torch_nsight.load(DATA / "zoo_families" / "r3d_18.ncu-rep.xz")


def test_one_switch_of_many_rows_is_one_change(r3d: torch_nsight.Profile) -> None:
    """R3D-18's channels-last rows (a module's conversions each, 3-D; a folded row counts its
    blocks) are one change: their gains together, the 3-D layout named; the step's largest."""
    found = r3d.finding_table()
    layout = found[found["fix_code"].eq("channels_last")]
    assert len(layout) > 10
    changes = by_change(found, r3d.kernels)
    assert list(changes.columns) == list(CHANGE_COLUMNS)
    first = changes.iloc[0]
    assert first["change"] == "channels_last" and first["switch"]
    assert first["findings"] == layout["blocks"].sum() > len(layout)
    assert first["est_gain_ns"] == pytest.approx(layout["est_gain_ns"].sum())
    assert first["est_gain_ns"] > found["est_gain_ns"].max()
    assert "channels_last_3d" in change_words(first)
    assert changes["change"].is_unique
    assert not changes["fix_code"].eq("none_known").any()


def test_the_tf32_rows_of_several_linears_are_one_change() -> None:
    """Faster R-CNN's fp32 Linears (forward and backward) each have a TF32 row: one switch for
    the process, one change, with their gains together."""
    profile = torch_nsight.load(DATA / "zoo_families" / "fasterrcnn.ncu-rep.xz")
    found = profile.finding_table()
    tf32 = found[found["fix_code"].isin(["tf32_matmul", "tf32_conv"])]
    changes = by_change(found, profile.kernels).set_index("change")
    assert changes.loc["tf32", "findings"] == len(tf32) > 1
    assert changes.loc["tf32", "modules"] == tf32["module_path"].map(fix_target).nunique()
    assert changes.loc["tf32", "est_gain_ns"] == pytest.approx(tf32["est_gain_ns"].sum())


def test_the_idle_time_adds_after_the_cap() -> None:
    """Mamba's step_idle row (the GPU idle 49 ms of its bare step, measured by --verify) joins
    the model's compile: its idle time is no kernel time, so the kernels' cap does not cut it."""
    mamba = torch_nsight.load(DATA / "zoo_families" / "mamba.ncu-rep.xz")
    runs = json.loads((ROOT / "bench" / "zoo_results" / "verify_2026-11-29"
                       / "bare_steps.json").read_text())
    row = step_idle(mamba.kernels, runs["mamba"]["bare_step_ms"] * 1e6, mamba.calls)
    assert row is not None
    found = add_step_idle(mamba.finding_table(), row)
    compile_ = by_change(found, mamba.kernels).set_index("change").loc["compile"]
    kernel_ns = float(mamba.kernels["duration_ns"].sum())
    assert row["est_gain_ns"] > kernel_ns
    assert compile_["est_gain_ns"] >= row["est_gain_ns"]


def test_every_fix_has_words_in_the_section() -> None:
    for code in FIX_CODES - {"none_known"}:
        said = change_words({"change": code, "fix_code": code, "target": "m"})
        assert not said.startswith(code), code  # words, not the code


def test_a_change_never_gains_more_than_the_kernels_ran(r3d: torch_nsight.Profile) -> None:
    """The same rows counted fifty times (as a bug would) still gain no more than the step's
    kernels take per run."""
    found = r3d.finding_table()
    changes = by_change(pd.concat([found] * 50, ignore_index=True), r3d.kernels)
    kernel_ns = float(r3d.kernels["duration_ns"].sum())  # one step profiled
    assert changes["capped"].iloc[0]
    assert changes["est_gain_ns"].max() == pytest.approx(kernel_ns)
    assert (changes["est_gain_ns"].fillna(0) <= kernel_ns + 1).all()
    assert not by_change(found, r3d.kernels)["capped"].any()


def test_the_section_shows_only_where_a_change_gathers(r3d: torch_nsight.Profile) -> None:
    changes = by_change(r3d.finding_table(), r3d.kernels)
    text = render_changes(changes, "markdown")
    assert text.startswith("## By change") and "channels_last_3d" in text
    single = changes[changes["findings"].eq(1)]
    assert len(single) and render_changes(single) == ""
    empty = by_change(r3d.finding_table().iloc[:0])
    assert empty.empty and render_changes(empty) == ""
    assert math.isnan(by_change(r3d.finding_table().head(1))["gain_bound_ns"].iat[0])
