"""The cheap tier on a real model: Hugging Face GPT-2 small swept with metric_set 'fast'
(one replay pass: durations and DRAM bytes) on an H200 (tests/data/hf_gpt2_fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from tests.recorded import load_recorded

DATA = Path(__file__).resolve().parents[1] / "data"
TOKENS = 4 * 1024  # batch 4, seq 1024
D = 768


@pytest.fixture(scope="module")
def profile() -> torch_nsight.Profile:
    return load_recorded(DATA / "hf_gpt2_fast")


def test_every_kernel_is_timed_placed_and_bound(profile) -> None:
    k = profile.kernels
    assert profile.metric_sets == ["fast"]
    assert len(k) == 235 and k["duration_ns"].notna().all() and k["dram_bytes"].notna().all()
    # estimated, and saying so: FLOPs from the calls table, bound from the roofline alone
    assert set(k["flops_basis"]) == {"calls"} and set(k["basis"]) == {"roofline"}
    assert k["bound"].notna().all() and k["pct_of_roof"].notna().all()
    assert (k["module"] != "(unattributed)").all()


def test_one_block_profiled_the_others_copied_nothing_dropped(profile) -> None:
    k = profile.kernels
    profiled = k[k["replicated_from"].isna()]
    assert len(profiled) == 25 and len(k) - len(profiled) == 210
    block = k["module"].str.extract(r"^transformer\.h\.(\d+)\.")[0]
    per_block = block.value_counts()
    assert len(per_block) == 12 and per_block.nunique() == 1  # every block has block 0's rows
    assert k.loc[block.notna() & (block != "0"), "replicated_from"].notna().all()


@pytest.mark.parametrize("module, flops", [
    ("transformer.h.0.attn.c_attn", 2 * TOKENS * D * 3 * D),
    ("transformer.h.0.attn.c_proj", 2 * TOKENS * D * D),
    ("transformer.h.0.mlp.c_fc", 2 * TOKENS * D * 4 * D),
    ("transformer.h.7.mlp.c_proj", 2 * TOKENS * 4 * D * D),  # a replicated block
    ("lm_head", 2 * TOKENS * D * 50257),
    # scaled_dot_product_attention: 4 B H S^2 Dh (the full S x S product, causal or not)
    ("transformer.h.0.attn", 4 * 4 * 12 * 1024 * 1024 * 64),
])
def test_the_work_goes_to_the_kernel_that_does_it(profile, module, flops) -> None:
    rows = profile.kernels[profile.kernels["module"] == module]
    heavy = rows[rows["flops"] > 0]
    assert len(heavy) == 1 and heavy["flops"].iloc[0] == flops
    assert heavy["precision"].iloc[0] == "tensor_bf16"
    assert heavy["duration_ns"].iloc[0] == rows["duration_ns"].max()
    # the module's other kernels (bias adds, copies) are placed by their DRAM bytes
    assert (rows.drop(heavy.index)["flops"] == 0).all()


def test_the_misaligned_head_is_found_without_counters(profile) -> None:
    top = profile.findings().iloc[0]
    assert (top["module"], top["finding"]) == ("lm_head", "gemm_misaligned")
    assert "50304" in top["fix"]
