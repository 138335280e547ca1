"""Fixes that name the right thing, on a recorded GPT-2 training step (tests/data/
decoder_train: lm_head 768 -> 50257, the loss inside the model), recorded with the fast
default and with durations only."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.golden_sources import Source, find_sources, per_source
from tests.golden_sources import load as golden_load
from tests.recorded import load_recorded
from torch_nsight.analyze.devices import KNOWN_GPUS, known_gpu
from torch_nsight.metrics import PRECISIONS

DATA = Path(__file__).resolve().parents[1] / "data"
DECODER = DATA / "decoder_train"


@pytest.fixture(scope="module")
def fast() -> torch_nsight.Profile:
    return load_recorded(DECODER / "fast.ncu-rep.xz")


@pytest.fixture(scope="module")
def duration() -> torch_nsight.Profile:
    return load_recorded(DECODER / "duration.ncu-rep.xz")


def _head(found: pd.DataFrame) -> pd.DataFrame:
    rows = found[(found["finding"] == "gemm_misaligned")
                 & (found["module_path"] == "GPT2LMHeadModel/lm_head")]
    return rows.set_index("direction")


def test_the_heads_backward_names_the_vocabulary_not_the_batch(
        fast: torch_nsight.Profile) -> None:
    head = _head(fast.findings())
    assert set(head.index) == {"fwd", "bwd"}
    for direction in ("fwd", "bwd"):
        fix = head.loc[direction, "fix"]
        assert fix.startswith("Pad the output features from 50257 to 50304: "
                              "nn.Linear(768, 50304)"), fix
        assert "batch x sequence" not in fix and "input features" not in fix
    # the weight gradient's M and the input gradient's K are both the vocabulary
    evidence = head.loc["bwd", "evidence"]
    assert "M = 50257 (output features)" in evidence
    assert "K = 50257 (output features)" in evidence


def test_the_loss_is_not_sent_to_attention(fast: torch_nsight.Profile) -> None:
    found = fast.findings()
    loss = found[(found["finding"] == "elementwise_chain")
                 & (found["module_path"] == "GPT2LMHeadModel")]
    assert len(loss) == 1
    assert "the loss" in loss["evidence"].iat[0]
    assert "scaled_dot_product_attention" not in loss["fix"].iat[0]
    assert loss["fix"].iat[0].startswith("Fuse the loss")


def test_a_duration_only_report_gets_gains_from_known_peaks(
        fast: torch_nsight.Profile, duration: torch_nsight.Profile,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    measured, timed = _head(fast.findings()), _head(duration.findings())
    assert set(timed.index) == {"fwd", "bwd"}
    for direction in ("fwd", "bwd"):
        gain, reference = timed.loc[direction, "est_gain_ns"], measured.loc[direction,
                                                                           "est_gain_ns"]
        # the same step recorded twice: the compute ceiling from the table's peaks gives
        # the gain the report's own peaks and DRAM bytes give, within 5%
        assert gain == pytest.approx(reference, rel=0.05)
        assert timed.loc[direction, "gain_basis"] == "compute roof, known-GPU peaks"
        assert measured.loc[direction, "gain_basis"] == "roofline"
    kernels = duration.kernels
    assert set(kernels["peak_basis"].dropna()) == {"table"}
    # no ceiling above the time a kernel took, and no side claimed without DRAM bytes
    assert not (kernels["pct_of_roof"] > 100).any()
    assert kernels["roofline_side"].isna().all()


#: Recorded with the fast default on Hopper GPUs (2026-11-26 on): each carries its own peaks.
WITH_PEAKS = ("zoo_families/", "zoo_fast/")


@pytest.mark.parametrize("source", per_source([s for s in find_sources()
                                               if s.path.endswith(".ncu-rep.xz")]))
def test_the_table_agrees_with_the_reports_own_peaks(source: Source) -> None:
    """On every report with peaks of its own (every one the zoo recorded has them):
    Nsight Compute's per-cycle peaks are the table's per-SM rates times the SMs, its DRAM
    peak at the measured clock the table's, and 95% of kernels ran at or under the table's
    boost clock (within the 1% a clock measured over short kernels overshoots). Read as the
    golden tests read it (once per source and worker)."""
    profile = golden_load(source.path).profile
    if profile is None:
        pytest.skip(f"{source.path} does not load as a profile")
    kernels = profile.kernels
    own = kernels[kernels["peak_basis"] == "report"] if "peak_basis" in kernels else kernels[:0]
    if own.empty or own["sm_clock_hz"].isna().all():
        assert not source.path.startswith(WITH_PEAKS), "the zoo's recordings carry peaks"
        pytest.skip(f"{source.path} has no peaks of its own")
    gpu = known_gpu(own["gpu"].iat[0])
    assert gpu is not None, own["gpu"].iat[0]
    for name, (_, peak, factor) in PRECISIONS.items():
        if name.startswith("tensor_") and own[peak].notna().any():
            per_cycle = own[peak].max() * factor
            table = gpu.flops_per_s(name)
            assert table is not None, name
            assert per_cycle == pytest.approx(table / (gpu.boost_mhz * 1e6), rel=1e-3), name
    # (a clock measured over a short kernel can overshoot: 2.09 GHz on one ViT kernel,
    # 1.99 GHz at the 95th percentile of an H100 of tests/data/zoo_families)
    assert own["sm_clock_hz"].quantile(0.95) <= gpu.boost_mhz * 1e6 * 1.01
    dram = (own["peak_dram_bytes_per_cycle"] * own["dram_clock_hz"]).median()
    assert dram == pytest.approx(gpu.dram_bytes_per_s, rel=0.03)


def test_names_match_the_right_entry() -> None:
    names = {"NVIDIA H100 80GB HBM3": 3.35e12, "NVIDIA H100 PCIe": 2.0e12,
             "NVIDIA H200": 4.8e12, "NVIDIA A100-SXM4-80GB": 2.039e12,
             "NVIDIA A100-SXM4-40GB": 1.555e12, "NVIDIA A100 80GB PCIe": 1.935e12,
             "NVIDIA L4": 0.3e12, "NVIDIA L40S": 0.864e12, "NVIDIA A10": 0.6e12}
    for name, dram in names.items():
        gpu = known_gpu(name)
        assert gpu is not None and gpu.dram_bytes_per_s == dram, name
    assert known_gpu("NVIDIA A10G") is None and known_gpu(None) is None
    names = [name for gpu in KNOWN_GPUS for name in gpu.names]
    assert len(set(names)) == len(names)
