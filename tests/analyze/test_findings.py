"""Findings on recorded fixes (tests/data/findings_*, recorded by record_findings.py).

Each fixture holds a slow form and its fix, profiled on the same GPU: a finding must fire on
the slow form, name the module and a fix in PyTorch terms, estimate a gain within 2x of the
gain measured by profiling the fix (the slow form's time in that module minus the fixed
form's), and stay silent on the fix.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze import add_flops, add_peaks, add_roofline, classify
from torch_nsight.analyze import findings as findings_step
from torch_nsight.analyze.findings import findings as coded_findings
from torch_nsight.analyze.findings import gemm_dims
from torch_nsight.analyze.roofline import SASS_COLUMNS, TENSOR_COLUMNS
from torch_nsight.analyze.timeline_analysis import timeline_findings
from torch_nsight.errors import MissingMetricError
from torch_nsight.render.finding_words import word_findings
from torch_nsight.render.timeline_words import word_step_findings
from torch_nsight.vocabulary import FINDING_CODE_COLUMNS, FINDING_COLUMNS

DATA = Path(__file__).resolve().parents[1] / "data"
COLUMNS = ("variant", "shape", "module", "module_path", "direction", "op", "kernels",
           "finding", "evidence", "fix", "est_gain_ns", "gain_bound_ns", "gain_basis",
           "confidence")


def load(name: str) -> torch_nsight.Profile:
    return load_recorded(DATA / name)


def findings(*args: object) -> pd.DataFrame:
    """The analysis' findings (codes), worded as the Profile words them."""
    return word_findings(coded_findings(*args))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def gemm() -> torch_nsight.Profile:
    return load("findings_gemm")


@pytest.fixture(scope="module")
def fp32_off() -> torch_nsight.Profile:
    return load("findings_fp32_off")


@pytest.fixture(scope="module")
def fp32_on() -> torch_nsight.Profile:
    return load("findings_fp32_on")


@pytest.fixture(scope="module")
def chain() -> torch_nsight.Profile:
    return load("findings_chain")


@pytest.fixture(scope="module")
def conv() -> torch_nsight.Profile:
    return load("findings_conv")


def module_ns(profile: torch_nsight.Profile, module: str, variant: str | None = None) -> float:
    """GPU time per run of ``module`` in ``variant`` (all variants when None)."""
    k = profile.kernels
    rows = k[(k["module"] == module) & ((k["variant"] == variant) if variant else True)]
    runs = len(rows[["source", "run"]].drop_duplicates())
    return float(rows["duration_ns"].sum() / runs)


def of(found: pd.DataFrame, finding: str, variant: str | None = None) -> pd.DataFrame:
    rows = found[found["finding"] == finding]
    return rows if variant is None else rows[rows["variant"] == variant]


def within_2x(estimate: float, measured: float) -> bool:
    return measured > 0 and 0.5 <= estimate / measured <= 2.0


def test_columns_are_the_documented_ones(gemm: torch_nsight.Profile) -> None:
    assert FINDING_COLUMNS == COLUMNS
    # the words first, then the codes they were written from
    assert tuple(gemm.finding_table(fold=False).columns) == (*COLUMNS, *FINDING_CODE_COLUMNS)
    assert tuple(gemm.finding_table().columns) == (*COLUMNS, *FINDING_CODE_COLUMNS,
                                                   "blocks")  # how many rows it folds
    # the analysis' own table has the codes and no words
    coded = coded_findings(gemm.kernels, gemm.calls)
    assert "evidence" not in coded and "fix" not in coded and "fix_code" in coded


def test_profile_findings_passes_calls_settings_and_timeline(
        fp32_off: torch_nsight.Profile) -> None:
    expected = findings_step(fp32_off.kernels, fp32_off.calls, fp32_off.meta.settings,
                             fp32_off.timeline)
    pd.testing.assert_frame_equal(fp32_off.finding_table(fold=False), word_findings(expected))


def test_gemm_misaligned_fires_on_the_odd_vocabulary(gemm: torch_nsight.Profile) -> None:
    found = gemm.finding_table()
    row = of(found, "gemm_misaligned", "n50257").squeeze()
    assert (row["module"], row["module_path"]) == ("proj", "Projection/proj")
    assert row["kernels"] == "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1"
    assert "N = 50257" in row["evidence"]
    assert row["fix"].startswith("Pad the output features from 50257 to 50304")
    assert "nn.Linear(768, 50304)" in row["fix"]
    assert (row["gain_basis"], row["confidence"]) == ("roofline", "high")
    measured = module_ns(gemm, "proj", "n50257") - module_ns(gemm, "proj", "n50304")
    assert measured == pytest.approx(3_364_672 - 431_296)
    assert within_2x(row["est_gain_ns"], measured)
    assert of(found, "gemm_misaligned", "n50304").empty


def test_gemm_misaligned_from_kernel_names_without_calls(gemm: torch_nsight.Profile) -> None:
    found = findings(gemm.kernels)
    row = of(found, "gemm_misaligned", "n50257").squeeze()
    assert row["module"] == "proj"
    assert "align1" in row["kernels"] and "cutlass_75" in row["evidence"]
    assert "multiples of 64" in row["fix"] and row["confidence"] == "medium"
    assert row["est_gain_ns"] == pytest.approx(gemm.finding_table()["est_gain_ns"].iloc[0])
    assert of(found, "gemm_misaligned", "n50304").empty


def test_old_architecture_kernels_count_only_on_hopper(gemm: torch_nsight.Profile) -> None:
    kernels = gemm.kernels.copy()
    kernels["kernel"] = kernels["kernel"].str.replace("_align1", "", regex=False)
    assert not of(findings(kernels), "gemm_misaligned", "n50257").empty  # cutlass_75 on H200
    kernels["gpu"] = "NVIDIA A100-SXM4-80GB"
    assert of(findings(kernels), "gemm_misaligned").empty


def test_gemm_dims_reads_each_gemm_op() -> None:
    assert gemm_dims("mm", ((4096, 768), (768, 50257))) == (4096, 50257, 768)
    assert gemm_dims("addmm", ((1000,), (32, 256), (256, 1000))) == (32, 1000, 256)
    assert gemm_dims("bmm", ((8, 128, 64), (8, 64, 130))) == (128, 130, 64)
    assert gemm_dims("linear", ((2, 7, 768), (3072, 768))) == (14, 3072, 768)
    assert gemm_dims("matmul", ((768,), (768, 10))) is None


def test_fp32_no_tensor_cores_fires_with_tf32_off(fp32_off: torch_nsight.Profile,
                                                   fp32_on: torch_nsight.Profile) -> None:
    row = of(fp32_off.finding_table(), "fp32_no_tensor_cores").squeeze()
    assert (row["module"], row["direction"]) == ("Linear", "fwd")
    assert "ffma" in row["kernels"]
    for words in ("torch.backends.cuda.matmul.allow_tf32 = True",
                  "torch.set_float32_matmul_precision('high')", "bf16"):
        assert words in row["fix"]
    assert "allow_tf32 is False" in row["evidence"]
    assert (row["gain_basis"], row["confidence"]) == ("roofline", "high")
    measured = module_ns(fp32_off, "Linear") - module_ns(fp32_on, "Linear")
    assert measured == pytest.approx(2_704_512 - 337_280)
    assert within_2x(row["est_gain_ns"], measured)
    assert fp32_on.finding_table().empty


def test_fp32_no_tensor_cores_reads_the_settings(fp32_off: torch_nsight.Profile) -> None:
    unknown = of(findings(fp32_off.kernels, fp32_off.calls, None), "fp32_no_tensor_cores")
    assert unknown["confidence"].tolist() == ["medium"]
    on = {"cuda.matmul.allow_tf32": True}
    assert of(findings(fp32_off.kernels, fp32_off.calls, on), "fp32_no_tensor_cores").empty


def test_elementwise_chain_fires_on_the_eager_gelu(chain: torch_nsight.Profile) -> None:
    found = chain.finding_table()
    row = of(found, "elementwise_chain", "eager").squeeze()
    assert (row["module"], row["module_path"]) == ("act", "ChainBlock/act")
    assert row["kernels"] == "vectorized_elementwise_kernel"
    assert row["evidence"].startswith("9 memory-bound elementwise kernels in a row")
    assert "torch.compile" in row["fix"] and "F.gelu(approximate='tanh')" in row["fix"]
    measured = module_ns(chain, "act", "eager") - module_ns(chain, "act", "fused")
    assert measured == pytest.approx(338_816 - 38_624)
    assert within_2x(row["est_gain_ns"], measured)
    assert of(found, "elementwise_chain", "fused").empty
    assert found["variant"].tolist() == ["eager"]


def test_a_chain_is_consecutive_launches_of_one_module(
        make_kernel: Callable[..., dict]) -> None:
    def chain(*paths: str) -> pd.DataFrame:
        return pd.DataFrame([make_kernel(p, 10.0, kernel="vectorized_elementwise_kernel")
                             for p in paths])

    # 30 ns moving 300 bytes, one pass is 100 of them: two thirds of the time recovered
    row = findings(chain("M/a", "M/a", "M/a")).squeeze()
    assert (row["finding"], row["module"]) == ("elementwise_chain", "a")
    assert row["est_gain_ns"] == pytest.approx(20.0)
    assert findings(chain("M/a", "M/a", "M/b", "M/a", "M/a")).empty


def test_layout_conversion_fires_on_every_nchw_conv(conv: torch_nsight.Profile) -> None:
    found = conv.finding_table()
    rows = of(found, "layout_conversion", "nchw").set_index("module")
    assert sorted(rows.index) == ["stage1.0", "stage2.0", "stem.0"]
    for module, row in rows.iterrows():
        assert "model.to(memory_format=torch.channels_last)" in row["fix"]
        assert row["kernels"] == "nchwToNhwcKernel; nhwcToNchwKernel"
        assert row["gain_basis"] == "removed"
        measured = (module_ns(conv, module, "nchw")
                    - module_ns(conv, module, "channels_last"))
        assert within_2x(row["est_gain_ns"], measured), module
    total = module_ns(conv, "stem.0", "nchw")  # conversions are 65% of the stem conv
    assert rows.loc["stem.0", "est_gain_ns"] == pytest.approx(65_568 + 2_752 + 45_632)
    assert rows.loc["stem.0", "est_gain_ns"] / total == pytest.approx(0.648, abs=1e-3)
    assert of(found, "layout_conversion", "channels_last").empty


def test_small_grid_is_low_confidence_headroom(conv: torch_nsight.Profile) -> None:
    rows = of(conv.finding_table(), "small_grid", "channels_last").set_index("module")
    row = rows.loc["stem.1"]
    assert row["kernels"] == "batch_norm_transform_input_channels_last_kernel"
    assert (row["gain_basis"], row["confidence"]) == ("headroom", "low")
    k = conv.kernels
    kernel = k[(k["variant"] == "channels_last") & (k["module"] == "stem.1")
               & (k["kernel"] == "batch_norm_transform_input_channels_last_kernel")]
    # no model of what its fix does: no gain, the bound no fix can beat beside it
    assert np.isnan(row["est_gain_ns"])
    assert row["gain_bound_ns"] == pytest.approx(kernel["headroom_ns"].sum())
    # a batch norm's kernel under one wave: fused with its neighbours, never "a larger
    # batch" (its grid follows the channels, not the batch)
    assert (row["module_kind"], row["cause"], row["fix_code"]) == (
        "batch_norm", "small_grid", "compile_module")
    assert "torch.compile" in row["fix"] and "batch" not in row["fix"]
    # every small_grid row holds at least 5% of its run's time (a site alone, or the
    # sites of one kind together)
    assert all(facts["share_pct"] >= 5.0 for facts in rows["facts"])
    assert f"{row['facts']['share_pct']:.1f}% of the run's GPU time" in row["evidence"]


def test_kernels_flagged_by_a_fix_are_not_small_grid_again(
        conv: torch_nsight.Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    # from any share, the cuDNN weight transposes (under one wave) would be small_grid
    monkeypatch.setattr(sys.modules["torch_nsight.analyze.findings.small_grid"], "SMALL_GRID_PCT", 0.0)
    found = conv.finding_table()
    small = of(found, "small_grid", "nchw")
    assert not small.empty
    assert not small["kernels"].str.contains("nchwToNhwc|nhwcToNchw").any()
    assert len(of(found, "layout_conversion", "nchw")) == 3


def test_ranked_by_gain_largest_first(gemm: torch_nsight.Profile, chain: torch_nsight.Profile,
                                      conv: torch_nsight.Profile) -> None:
    joined = torch_nsight.Profile.concat([gemm, chain, conv])
    found = joined.finding_table()
    gains = found["est_gain_ns"].tolist()
    assert gains == sorted(gains, reverse=True)
    assert found["finding"].iloc[:3].tolist() == ["gemm_misaligned", "elementwise_chain",
                                                  "layout_conversion"]


def test_times_are_per_run(chain: torch_nsight.Profile, gemm: torch_nsight.Profile) -> None:
    for profile in (chain, gemm):
        again = profile.kernels.assign(run=1)
        doubled = profile.with_kernels(pd.concat([profile.kernels, again],
                                                 ignore_index=True))
        pd.testing.assert_frame_equal(doubled.finding_table(), profile.finding_table())
    # a second run three times as slow: the per-run chain takes twice as long, and so does
    # the gain (one pass over the same bytes is the same share of it)
    slow = chain.kernels.assign(run=1, duration_ns=chain.kernels["duration_ns"] * 3)
    both = findings(pd.concat([chain.kernels, slow], ignore_index=True), chain.calls)
    once = findings(chain.kernels, chain.calls)
    assert both["est_gain_ns"].iloc[0] == pytest.approx(2 * once["est_gain_ns"].iloc[0])


def without_flop_counters(profile: torch_nsight.Profile) -> pd.DataFrame:
    """The kernel table as a report without the instruction and tensor counters reads."""
    kernels = profile.kernels.drop(columns=[*SASS_COLUMNS, *TENSOR_COLUMNS])
    for step in (add_flops, add_peaks, add_roofline, classify):
        kernels = step(kernels)
    return kernels


def test_a_report_without_flop_counters_gives_fewer_findings(
        gemm: torch_nsight.Profile, fp32_off: torch_nsight.Profile,
        chain: torch_nsight.Profile, conv: torch_nsight.Profile) -> None:
    # the fp32 GEMM by its name (a CUDA-core ffma kernel), its gain unknown without FLOPs
    blind_fp32 = findings(without_flop_counters(fp32_off), fp32_off.calls,
                          fp32_off.meta.settings).squeeze()
    assert (blind_fp32["finding"], blind_fp32["fix_code"]) == ("fp32_no_tensor_cores",
                                                               "tf32_matmul")
    assert blind_fp32["facts"]["by_name"] and pd.isna(blind_fp32["est_gain_ns"])
    row = of(findings(without_flop_counters(gemm), gemm.calls), "gemm_misaligned").squeeze()
    assert row["variant"] == "n50257" and pd.isna(row["est_gain_ns"])
    blind = findings(without_flop_counters(chain), chain.calls)
    pd.testing.assert_frame_equal(blind, chain.finding_table(fold=False))  # DRAM bytes suffice
    fewer = findings(without_flop_counters(conv), conv.calls)
    # (the conversions and the NCHW batch norm are timed kernels: no FLOPs needed)
    assert set(fewer["finding"]) == {"layout_conversion", "nchw_kernels"}
    assert len(fewer) < len(conv.finding_table(fold=False))


def test_timeline_findings_come_along() -> None:
    profile = load("timeline_decode")
    found = profile.finding_table()
    row = of(found, "launch_bound").squeeze()
    assert (row["module"], row["gain_basis"]) == ("GPT2Small", "timeline")
    expected = word_step_findings(timeline_findings(profile.kernels, profile.timeline))
    assert row["est_gain_ns"] == pytest.approx(expected["est_gain_ns"].iloc[0])
    assert row["fix"] == expected["fix"].iloc[0]


def test_idle_spread_over_the_step_is_the_models_not_one_modules() -> None:
    """The recorded training step idles 27% of its time in many gaps; the largest share sits
    before one module, but far from most of it: the finding names the model and says where
    the largest share is, not the module with the whole gain."""
    profile = load("timeline_train")
    row = of(profile.finding_table(), "gpu_idle").squeeze()
    assert row["module"] == "GPT2Small"  # the root, as launch_bound names it
    largest = re.search(r"its largest share \(([\d.]+) µs per step\) is just before (\S+)\.",
                        row["evidence"])
    assert largest is not None, row["evidence"]
    assert largest.group(2) == "h.0.attn"
    assert float(largest.group(1)) * 1e3 < 0.5 * row["est_gain_ns"]  # far from most of it


def test_a_table_without_kernel_names_is_refused() -> None:
    with pytest.raises(MissingMetricError, match="findings"):
        findings(pd.DataFrame({"duration_ns": [1.0]}))


def test_each_chain_gets_the_fix_for_what_it_computes() -> None:
    """A Hugging Face Llama (hidden 1024, batch 2, seq 1024, bf16) and GPT-2, as recorded:
    RMSNorm, rotary embedding and tanh-GELU chains, each named by its kernels' functors."""
    llama = torch_nsight.load(DATA / "bound_calibration" / "llama_sol.ncu-rep.xz").finding_table()
    chains = llama[llama["finding"] == "elementwise_chain"].set_index("module")
    for norm in ("model.layers.{0-1}.input_layernorm", "model.norm"):
        assert "torch.nn.functional.rms_norm" in chains.loc[norm, "fix"]
        assert "(an RMSNorm written out)" in chains.loc[norm, "evidence"]
        # one fused pass reads the bf16 activation once and writes it once: 2 x 4.2 MB,
        # not the few kB of the rsqrt on the reduced variance
        assert "one fused pass moves about 8.4 MB" in chains.loc[norm, "evidence"]
    for rope in ("model.rotary_emb", "model.layers.{0-1}.self_attn"):
        assert "rotary embedding" in chains.loc[rope, "fix"]
    gpt2 = torch_nsight.load(DATA / "hf_gpt2_fast").finding_table()
    act = gpt2[gpt2["module"] == "transformer.h.{0-11}.mlp.act"].squeeze()
    assert "F.gelu(approximate='tanh')" in act["fix"]
    assert not gpt2["evidence"].str.contains("nan").any()
    assert not llama["evidence"].str.contains("nan").any()
