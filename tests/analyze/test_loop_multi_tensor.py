"""The training loop's own multi-tensor kernels are not an optimizer's step (issue 43):
``clip_grad_norm_`` outside every range runs ``torch._foreach_norm`` (``LpNormFunctor``)
and a ``_foreach_mul_`` by the clip coefficient (``BinaryOpScalarTensorFunctor``), as the
recorded wav2vec2 step does; "make the optimizer fused" is no fix for them."""

from __future__ import annotations

from pathlib import Path

from tests.recorded import load_recorded

DATA = Path(__file__).resolve().parents[1] / "data"


def test_clipping_outside_a_range_is_not_told_to_fuse_the_optimizer() -> None:
    profile = load_recorded(DATA / "zoo_families" / "wav2vec2.ncu-rep.xz")
    kernels = profile.kernels
    outside = kernels[kernels["module_path"] == "(unattributed)"]
    functors = outside["kernel_full"].astype(str)
    assert functors.str.contains("LpNormFunctor").any()  # the clipping ran out there
    found = profile.finding_table(fold=False)
    optimizer = found[found["finding"] == "optimizer_not_fused"]
    assert set(optimizer["module_path"]) == {"AdamW"}  # the step itself, and only it
