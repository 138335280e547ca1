"""Speedup of variants over a baseline (pure pandas)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest

from torch_nsight.analyze import normalize


def test_speedup_per_module_and_kernel(make_kernel: Callable[..., dict]) -> None:
    df = pd.DataFrame([
        make_kernel("Net", 10.0, kernel="a", variant="eager"),
        make_kernel("Net/fc", 30.0, kernel="b", variant="eager"),
        make_kernel("Net", 5.0, kernel="a", variant="compiled"),
        make_kernel("Net/fc", 10.0, kernel="fused", variant="compiled"),
    ])
    out = normalize(df, "eager")
    modules = out[(out["level"] == "module") & (out["variant"] == "compiled")]
    assert dict(zip(modules["module_path"], modules["speedup"], strict=True)) == {
        "Net": pytest.approx(40 / 15), "Net/fc": pytest.approx(3.0)}
    kernels = out[(out["level"] == "kernel") & (out["variant"] == "compiled")]
    speedups = dict(zip(kernels["kernel"], kernels["speedup"], strict=True))
    assert speedups["a"] == pytest.approx(2.0)
    assert pd.isna(speedups["fused"])  # no counterpart in the baseline
    baseline = out[out["variant"] == "eager"]
    assert (baseline["speedup"] == 1.0).all()


def test_unknown_baseline(make_kernel: Callable[..., dict]) -> None:
    with pytest.raises(ValueError, match="baseline variant 'nope'"):
        normalize(pd.DataFrame([make_kernel("Net", 1.0)]), "nope")
