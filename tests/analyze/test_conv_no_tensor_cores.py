"""A 16-bit convolution cuDNN ran on CUDA cores (issue 43): ViT-S/16's bf16 patch embedding
(``profile_fast/vit_profile``: ``implicit_convolve_sgemm<__nv_bfloat16, ...>``, its
tensor pipe 0.44% busy) and the fp16 stem of ``convnet_fwd``, both recorded on the GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze.analytic import CUDA_CORE_CONVOLUTION

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def vit() -> torch_nsight.Profile:
    return load_recorded(DATA / "profile_fast" / "vit_profile.ncu-rep.xz")


def _direct(profile: torch_nsight.Profile):  # type: ignore[no-untyped-def]
    kernels = profile.kernels
    return kernels[kernels["kernel"].astype(str).str.contains(CUDA_CORE_CONVOLUTION)]


def test_its_calls_flops_sit_on_the_cuda_core_roof(vit: torch_nsight.Profile) -> None:
    (row,) = _direct(vit).to_dict("records")
    # the calls table says bf16, the kernel converts to fp32: its FLOPs are CUDA-core FLOPs
    assert row["tensor_pipe_pct"] < 1.0 and row["flops_basis"] == "calls"
    assert row["precision"] == "fp32" and row["flops_fp32"] == row["flops"] > 0
    assert row["pct_of_roof"] <= 100.0


def test_a_bf16_patch_embedding_on_cuda_cores_is_told_to_pad_its_rgb_channels(
        vit: torch_nsight.Profile) -> None:
    found = vit.finding_table(fold=False)
    (row,) = found[found["finding"] == "conv_no_tensor_cores"].to_dict("records")
    (kernel,) = _direct(vit).to_dict("records")
    assert row["module_path"] == kernel["module_path"] == \
        "VisionTransformer/patch_embed/patch_embed.proj"
    assert (row["module_kind"], row["dtype"], row["layout"]) == ("conv", "bfloat16", "nchw")
    # the RGB input's 3 channels are off cuDNN's multiple of 8: pad them, go channels-last
    assert row["fix_code"] == "pad_channels"
    assert row["fix_params"] == {"pads": [{"role": "in_channels", "value": 3, "padded": 8}]}
    assert row["shapes"][0][1] == 3  # read from the recorded call
    # a gain no larger than the kernel's own time: the rest is its tensor-core roofline
    facts = row["facts"]
    assert 0 < row["est_gain_ns"] < facts["time_ns"] == kernel["duration_ns"]
    assert facts["time_ns"] - row["est_gain_ns"] >= facts["tensor_roof_ns"]
    assert vit.finding_table()["finding"].iloc[0] == "conv_no_tensor_cores"  # the largest


def test_without_calls_the_kernel_and_counters_say_it_and_channels_last_is_the_fix() -> None:
    convnet = load_recorded(DATA / "convnet_fwd.ncu-rep.xz")
    found = convnet.finding_table(fold=False)
    (row,) = found[found["finding"] == "conv_no_tensor_cores"].to_dict("records")
    assert (row["module_path"], row["dtype"], row["fix_code"]) == (
        "SmallConvNet/stem/stem.0", "float16", "channels_last")
    assert row["facts"]["tensor_pipe_pct"] < 1.0


def test_tensor_core_convolutions_are_left_alone() -> None:
    conv = load_recorded(DATA / "findings_conv")
    assert not (conv.finding_table(fold=False)["finding"] == "conv_no_tensor_cores").any()
