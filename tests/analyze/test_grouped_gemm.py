"""Mixture-of-experts steps whose experts run ``_grouped_mm`` in float32 under bf16 autocast
(autocast does not cast it), recorded on the GPU machine: a Mixtral-style MoE (H100, calls
table recorded before the grouped GEMM's FLOPs were counted: counted on reading) and a
Qwen2-MoE, a verification model (H200, counted when recorded). Their expert GEMMs take the
calls' FLOPs, sit under their roof, and the step's first finding casts them to the 16-bit
dtype the step's other GEMMs ran in (``--verify`` switches it as ``cast@<module>``). Every
expectation is read from the source's own tables."""

from __future__ import annotations

import pandas as pd
import pytest

import torch_nsight
from tests.golden_sources import DATA
from torch_nsight.analyze.classify import IDLE_TENSOR_PIPE_PCT
from torch_nsight.analyze.findings.codes import fix_fits
from torch_nsight.analyze.findings.switch_fixes import fix_target, switch_fix
from torch_nsight.analyze.hotspots import LIBRARY_ON_CUDA_CORES
from torch_nsight.shape_flops import GROUPED_GEMM_OPS

MOES = ["mixtral_moe", "qwen2_moe"]


@pytest.fixture(scope="module", params=MOES)
def moe(request: pytest.FixtureRequest) -> torch_nsight.Profile:
    return torch_nsight.load(DATA / "zoo_families" / f"{request.param}.ncu-rep.xz")


def _grouped(frame: pd.DataFrame, column: str) -> pd.Series:
    return frame[column].map(
        lambda ops: isinstance(ops, str) and bool(GROUPED_GEMM_OPS & set(ops.split(", "))))


def test_expert_gemms_take_the_calls_flops_under_their_roof(moe: torch_nsight.Profile) -> None:
    calls, kernels = moe.calls, moe.kernels
    grouped_calls = calls[_grouped(calls, "aten_op")]
    assert len(grouped_calls) and (grouped_calls["flops"] > 0).all()
    gemms = kernels[_grouped(kernels, "aten_ops")]
    assert len(gemms) and (gemms["flops"] > 0).all()
    assert (gemms["pct_of_roof"] <= 100).all()  # a count that puts work above a roof is a bug
    # each site's kernels hold its calls' FLOPs, once
    site = ["module_path", "direction"]
    held = gemms.groupby(site)["flops"].sum()
    made = (grouped_calls["flops"] * grouped_calls["count"]).groupby(
        [grouped_calls[k] for k in site]).sum()
    runs = kernels["run"].nunique() if "run" in kernels else 1
    assert ((held / (made * max(runs, 1))).round(6) == 1).all()


def test_the_first_finding_moves_the_experts_to_tensor_cores(moe: torch_nsight.Profile) -> None:
    found = moe.findings()
    first = found.iloc[0]
    assert first["finding"] == "fp32_no_tensor_cores"
    assert set(GROUPED_GEMM_OPS & set(str(first["aten_ops"]).split(", ")))
    assert first["fix_code"] == "cast_to_half"
    assert fix_fits(first["module_kind"], first["fix_code"])
    # the step's other GEMMs ran 16-bit: the fix says autocast left these in float32
    calls = moe.calls
    others = calls[calls["aten_op"].isin(["mm", "addmm", "bmm", "linear"])
                   & (calls["module_path"] != first["module_path"])]
    half = others["input_dtypes"].map(lambda dtypes: dtypes[-1]).mode().iat[0]
    assert first["fix_params"]["dtype"] == half
    assert set(first["fix_params"]["ops"]) <= GROUPED_GEMM_OPS
    assert "autocast does not cast" in str(first["fix"])
    # --verify casts them in the experts' forward, to the dtype the gain was predicted for
    spec = switch_fix(first)
    assert spec is not None and spec.fix == "cast"
    assert spec.target == fix_target(first["module_path"]) and "experts" in spec.target
    assert dict(spec.options) == {"dtype": first["fix_params"]["dtype"]}
    # a gain is never more than the time of the kernels it is about (a folded row's blocks
    # together: every expert GEMM of its direction)
    kernels = moe.kernels
    mine = kernels[_grouped(kernels, "aten_ops") & (kernels["direction"] == first["direction"])]
    assert 0 < first["est_gain_ns"] < mine["duration_ns"].sum()



def test_the_experts_hotspots_are_told_tensor_cores_whatever_their_bound(
        moe: torch_nsight.Profile) -> None:
    """Their next step agrees with the finding: tensor cores first, not "a larger batch" for
    the expert GEMMs under one wave."""
    table = moe.hotspots(n=10_000)
    experts = table[table["aten_ops"].map(
        lambda ops: isinstance(ops, str) and bool(GROUPED_GEMM_OPS & set(ops.split(", "))))
        & table["kernel"].astype(str).str.contains("gemm|cutlass|xmma", case=False)]
    assert len(experts) and (experts["bound"] != "compute").any()
    told = experts["next_step_code"]
    assert told.isin([LIBRARY_ON_CUDA_CORES, "use_tensor_cores"]).all()
    assert (told[experts["bound"] != "compute"] == LIBRARY_ON_CUDA_CORES).all()


@pytest.mark.parametrize("name", ["lstm_lm", "gru_lm", "qwen2_moe", "mixtral_moe", "gat"])
def test_only_kernels_that_ran_on_cuda_cores_are_told_so(name: str) -> None:
    """A site told it ran on CUDA cores had FLOPs and an idle tensor pipe in every launch
    (cuDNN's fp16 RNN GEMMs and its flash attention, given fp32 and no FLOPs by the calls
    table as a site's other kernels, are not told so)."""
    profile = torch_nsight.load(DATA / "zoo_families" / f"{name}.ncu-rep.xz")
    kernels, table = profile.kernels, profile.hotspots(n=100_000, fold=False)
    busy = kernels[pd.to_numeric(kernels["tensor_pipe_pct"], errors="coerce")
                   >= IDLE_TENSOR_PIPE_PCT]
    told = table[table["next_step_code"] == LIBRARY_ON_CUDA_CORES]
    keys = ["module_path", "direction", "kernel"]
    busy_sites = set(map(tuple, busy[keys].astype(str).to_numpy()))
    assert not busy_sites & set(map(tuple, told[keys].astype(str).to_numpy()))
    if name in ("lstm_lm", "gru_lm"):  # their tensor-core GEMMs exist and are not told
        assert busy["kernel"].astype(str).str.contains("gemm|nvjet", case=False).any()
