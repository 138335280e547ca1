"""Shapes inside the report: the calls table that ``instrument()`` records under Nsight
Compute and carries in one NVTX range (torch_nsight.capture.calls.embed), read back with no side
file. Real reports recorded on an H200 (tests/data/profile_fast):

* ``vit_profile``: ``torch-nsight profile --steps 5:6`` (default metric set) of a timm ViT-S/16
  bf16 AdamW training loop;
* ``gpt2_hand``: ``ncu --nvtx`` run by hand on a script that only calls ``instrument(model)``
  around a Hugging Face GPT-2 small bf16 forward (batch 4, seq 1024, vocab 50257).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from tests.recorded import load_recorded, read_recorded
from torch_nsight import formats

DATA = Path(__file__).resolve().parents[1] / "data" / "profile_fast"
VIT = DATA / "vit_profile.ncu-rep.xz"
GPT2 = DATA / "gpt2_hand.ncu-rep.xz"


@pytest.fixture(scope="module")
def vit() -> torch_nsight.Profile:
    return load_recorded(VIT)


@pytest.fixture(scope="module")
def gpt2() -> torch_nsight.Profile:
    return load_recorded(GPT2)


def test_the_report_holds_one_carrier_kernel_that_load_drops(vit) -> None:
    raw, _ = read_recorded(VIT)
    carrier = raw["range_start_end"].map(
        lambda ranges: any(m.startswith(formats.CALLS_MESSAGE_PREFIX) for m in ranges))
    assert carrier.sum() == 1 and len(raw) == 771
    assert len(vit.kernels) == 770  # the step's own kernels
    assert not any(m.startswith(formats.CALLS_MESSAGE_PREFIX)
                   for ranges in vit.kernels["range_start_end"] for m in ranges)


def test_a_profiled_training_step_is_complete_in_one_pass(vit) -> None:
    k = vit.kernels
    assert vit.calls is not None and len(vit.calls) == 636
    assert (k["run"] == 5).all()  # the one chosen step
    assert vit.coverage >= 0.95
    # every kernel: a bound from the busy counters, FLOPs from the carried calls, a roofline
    assert set(k["basis"]) == {"sol_estimate"} and k["bound"].notna().all()
    assert set(k["flops_basis"]) == {"calls"} and k["pct_of_roof"].notna().all()


def test_the_shapes_of_a_report_recorded_by_hand(gpt2) -> None:
    calls = gpt2.calls
    assert calls is not None and len(calls) > 0
    head = calls[(calls["module"] == "lm_head") & (calls["aten_op"].isin(["mm", "addmm"]))]
    # 2 M N K of the projection: 4 x 1024 tokens, 768 in, GPT-2's 50257 words out
    assert head["flops"].tolist() == [2 * 4096 * 768 * 50257]
    k = gpt2.kernels
    gemms = k["kernel"].str.contains("gemm|nvjet|Kernel2", case=False)
    assert gemms.sum() >= 48 and (k.loc[gemms, "flops"] > 0).all()


def test_the_alignment_finding_gets_its_gain_without_a_side_file(gpt2) -> None:
    found = gpt2.findings()
    head = found[(found["module"] == "lm_head") & (found["finding"] == "gemm_misaligned")]
    assert len(head) == 1
    # measured on the same H200: 3.339 ms at N = 50257 against 0.443 ms at N = 50304
    measured_ns = 3.339e6 - 0.443e6
    assert measured_ns / 2 <= head["est_gain_ns"].iloc[0] <= measured_ns * 2
