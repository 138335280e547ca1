"""The fast tier's bound, from four one-pass busy counters, against Nsight Compute's SOL
verdict on the same kernels: real models recorded on an H200 with the SpeedOfLight section and
the busy counters in one report (tests/data/bound_calibration): the two the counters were
chosen on (2 layers, depth 2) and two whole ones (GPT-2 small, ViT-S/16)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.recorded import load_recorded
from torch_nsight.analyze.classify import classify
from torch_nsight.render.hotspot_words import word_kernels

DATA = Path(__file__).resolve().parents[1] / "data" / "bound_calibration"
SOL_ONLY = ["sol_bottleneck", "sm_pct", "mem_pct"]


def _kernels(name: str) -> pd.DataFrame:
    return load_recorded(DATA / f"{name}.ncu-rep.xz").kernels


@pytest.mark.parametrize(("name", "kernels", "time_share"),
                         [("llama_sol", 102, 0.999), ("vit_sol", 165, 0.985),
                          ("gpt2_full_sol", 235, 0.999), ("vit_full_sol", 770, 0.995)])
def test_the_estimate_agrees_with_the_sol_verdict(name: str, kernels: int,
                                                  time_share: float) -> None:
    k = _kernels(name)
    assert len(k) == kernels
    assert set(k["basis"]) == {"ncu_rule"}  # the SOL section was collected: ncu decides
    estimated = classify(k.drop(columns=SOL_ONLY))
    assert set(estimated["basis"]) == {"sol_estimate"}
    same = estimated["bound"] == k["bound"]
    assert k.loc[same, "duration_ns"].sum() / k["duration_ns"].sum() >= time_share


def test_the_evidence_names_the_busiest_unit() -> None:
    k = _kernels("llama_sol")
    estimated = word_kernels(classify(k.drop(columns=SOL_ONLY)))
    gemm = estimated.loc[estimated["duration_ns"].idxmax()]
    assert gemm["kernel"].startswith("nvjet") and gemm["bound"] == "compute"
    assert gemm["reason"].startswith("SOL estimate: compute") and "(tensor pipe)" in gemm["reason"]
