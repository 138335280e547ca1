"""Reasons and next steps on real recorded reports: bound, reason, % of roof and advice agree.

Expected texts are built from each kernel's own columns (``sm_pct``, ``mem_pct``,
``pct_of_roof``, ``roofline_side``), never copied out of the reports.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.render import render_table
from torch_nsight.render.reason_words import roof_name

DATA = Path(__file__).resolve().parents[1] / "data"
REPORTS = {
    "findings_gemm": DATA / "findings_gemm",
    "findings_chain": DATA / "findings_chain",
    "findings_conv": DATA / "findings_conv",
    "llama_block_sweep": DATA / "llama_block_sweep.ncu-rep.xz",
    "llama_block_fwd_bwd": DATA.parents[1] / "torch_nsight" / "demo"
                           / "llama_block_fwd_bwd.ncu-rep.xz",
}


@pytest.fixture(scope="module")
def profiles() -> dict[str, torch_nsight.Profile]:
    return {name: load_recorded(path) for name, path in REPORTS.items()}


def stated(reason: str, pattern: str) -> float:
    """The percentage a reason states after ``pattern`` (``<1%`` reads as 0.5)."""
    found = re.search(pattern + r" (<1|[\d.]+)%", reason)
    assert found, f"{pattern!r} not in {reason!r}"
    return 0.5 if found.group(1) == "<1" else float(found.group(1))


def test_n50257_gemm_is_memory_bound_on_chip_not_on_dram(
        profiles: dict[str, torch_nsight.Profile]) -> None:
    k = profiles["findings_gemm"].kernels
    gemm = k[(k["variant"] == "n50257") & k["kernel"].str.contains("align1")].iloc[0]
    # ncu's rule: memory (its memory % covers L1, L2 and DRAM); the DRAM roofline: above the
    # ridge, far under the bf16 tensor roof
    assert (gemm["bound"], gemm["roofline_side"]) == ("memory", "compute")
    assert gemm["mem_pct"] > gemm["sm_pct"] and gemm["pct_of_roof"] < 60
    assert gemm["reason"] == (
        f"SOL memory {gemm['mem_pct']:.0f}% > compute {gemm['sm_pct']:.0f}% (L1/L2/DRAM); "
        f"DRAM roofline: {gemm['pct_of_roof']:.0f}% of bf16 tensor roof")
    assert "high throughput" not in gemm["reason"].lower()
    top = profiles["findings_gemm"].hotspot_table(n=5).set_index("variant")
    step = top.loc["n50257", "next_step"]
    assert "DRAM traffic" not in step and "DRAM roofline is not the limit" in step
    assert step.startswith("check shapes, alignment and dtype")


def test_dram_bound_elementwise_chain_keeps_the_dram_advice(
        profiles: dict[str, torch_nsight.Profile]) -> None:
    profile = profiles["findings_chain"]
    k = profile.kernels
    eager = k[(k["variant"] == "eager") & (k["bound"] == "memory")]
    assert len(eager) and (eager["roofline_side"] == "memory").all()
    for row in eager.itertuples(index=False):
        assert row.reason.endswith(f"DRAM roofline: {row.pct_of_roof:.0f}% of DRAM roof")
    top = profile.hotspot_table(n=5)
    step = top.loc[(top["variant"] == "eager") & (top["bound"] == "memory"), "next_step"]
    assert len(step) and step.str.startswith("cut DRAM traffic").all()


@pytest.mark.parametrize("name", list(REPORTS))
def test_reason_states_the_columns_it_is_built_from(
        name: str, profiles: dict[str, torch_nsight.Profile]) -> None:
    k = profiles[name].kernels
    for row in k.itertuples(index=False):
        reason = row.reason
        assert "high throughput" not in reason.lower()
        if row.bound in ("memory", "compute"):
            # the limiting side is named first, with ncu's memory units
            other = "compute" if row.bound == "memory" else "memory"
            assert reason.startswith(f"SOL {row.bound} ") and "(L1/L2/DRAM)" in reason
            mine = row.mem_pct if row.bound == "memory" else row.sm_pct
            theirs = row.sm_pct if row.bound == "memory" else row.mem_pct
            assert stated(reason, f"SOL {row.bound}") == pytest.approx(mine, abs=0.5)
            assert stated(reason, other) == pytest.approx(theirs, abs=0.5)
        elif row.bound == "latency":
            assert stated(reason, "SOL memory") == pytest.approx(row.mem_pct, abs=0.5)
            assert stated(reason, "compute") == pytest.approx(row.sm_pct, abs=0.5)
            assert stated(reason, "compute") < 60 and stated(reason, "SOL memory") < 60
        # the DRAM roofline: its own labelled clause, the same number as `% of roof`
        if not pd.isna(row.pct_of_roof):
            roof = roof_name(row.roofline_side, row.precision)
            assert "; DRAM roofline: " in reason and reason.endswith(f" of {roof}")
            assert stated(reason, "DRAM roofline:") == pytest.approx(row.pct_of_roof, abs=0.5)


@pytest.mark.parametrize("name", list(REPORTS))
def test_dram_advice_only_below_the_ridge(
        name: str, profiles: dict[str, torch_nsight.Profile]) -> None:
    top = profiles[name].hotspot_table(n=1000, fold=False)
    keys = ["variant", "shape", "module_path", "direction", "op", "kernel"]
    kernels = profiles[name].kernels.reindex(columns=[*keys, "roofline_side"])
    sides = kernels.astype(object).fillna("").groupby(keys)["roofline_side"].agg(set)
    assert len(sides) == len(top)
    told_dram = told_not_dram = 0
    for row in top.itertuples(index=False):
        site = sides[tuple("" if pd.isna(getattr(row, key)) else getattr(row, key)
                           for key in keys)]
        if "DRAM traffic" in row.next_step:
            assert row.bound == "memory" and site == {"memory"}
            told_dram += 1
        if row.bound == "memory" and site == {"compute"}:
            assert "DRAM roofline is not the limit" in row.next_step
            told_not_dram += 1
    assert told_dram + told_not_dram == (top["bound"] == "memory").sum()


def test_hotspot_table_shows_the_next_step(profiles: dict[str, torch_nsight.Profile],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # every column, no wrapping
    profile = profiles["findings_gemm"]
    gemm = profile.hotspot_table(n=1).iloc[0]
    k = profile.kernels
    row = k[(k["variant"] == gemm["variant"]) & (k["kernel"] == gemm["kernel"])].iloc[0]
    header, first = render_table(profile, n=2).splitlines()[:2]
    assert header.rstrip().endswith("next step")
    # text cuts the reason after its SOL clause; the next step is whole
    assert f"SOL memory {row['mem_pct']:.0f}% > compute {row['sm_pct']:.0f}% (L1/L2/DRAM)…" \
        in first
    assert first.rstrip().endswith(gemm["next_step"])
