"""Theoretical occupancy computed from the launch, against Nsight Compute's own figures.

Every kernel of real recorded reports: our occupancy and blocks-per-SM limits must equal
what ncu recorded beside them (``sm__maximum_warps_per_active_cycle_pct``,
``launch__occupancy_limit_*``). Nothing here is typed from the reports.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import read_recorded
from torch_nsight.analyze.limiter import add_limiter
from torch_nsight.analyze.occupancy import (
    LIMITERS,
    add_occupancy,
    block_limits,
    occupancy_of,
    sm_limits,
)

DATA = Path(__file__).resolve().parents[1] / "data"
#: Reports of different kernel populations: a demo block, a CNN, cuDNN and CUTLASS convs,
#: whole eager and compiled training steps, a DDP rank.
REPORTS = {
    "llama_block_fwd_bwd": DATA.parents[1] / "torch_nsight" / "demo"
                           / "llama_block_fwd_bwd.ncu-rep.xz",
    "convnet_fwd": DATA / "convnet_fwd.ncu-rep.xz",
    "findings_conv": DATA / "findings_conv" / "sweep.ncu-rep.xz",
    "gpt2_hand": DATA / "profile_fast" / "gpt2_hand.ncu-rep.xz",
    "vit_profile": DATA / "profile_fast" / "vit_profile.ncu-rep.xz",
    "vit_compiled": DATA / "compile" / "vit_train.ncu-rep.xz",
    "ddp_rank0": DATA / "ddp_nccl" / "report-rank0.ncu-rep.xz",
}
#: Our resource name -> Nsight Compute's ``launch__occupancy_limit_*`` column.
NCU_LIMIT = {"registers": "ncu_block_limit_registers",
             "shared_memory": "ncu_block_limit_shared_memory",
             "block_size": "ncu_block_limit_warps", "blocks_per_sm": "ncu_block_limit_blocks"}


@pytest.fixture(scope="module")
def raw() -> dict[str, pd.DataFrame]:
    return {name: read_recorded(path)[0] for name, path in REPORTS.items()}


def kernels(frame: pd.DataFrame) -> list[dict[str, object]]:
    rows = frame[frame["ncu_occupancy_pct"].notna()].to_dict("records")
    assert rows
    return rows


@pytest.mark.parametrize("name", list(REPORTS))
def test_occupancy_equals_nsight_computes_on_every_kernel(
        name: str, raw: dict[str, pd.DataFrame]) -> None:
    for row in kernels(raw[name]):
        blocks, pct, limiter = occupancy_of(row)
        assert pct == pytest.approx(row["ncu_occupancy_pct"], abs=1e-9), row["kernel"]
        ncu = {k: row[c] for k, c in NCU_LIMIT.items()}
        assert blocks == min(ncu.values())
        # the limiter named is one of the resources whose limit ncu found the smallest
        assert (limiter is None) == (pct == 100.0)
        assert limiter is None or ncu[limiter] == blocks


@pytest.mark.parametrize("name", list(REPORTS))
def test_each_resource_limit_equals_nsight_computes(
        name: str, raw: dict[str, pd.DataFrame]) -> None:
    for row in kernels(raw[name]):
        sm = sm_limits(row)
        assert sm is not None
        ours = block_limits(row["block_size"], row["registers_per_thread"],
                            row["shared_static_bytes"] + row["shared_dynamic_bytes"]
                            + row["shared_reserved_bytes"], row["shared_config_bytes"], sm)
        for resource, column in NCU_LIMIT.items():
            if math.isinf(ours[resource]):  # uses none of it: ncu reports some cap instead
                assert row[column] >= min(ours.values())
            else:
                assert ours[resource] == row[column], (row["kernel"], resource)


def test_every_occupancy_limiter_is_seen_on_recorded_kernels(
        raw: dict[str, pd.DataFrame]) -> None:
    seen = {occupancy_of(row)[2] for frame in raw.values() for row in kernels(frame)}
    assert seen == {None, *LIMITERS}


def test_the_table_of_known_gpus_gives_what_the_device_attributes_give(
        raw: dict[str, pd.DataFrame]) -> None:
    """Without the device attributes (a source that lacks them), the H200's limits come
    from the compute capability, then from the GPU's name: the same occupancy."""
    device = ["sm_registers", "sm_shared_bytes", "sm_warps", "sm_blocks"]
    for row in kernels(raw["vit_profile"])[:200]:
        expected = occupancy_of(row)
        by_capability = {**row, **dict.fromkeys(device, math.nan)}
        by_name = {**by_capability, "compute_major": math.nan, "compute_minor": math.nan}
        assert occupancy_of(by_capability) == expected
        assert "H200" in str(row["gpu"]) and occupancy_of(by_name) == expected


def test_unknown_inputs_leave_occupancy_unknown() -> None:
    """A profile saved before shared memory was read (format 1): occupancy unknown, never
    guessed; the grid's waves still name a small grid; its hotspots still rank."""
    profile = torch_nsight.load(DATA / "profile_format1.parquet")
    assert profile.hotspot_table(n=5)["next_step"].notna().all()  # no limiter column: fine
    saved = profile.kernels
    assert "shared_static_bytes" not in saved or saved["shared_static_bytes"].isna().all()
    kernels = add_limiter(add_occupancy(saved))
    assert kernels["occupancy_pct"].isna().all()
    assert kernels["occupancy_limiter"].isna().all()
    small = kernels[(kernels["bound"] == "latency") & (kernels["waves"] < 1)]
    assert len(small) and (small["limiter"] == "small_grid").all()
    latency = kernels[kernels["bound"] == "latency"]
    assert not latency["reason"].str.contains("occupancy|launch not the limit").any()
    assert latency["limiter"].dropna().isin(["small_grid", "tail"]).all()  # from waves alone
