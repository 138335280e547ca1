"""Physically possible numbers on every recorded source in tests/data: no kernel above its
roofline ceiling (which no kernel can be), however its FLOPs were counted."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.errors import TorchNsightError

DATA = Path(__file__).resolve().parents[1] / "data"


def recorded_sources() -> list[Path]:
    """Every recorded source in tests/data: reports, saved profiles and sweep folders."""
    found = [*DATA.glob("*.ncu-rep.xz"), *DATA.glob("*/*.ncu-rep.xz"), *DATA.glob("*.parquet")]
    found += [p for p in DATA.glob("*/") if (p / "sweep.json").exists()]
    found += [p for p in DATA.glob("*/*/") if (p / "sweep.json").exists()]
    return sorted(found)


def test_there_are_sources_to_check() -> None:
    assert len(recorded_sources()) >= 30


@pytest.mark.parametrize("source", recorded_sources(),
                         ids=lambda p: str(p.relative_to(DATA)))
def test_no_kernel_above_its_roof(source: Path, caplog: pytest.LogCaptureFixture) -> None:
    try:
        kernels = torch_nsight.load(source, cache=False).kernels
    except TorchNsightError as err:  # a source that is not a profile on its own
        pytest.skip(str(err))
    if "pct_of_roof" not in kernels:
        pytest.skip("no roofline columns")
    assert not (kernels["pct_of_roof"] > 100).any()
    above = kernels["above_roof"].sum() if "above_roof" in kernels else 0
    assert above == 0, kernels.loc[kernels["above_roof"], ["kernel", "module_path"]]
    assert "above their roofline ceiling" not in caplog.text
