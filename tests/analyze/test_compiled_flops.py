"""Compiled kernels on the roofline in the fast set: the FLOPs each launch's kernel map
carries (:mod:`torch_nsight.capture.compiled.flops`) placed on the kernels that do them
(:func:`torch_nsight.analyze.analytic.fill_flops_from_inductor`), on real recordings of a
torch.compile'd timm ViT-S/16 training step (tests/data/compile/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.recorded import load_recorded
from torch_nsight.analyze.analytic import is_arithmetic
from torch_nsight.vocabulary import INDUCTOR_FLOPS, UNATTRIBUTED

DATA = Path(__file__).resolve().parents[1] / "data" / "compile"
#: recorded before the maps carried FLOPs (map format 1)
BEFORE = DATA / "vit_train.ncu-rep.xz"
#: the same step recorded with FLOPs in the maps (bench/compiled_attribution.py --parts
#: ncu_flops)
WITH_FLOPS = DATA / "vit_train_flops.ncu-rep.xz"


def test_maps_recorded_without_flops_leave_compiled_kernels_unplaced() -> None:
    k = load_recorded(BEFORE).kernels
    assert INDUCTOR_FLOPS not in k
    assert not (k["flops_basis"] == "inductor").any()
    assert k["pct_of_roof"].isna().all()  # no calls table, no counters: nothing to place


@pytest.mark.skipif(not WITH_FLOPS.is_file(), reason="the recording with FLOPs in the kernel "
                    "maps is not there yet (bench/compiled_attribution.py --parts ncu_flops)")
def test_the_compiled_step_is_placed_on_the_roofline_forward_and_backward() -> None:
    k = load_recorded(WITH_FLOPS).kernels
    compiled = k[INDUCTOR_FLOPS].notna()
    assert k.loc[compiled, "kernel_full"].str.startswith("triton_").sum() > 100
    assert (k.loc[compiled, "module"] != UNATTRIBUTED).all()
    assert (k.loc[compiled, "flops_basis"] == "inductor").all()
    placed = k["pct_of_roof"].notna()
    duration = k["duration_ns"]
    for direction in ("fwd", "bwd"):
        mine = k["direction"] == direction
        assert duration[mine & placed].sum() >= 0.9 * duration[mine].sum(), direction
    assert duration[placed].sum() >= 0.9 * duration.sum()
    assert not k["above_roof"].any()
    # the FLOPs sit on GEMM, convolution and attention kernels; Inductor's own kernels
    # (elementwise, reductions) and the copies around them are placed by their bytes
    doing = k["flops"] > 0
    assert doing.any()
    assert k.loc[doing, "kernel"].map(is_arithmetic).all()
    assert (k.loc[doing, "precision"] == "tensor_bf16").mean() > 0.9


@pytest.mark.skipif(not WITH_FLOPS.is_file(), reason="the recording with FLOPs in the kernel "
                    "maps is not there yet")
def test_a_bf16_convolution_cudnn_ran_on_cuda_cores_is_on_the_fp32_roof() -> None:
    profile = load_recorded(WITH_FLOPS)
    k = profile.kernels
    direct = k[k["kernel"] == "implicit_convolve_sgemm"]  # the patch embedding's, bf16 data
    assert len(direct) and (k.loc[direct.index, "inductor_dtype"] == "bfloat16").all()
    assert (direct["precision"] == "fp32").all() and (direct["flops"] > 0).all()
    assert not direct["above_roof"].any()
    # its fix is the layout that gets cuDNN's tensor-core kernels, never TF32 (bf16 data)
    found = profile.findings()
    mine = found[found["module"] == "patch_embed.proj"]
    assert "conv_no_tensor_cores" in set(mine["finding"])
    assert "fp32_no_tensor_cores" not in set(mine["finding"])
