"""Fixes chosen by the op, the kind of module and the dimension (issue 43), on recorded
reports: a convolution's misaligned GEMM, an optimizer's step, a Linear with every dimension
aligned, a chain that is not a GELU.

Where a recording lacks the slow form (no NCHW 1x1 convolution, no SGD step was recorded), a
recorded one is relabelled the way the slow form reads (its kernel named as cuBLAS names an
``align1`` kernel, its step range named ``SGD``): every number stays the recording's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze.findings import findings as coded_findings
from torch_nsight.analyze.findings.elementwise_chain import chain_kind
from torch_nsight.naming import OPTIMIZER_DIRECTION
from torch_nsight.render.finding_words import word_findings

DATA = Path(__file__).resolve().parents[1] / "data"
#: How cuBLAS names a GEMM kernel for operands aligned to one element.
ALIGN1 = "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align1"


def load(name: str) -> torch_nsight.Profile:
    return load_recorded(DATA / name)


@pytest.fixture(scope="module")
def resnet() -> torch_nsight.Profile:
    return load("latency/resnet50.ncu-rep.xz")


def _findings(profile: torch_nsight.Profile, kernels: pd.DataFrame | None = None
              ) -> pd.DataFrame:
    kernels = profile.kernels if kernels is None else kernels
    return word_findings(coded_findings(kernels, profile.calls, profile.meta.settings))


def test_an_aligned_one_by_one_convolution_is_not_misaligned(
        resnet: torch_nsight.Profile) -> None:
    """ResNet-50 channels-last: its 1x1 convolutions run as nvJet GEMMs over N x H x W rows
    and aligned channels; nothing to pad."""
    k = resnet.kernels
    conv_gemms = k[k["module"].str.fullmatch(r"layer\d\.\d\.conv[13]") & k["kernel"].str.startswith("nvjet")]
    assert len(conv_gemms) > 0
    assert (_findings(resnet)["finding"] != "gemm_misaligned").all()


def test_a_one_by_one_convolution_over_49_positions_goes_channels_last(
        resnet: torch_nsight.Profile) -> None:
    """EfficientNet in NCHW: a 1x1 Conv2d runs as a cuBLAS GEMM over the output's H x W
    positions (7 x 7 = 49), cuBLAS picks an align1 kernel. The fix is channels-last, never
    a wider nn.Linear."""
    k = resnet.kernels.copy()
    site = (k["module"] == "layer4.1.conv1") & (k["direction"] == "fwd") \
        & k["kernel"].str.startswith("nvjet")
    assert site.sum() == 1
    k.loc[site, "kernel"] = ALIGN1
    row = _findings(resnet, k).query("finding == 'gemm_misaligned'").squeeze()
    calls = resnet.calls
    conv = calls[(calls["module"] == "layer4.1.conv1") & (calls["aten_op"] == "convolution")]
    out = conv["output_shapes"].iat[0][0]
    assert (row["module"], row["module_kind"], row["aten_ops"]) == (
        "layer4.1.conv1", "conv", "_to_copy, convolution")
    assert (row["dim"], row["dim_role"], row["dim_value"]) == ("HxW", "spatial",
                                                               out[2] * out[3])
    assert (row["layout"], row["fix_code"]) == ("nchw", "channels_last")
    assert "channels_last" in row["fix"] and "nn.Linear" not in row["fix"]
    assert "49 positions" in row["evidence"]
    rows = k[site]
    assert row["est_gain_ns"] == pytest.approx(
        float((rows["duration_ns"] - rows["roof_time_ns"] / 0.8).sum()))


def test_a_convolution_with_three_channels_pads_its_channels(
        resnet: torch_nsight.Profile) -> None:
    """The stem's 3 input channels, had cuDNN run it with a one- or two-element-aligned
    kernel: pad the channels to 8, a convolution's fix."""
    k = resnet.kernels.copy()
    site = (k["module"] == "conv1") & (k["direction"] == "fwd") & k["kernel"].str.contains(
        "fprop")
    k.loc[site, "kernel"] = k.loc[site, "kernel"].str.replace("align8", "align2")
    row = _findings(resnet, k).query("finding == 'gemm_misaligned'").squeeze()
    assert (row["module_kind"], row["dim"], row["dim_value"], row["fix_code"]) == (
        "conv", "C_in", 3, "pad_channels")
    assert row["fix_params"]["pads"] == [{"role": "in_channels", "value": 3, "padded": 8}]
    assert "nn.Linear" not in row["fix"]


def test_a_linear_with_every_dimension_aligned_is_not_misaligned() -> None:
    """``Sequential(Linear(1024, 4096), GELU, Linear(4096, 1024))`` at batch 256, fp32, TF32
    off (graph_captured_timeline): cuBLAS ran a CUDA-core SIMT SGEMM, named align1 because a
    SIMT kernel loads one element at a time. Not a misalignment: fp32 on CUDA cores, whose
    fix is TF32."""
    profile = load("graph_captured_timeline")
    found = profile.finding_table(fold=False)
    assert (found["finding"] != "gemm_misaligned").all()
    fp32 = found[found["finding"] == "fp32_no_tensor_cores"]
    assert {"0", "2"} <= set(fp32["module"])
    assert set(fp32["fix_code"]) == {"tf32_matmul"}
    assert (fp32["confidence"] == "high").all()  # the settings say allow_tf32 is False
    # CUTLASS's SIMT SGEMM and cuBLAS's FFMA kernels: CUDA cores, by name
    assert fp32["kernels"].str.contains("simt_sgemm|_ffma_").all()


@pytest.fixture(scope="module")
def steps() -> torch_nsight.Profile:
    """An AdamW training loop recorded before steps had ranges: its foreach kernels
    (``_foreach_lerp_``, ``_foreach_sqrt``, ``_foreach_addcdiv_``...) outside every module."""
    return load("profile_steps.ncu-rep.xz")


def test_a_foreach_step_outside_a_range_is_told_fused_without_a_class(
        steps: torch_nsight.Profile) -> None:
    row = steps.finding_table().query("finding == 'optimizer_not_fused'").squeeze()
    assert (row["module_kind"], row["optimizer"], row["optimizer_impl"], row["fix_code"]) == (
        "optimizer", None, "foreach", "optimizer_fused")
    assert row["facts"]["passes"] == 7
    assert "torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD" in row["fix"]
    assert "class was not recorded" in row["fix"]


@pytest.mark.parametrize(("optimizer", "code"), [("SGD", "optimizer_fused"),
                                                 ("RMSprop", "compile_optimizer_step")])
def test_an_optimizer_is_told_its_own_flag(steps: torch_nsight.Profile, optimizer: str,
                                           code: str) -> None:
    """The same foreach step in a ``step:<class>`` range: SGD is told SGD's fused=True
    (never AdamW), RMSprop (no fused implementation) to compile its step."""
    k = steps.kernels.copy()
    step = k["kernel"] == "multi_tensor_apply_kernel"
    k.loc[step, ["module", "module_path", "direction"]] = [optimizer, optimizer,
                                                           OPTIMIZER_DIRECTION]
    row = _findings(steps, k).query("finding == 'optimizer_not_fused'").squeeze()
    assert (row["optimizer"], row["module_class"], row["fix_code"]) == (optimizer, optimizer,
                                                                        code)
    assert "AdamW" not in row["fix"]
    if code == "optimizer_fused":
        assert f"torch.optim.{optimizer}(..., fused=True)" in row["fix"]


def test_a_fused_step_is_told_nothing(steps: torch_nsight.Profile) -> None:
    decoder = load("decoder_train/fast.ncu-rep.xz")  # fused AdamW, outside a range
    k = decoder.kernels
    assert k["kernel_full"].str.contains("FusedAdamMathFunctor").any()
    assert (decoder.finding_table()["finding"] != "optimizer_not_fused").all()


def test_an_lstm_cells_tanh_is_no_gelu() -> None:
    """The tanh-GELU chain of findings_chain, and the same kernels beside a sigmoid (an LSTM
    cell's gates): only the first is told F.gelu(approximate='tanh')."""
    profile = load("findings_chain")
    k = profile.kernels
    rows = k[(k["variant"] == "eager") & (k["module"] == "act")]
    assert chain_kind(rows) == "gelu"
    assert chain_kind(rows, ("sigmoid", "tanh", "mul", "add")) is None
