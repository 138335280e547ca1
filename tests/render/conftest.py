"""Profiles for the render tests: the recorded H200 report, and a synthetic sweep of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import torch_nsight
import torch_nsight.demo
from torch_nsight.profile import Profile

# The demo's recorded report, shipped in the package (torch_nsight/demo/).
FIXTURE = Path(torch_nsight.demo.__file__).with_name(torch_nsight.demo.RECORDED_REPORT)
SHAPES = {"1x256": 0.55, "1x512": 1.0, "1x1024": 2.1}
VARIANTS = {"eager": 1.0, "sdpa": 0.8}


@pytest.fixture(scope="session")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """The recorded Llama block (40 kernels, shape 1x512), loaded from a copy in tmp."""
    folder = tmp_path_factory.mktemp("report")
    shutil.copy(FIXTURE, folder / FIXTURE.name)
    return torch_nsight.load(folder / FIXTURE.name)


@pytest.fixture(scope="session")
def sweep_profile(profile: Profile) -> Profile:
    """The recorded kernels relabelled as 2 variants x 3 shapes, times scaled per label."""
    parts = []
    for variant, speed in VARIANTS.items():
        for shape, size in SHAPES.items():
            kernels = profile.kernels.copy()
            kernels["variant"] = variant
            kernels["shape"] = shape
            for column in ("duration_ns", "headroom_ns", "roof_time_ns"):
                kernels[column] = kernels[column] * speed * size
            parts.append(profile.with_kernels(kernels))
    return Profile.concat(parts)
