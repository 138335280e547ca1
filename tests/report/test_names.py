"""Short kernel names and launch shapes (pure strings)."""

from __future__ import annotations

import pytest

from torch_nsight.report import format_dims, short_kernel_name


@pytest.mark.parametrize(("full", "short"), [
    ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::<unnamed>::silu_kernel"
     "(at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const::[lambda() "
     "(instance 6)]::operator ()() const::[lambda(c10::BFloat16) (instance 1)], std::array<char"
     " *, (unsigned long)2>>(int, T2, T3)", "vectorized_elementwise_kernel"),
    ("nvjet_sm90_tst_96x128_64x6_2x1_v_bz_NNN", "nvjet_sm90_tst_96x128_64x6_2x1_v_bz_NNN"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"
     "(T2 *, const T1 *, int, int, int, const bool *, int, bool)", "softmax_warp_forward"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>"
     "(T1::Params)", "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t>, false>(Flash_fwd_params)", "flash_fwd_kernel"),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel"
     "<float, 4>(long, at::PhiloxCudaState, T3, T4)", "distribution_elementwise_grid_stride_kernel"),
])
def test_short_kernel_name(full: str, short: str) -> None:
    assert short_kernel_name(full) == short


def test_format_dims() -> None:
    assert format_dims(2.0, 64.0, 1.0) == "(2, 64, 1)"
    assert format_dims(2.0, None, 1.0) is None
