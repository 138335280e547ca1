"""Compiled models live on the GPU: Inductor's kernels in their modules under the timeline
and under Nsight Compute (``torch_nsight.sweep`` of a compiled factory completes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_nsight
from torch_nsight.analyze import UNATTRIBUTED


def _compiled_gpt2() -> torch.nn.Module:
    from examples.models import GPT2Small

    return torch.compile(GPT2Small(n_layer=2, d=256, heads=4, vocab=4096))


def _ids(shape: tuple[int, int]) -> torch.Tensor:
    return torch.randint(0, 4096, shape)


def _check(profile: torch_nsight.Profile, *, backward: bool) -> None:
    k = profile.kernels
    inductor = k["kernel_full"].str.startswith("triton_")
    assert inductor.sum() > 5, "the model did not run compiled"
    assert (k.loc[inductor, "module"] != UNATTRIBUTED).all()
    assert profile.coverage >= 0.95
    assert "h.1.mlp" in " ".join(k["module"].astype(str))  # down to the blocks' parts
    if backward:
        assert set(k.loc[inductor, "direction"]) == {"fwd", "bwd"}


@pytest.mark.gpu
def test_a_compiled_training_step_under_the_timeline(tmp_path: Path) -> None:
    profile = torch_nsight.timeline(_compiled_gpt2, {"4x128": (4, 128)}, make_inputs=_ids,
                                    backward=True, dtype="bf16", runs=2, warmup=3,
                                    output_dir=tmp_path / "tl", quiet=True)
    _check(profile, backward=True)


@pytest.mark.gpu
def test_a_sweep_of_a_compiled_factory_completes_and_is_attributed(tmp_path: Path) -> None:
    profile = torch_nsight.sweep(_compiled_gpt2, {"4x128": (4, 128)}, make_inputs=_ids,
                                 backward=True, dtype="bf16", output_dir=tmp_path / "sw",
                                 quiet=True, timeout=300)
    _check(profile, backward=True)
