"""A small hand-built kernel table shared by the rollup, hotspot and comparison tests.

Expectations in those tests follow from the rows below by the stated formulas."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest

from torch_nsight.analyze import UNATTRIBUTED


def kernel(module_path: str, duration: float, *, bound: str = "memory", kernel: str = "k",
           direction: str | None = "fwd", variant: str | None = "eager",
           shape: str | None = "s", run: int = 0, headroom: float = 0.0,
           op: str | None = None) -> dict:
    return {"variant": variant, "shape": shape, "run": run, "source": "r.ncu-rep",
            "module": module_path.split("/")[-1], "module_path": module_path,
            "direction": None if module_path == UNATTRIBUTED else direction, "op": op,
            "kernel": kernel, "duration_ns": duration, "headroom_ns": headroom,
            "roof_time_ns": duration - headroom, "flops": 10.0, "dram_bytes": 100.0,
            "bound": bound, "reason": bound, "basis": "ncu_rule", "precision": "fp32"}


@pytest.fixture
def make_kernel() -> Callable[..., dict]:
    """The row builder above, for tests that build their own tables."""
    return kernel


@pytest.fixture
def block() -> pd.DataFrame:
    """Block -> attn -> attn.proj, Block -> mlp; one unattributed kernel; one run."""
    return pd.DataFrame([
        kernel("Block", 10.0, kernel="norm", bound="latency"),
        kernel("Block/attn/attn.proj", 40.0, kernel="gemm", bound="compute", headroom=5.0),
        kernel("Block/attn", 20.0, kernel="softmax", headroom=15.0),
        kernel("Block/mlp", 20.0, kernel="gemm", bound="compute", headroom=1.0),
        kernel(UNATTRIBUTED, 10.0, kernel="copy"),
    ])
