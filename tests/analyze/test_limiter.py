"""The launch limiter of latency-bound kernels, on real recorded reports.

Each verdict is found on recorded kernels, and the numbers in the reason are rebuilt from
the kernel's own columns (``grid_size``, ``waves``, ``sm_count``, ``registers_per_thread``,
Nsight Compute's recorded occupancy), never copied out of the reports.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze.limiter import (
    LOW_OCCUPANCY_PCT,
    TAIL_PCT,
    launch_limiter,
    tail_idle_pct,
)
from torch_nsight.render.reason_words import describe_limiter

DATA = Path(__file__).resolve().parents[1] / "data"
REPORTS = {
    "llama_block_fwd_bwd": DATA.parents[1] / "torch_nsight" / "demo"
                           / "llama_block_fwd_bwd.ncu-rep.xz",
    "convnet_fwd": DATA / "convnet_fwd.ncu-rep.xz",
    "findings_conv": DATA / "findings_conv",
    "gpt2_hand": DATA / "profile_fast" / "gpt2_hand.ncu-rep.xz",
    "vit_profile": DATA / "profile_fast" / "vit_profile_replicated.ncu-rep.xz",
    "vit_compiled": DATA / "compile" / "vit_train.ncu-rep.xz",
    "profile_steps": DATA / "profile_steps.ncu-rep.xz",
}


@pytest.fixture(scope="module")
def profiles() -> dict[str, torch_nsight.Profile]:
    return {name: load_recorded(path) for name, path in REPORTS.items()}


def latency_rows(profiles: dict[str, torch_nsight.Profile], limiter: str) -> pd.DataFrame:
    rows = [p.kernels[(p.kernels["bound"] == "latency") & (p.kernels["limiter"] == limiter)]
            for p in profiles.values()]
    found = pd.concat(rows)
    assert len(found), f"no latency-bound kernel limited by {limiter}"
    return found


def test_small_grid_names_its_blocks_and_sms(profiles: dict[str, torch_nsight.Profile]) -> None:
    for row in latency_rows(profiles, "small_grid").to_dict("records"):
        assert row["waves"] < 1
        grid, sms, per_sm = row["grid_size"], row["sm_count"], row["blocks_per_sm"]
        blocks = f"{grid:,.0f} block{'' if grid == 1 else 's'}"
        if grid < sms:
            assert f"{blocks} on {sms:.0f} SMs" in row["reason"]
        else:  # every SM has blocks, none is full
            assert f"{blocks}, room for {per_sm * sms:,.0f} ({per_sm:.0f} per SM" in row["reason"]


def test_tail_names_its_last_wave(profiles: dict[str, torch_nsight.Profile]) -> None:
    for row in latency_rows(profiles, "tail").to_dict("records"):
        waves = row["waves"]
        room = row["blocks_per_sm"] * row["sm_count"]
        assert room * waves == pytest.approx(row["grid_size"])  # ncu's waves, our occupancy
        partial = row["grid_size"] - math.floor(waves) * room
        assert f"a last wave of {partial:,.0f} blocks" in row["reason"]
        idle = 100 * (math.ceil(waves) - waves) / math.ceil(waves)
        assert idle >= TAIL_PCT and f"SMs idle up to {idle:.0f}% of the time" in row["reason"]


def test_register_limited_occupancy_says_the_registers(
        profiles: dict[str, torch_nsight.Profile]) -> None:
    rows = latency_rows(profiles, "registers")
    for row in rows.to_dict("records"):
        # the occupancy stated is Nsight Compute's own, with the registers that set it
        expected = (f"occupancy {row['ncu_occupancy_pct']:.0f}%: "
                    f"{row['registers_per_thread']:.0f} registers per thread")
        assert expected in row["reason"]
        assert row["ncu_block_limit_registers"] == row["blocks_per_sm"]
    assert rows["kernel"].str.contains("sdpa|nvjet|xmma").any()  # library kernels among them


@pytest.mark.parametrize(("resource", "ncu_limit", "words"), [
    ("shared_memory", "ncu_block_limit_shared_memory", "KB shared memory per block"),
    ("block_size", "ncu_block_limit_warps", "blocks of"),
    ("blocks_per_sm", "ncu_block_limit_blocks", "per SM"),
])
def test_every_occupancy_limiter_is_worded_with_its_numbers(
        resource: str, ncu_limit: str, words: str,
        profiles: dict[str, torch_nsight.Profile]) -> None:
    """Shared memory, block size and the block cap limit few recorded kernels, none of them
    latency-bound for that reason (a small grid comes first): the wording is checked on
    the kernels they do limit."""
    kernels = pd.concat([p.kernels for p in profiles.values()])
    limited = kernels[kernels["occupancy_limiter"] == resource]
    assert len(limited)
    for row in limited.to_dict("records"):
        assert row[ncu_limit] == row["blocks_per_sm"]
        text = describe_limiter(row, resource)  # type: ignore[arg-type]
        assert text.startswith(f"occupancy {row['ncu_occupancy_pct']:.0f}%: ")
        assert words in text
        if resource == "shared_memory":
            shared = row["shared_static_bytes"] + row["shared_dynamic_bytes"]
            assert f"{shared / 1024:.0f} KB" in text
        else:
            assert f"blocks of {row['block_size']:,.0f} threads" in text


def test_the_order_of_the_verdicts(profiles: dict[str, torch_nsight.Profile]) -> None:
    kernels = pd.concat([p.kernels for p in profiles.values()])
    for row in kernels[kernels["bound"] == "latency"].to_dict("records"):
        verdict = launch_limiter(row)
        assert verdict == row["limiter"]
        if row["waves"] < 1:
            assert verdict == "small_grid"
        elif row["occupancy_pct"] <= LOW_OCCUPANCY_PCT:
            assert verdict == row["occupancy_limiter"]
        elif tail_idle_pct(row["waves"]) >= TAIL_PCT:
            assert verdict == "tail"
        else:
            assert verdict == row["occupancy_limiter"]
        if verdict is None:  # the numbers that rule the launch out
            assert f"launch not the limit: occupancy {row['occupancy_pct']:.0f}%" \
                in row["reason"]


def test_no_limiter_outside_latency(profiles: dict[str, torch_nsight.Profile]) -> None:
    for profile in profiles.values():
        kernels = profile.kernels
        assert kernels.loc[kernels["bound"] != "latency", "limiter"].isna().all()
        others = kernels.loc[kernels["bound"].isin(["memory", "compute"]), "reason"]
        assert not others.str.contains("waves:|occupancy|launch not").any()


@pytest.mark.parametrize("name", ["llama_block_fwd_bwd", "vit_profile", "vit_compiled",
                                  "profile_steps"])
def test_top_hotspots_name_a_limiter(name: str,
                                     profiles: dict[str, torch_nsight.Profile]) -> None:
    """At most one latency-bound row of the top 10 without a limiter (issue 32's target),
    each with its fix in the next step."""
    top = profiles[name].hotspot_table(n=10)
    latency = top[top["bound"] == "latency"]
    named = latency["next_step"].str.contains(
        "under one wave|partial last wave|occupancy limited|blocks too small")
    assert len(latency) and (~named).sum() <= 1
    assert not latency["next_step"].str.contains("check occupancy").any()
