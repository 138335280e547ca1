"""``nchw_kernels`` and channels-last's other rows on the recorded NCHW/channels-last pair
(tests/data/channels_last: the same EfficientNet-B0 training step, one run, H100): the
finding fires on the NCHW step only, its calibrated gain is what the pair measured, and a
network already channels-last is never told to go channels-last."""

from __future__ import annotations

import pandas as pd
import pytest

import torch_nsight
from tests.golden_sources import DATA
from tests.recorded import load_recorded
from torch_nsight.analyze.findings.layout_conversion import runs_channels_last
from torch_nsight.analyze.findings.nchw_kernels import NCHW_FAMILIES

PAIR = DATA / "channels_last"


@pytest.fixture(scope="module")
def nchw() -> torch_nsight.Profile:
    return load_recorded(PAIR / "efficientnet_nchw.ncu-rep.xz")


@pytest.fixture(scope="module")
def channels_last() -> torch_nsight.Profile:
    return load_recorded(PAIR / "efficientnet_b0.ncu-rep.xz")


def _time(kernels: pd.DataFrame, pattern: str, exclude: str | None = None) -> float:
    names = kernels["kernel_full"].astype(str)
    mask = names.str.contains(pattern)
    if exclude:
        mask &= ~names.str.contains(exclude)
    return float(kernels.loc[mask, "duration_ns"].sum())


def test_the_calibrated_gain_is_what_the_pair_measured(nchw: torch_nsight.Profile,
                                                       channels_last: torch_nsight.Profile
                                                       ) -> None:
    """The NCHW batch-norm and depthwise kernels' time less what channels-last's kernels for
    the same work took, read from both reports, against the findings' summed gain."""
    found = nchw.finding_table(fold=False)
    rows = found[found["finding"] == "nchw_kernels"]
    assert set(rows["cause"]) == set(NCHW_FAMILIES)
    assert (rows["fix_code"] == "channels_last").all()
    before = (_time(nchw.kernels, "batch_norm_", "channels_last")
              + _time(nchw.kernels, "conv_depthwise2d_"))
    # channels-last runs batch norm in its own kernels and depthwise convolutions in cuDNN's
    # c1_k1 (one channel a group) kernels
    after = (_time(channels_last.kernels, "batch_norm_")
             + _time(channels_last.kernels, r"c1_k1_nhwc"))
    measured = before - after
    assert measured > 0.5 * before  # a real effect, not noise
    assert rows["est_gain_ns"].sum() == pytest.approx(measured, rel=0.05)


def test_no_channels_last_advice_for_a_channels_last_network(
        channels_last: torch_nsight.Profile, nchw: torch_nsight.Profile) -> None:
    assert runs_channels_last(channels_last.kernels).all()
    assert not runs_channels_last(nchw.kernels).any()
    found = channels_last.finding_table(fold=False)
    assert len(found) and not (found["fix_code"] == "channels_last").any()
    assert not (found["finding"] == "nchw_kernels").any()
    # its squeeze-excitation's conversions (N x C x 1 x 1) are still reported, with no switch
    layout = found[found["finding"] == "layout_conversion"]
    assert len(layout) and (layout["fix_code"] == "none_known").all()


def test_nchw_batch_norm_is_not_told_to_grow_its_batch(nchw: torch_nsight.Profile) -> None:
    """Issue 43: the NCHW batch-norm backward under one wave was told "a larger batch"; it
    is now channels-last's row (small_grid skips the kernels an earlier check claimed)."""
    found = nchw.finding_table(fold=False)
    norm = found[found["module_kind"] == "batch_norm"]
    assert len(norm)
    assert not (norm["fix_code"] == "larger_batch").any()
    assert (norm["fix_code"] == "channels_last").any()
