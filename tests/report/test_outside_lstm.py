"""The recording of issue 44 (tests/data/outside_lstm/, made by tests/data/record_outside.py on
the GPU machine): an LSTM language model whose loss, GradScaler and clipping run outside the
model. Under Nsight Compute and under PyTorch's profiler, their kernels get the rows of the
calls that launched them. Skipped until the recording is in tests/data."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.naming import OPTIMIZER_DIRECTION
from torch_nsight.vocabulary import UNATTRIBUTED, in_module_range, outside_module

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "outside_lstm"
pytestmark = pytest.mark.skipif(not FIXTURE.is_dir(),
                                reason="tests/data/outside_lstm is not recorded yet")

#: The rows the loop's calls outside the model get, by (module, direction).
CALLS = {(outside_module("cross_entropy"), "fwd"), (outside_module("cross_entropy"), "bwd"),
         (outside_module("GradScaler.scale"), "fwd"), (outside_module("GradScaler.scale"), "bwd"),
         (outside_module("GradScaler.unscale_"), OPTIMIZER_DIRECTION),
         (outside_module("clip_grad_norm_"), OPTIMIZER_DIRECTION),
         (outside_module("GradScaler.update"), OPTIMIZER_DIRECTION)}


def _unnamed_share(profile: torch_nsight.Profile) -> float:
    k = profile.kernels
    return float(k.loc[k["module"] == UNATTRIBUTED, "duration_ns"].sum()
                 / k["duration_ns"].sum())


@pytest.mark.parametrize("source", ["profile.ncu-rep.xz", "timeline"])
def test_the_calls_outside_the_model_have_their_rows(source: str) -> None:
    profile = torch_nsight.load(FIXTURE / source)
    k = profile.kernels
    outside = k[~k["module"].map(in_module_range)]
    rows = set(zip(outside["module"], outside["direction"], strict=True))
    assert rows >= CALLS
    assert "multi_tensor_apply_kernel" in set(
        outside.loc[outside["module"] == outside_module("GradScaler.unscale_"), "kernel"])
    assert (k["direction"] == OPTIMIZER_DIRECTION).any()  # AdamW, in its step range
    assert _unnamed_share(profile) < 0.01
