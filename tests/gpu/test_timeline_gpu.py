"""The timeline pass live on the GPU: the verdicts of the recorded fixtures, re-measured."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_nsight
from torch_nsight.analyze import UNATTRIBUTED, timeline_summary


@pytest.mark.gpu
def test_a_gpt2_decode_step_is_launch_bound_and_every_kernel_attributed(
        tmp_path: Path) -> None:
    from examples.models import GPT2Small

    profile = torch_nsight.timeline(lambda: GPT2Small().eval(), {"1x1": (1, 1)},
                                    make_inputs=lambda s: torch.randint(0, 50257, s),
                                    dtype="bf16", runs=3, warmup=2,
                                    output_dir=tmp_path / "tl", quiet=True)
    row = timeline_summary(profile.kernels, profile.timeline).iloc[0]
    assert row["verdict"] == "launch-bound", row["facts"]
    assert (profile.kernels["module"] != UNATTRIBUTED).all()
    assert (tmp_path / "tl" / "trace-0.json.gz").is_file()


@pytest.mark.gpu
def test_pageable_host_copies_each_step_are_copy_bound(tmp_path: Path) -> None:
    class HostFed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(1024, 1024)
            self.host = torch.randn(16 * 1024, 1024)  # stays on the host

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.proj(self.host.to(x.device)[: x.shape[0]] + x)

    profile = torch_nsight.timeline(HostFed, [(4096, 1024)], runs=3, warmup=2,
                                    output_dir=tmp_path / "tl", quiet=True)
    row = timeline_summary(profile.kernels, profile.timeline).iloc[0]
    assert row["verdict"] == "copy-bound", row["facts"]
