"""The cause of latency-bound kernels from their warp states, on the two recorded training
steps of tests/data/latency: ViT-S (where the thresholds were set) and ResNet-50 (checked
with them unchanged). Every number a reason states is rebuilt here from the kernel's own
columns; which kernels a second pass would profile is checked against Nsight Compute's own
function names, read with ncu_report."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import read_recorded
from torch_nsight import formats
from torch_nsight.analyze import hotspots
from torch_nsight.analyze.limiter import LIMITER_CODES, TAIL_PCT, tail_idle_pct
from torch_nsight.analyze.stalls import (
    DOMINANT_STALL_PCT,
    LAUNCH_OVERHEAD_NS,
    STALL_GROUPS,
    TARGET_COVER_PCT,
    TARGET_NAMES,
    stall_targets,
)
from torch_nsight.collect.parent.stall_pass import kernel_filter
from torch_nsight.metrics import STALL_REASONS, stall_column
from torch_nsight.render.hotspot_words import word_hotspots, word_kernels
from torch_nsight.report import reader
from torch_nsight.units import format_duration

DATA = Path(__file__).resolve().parents[1] / "data" / "latency"
REPORTS = {"vit_s": DATA / "vit_s.ncu-rep.xz", "resnet50": DATA / "resnet50.ncu-rep.xz"}
STALLS = [stall_column(r) for r in STALL_REASONS]


@pytest.fixture(scope="module")
def kernels() -> dict[str, pd.DataFrame]:
    return {name: torch_nsight.load(path).kernels for name, path in REPORTS.items()}


def latency(kernels: dict[str, pd.DataFrame]) -> pd.DataFrame:
    frames = [k[k["bound"] == "latency"].assign(model=name) for name, k in kernels.items()]
    return pd.concat(frames, ignore_index=True)


def shares(row: dict[str, Any]) -> dict[str, float]:
    total = sum(row[c] for c in STALLS)
    return {r: 100 * row[stall_column(r)] / total for r in STALL_REASONS}


def group_share(row: dict[str, Any], group: str) -> tuple[float, str, float]:
    """(the group's share, its largest reason, that reason's share)."""
    each = shares(row)
    members = STALL_GROUPS[group]  # type: ignore[index]
    top = max(members, key=lambda r: each[r])
    return sum(each[r] for r in members), top, each[top]


def warps_text(row: dict[str, Any]) -> str:
    eligible = row["eligible_warps_per_scheduler"]
    count = f"{eligible:.2g}"
    return (f"achieved occupancy {row['achieved_occupancy_pct']:.0f}% of "
            f"{row['occupancy_pct']:.0f}% theoretical; {count} eligible "
            f"warp{'' if count == '1' else 's'} per scheduler")


def test_every_latency_bound_kernel_has_its_warp_states(kernels) -> None:
    rows = latency(kernels)
    assert len(rows) > 500
    assert rows[STALLS + ["achieved_occupancy_pct", "eligible_warps_per_scheduler"]
                ].notna().all().all()


def test_each_cause_found_is_said_with_its_numbers(kernels) -> None:
    rows = latency(kernels)
    found = set(rows["limiter"].dropna())
    # the verdicts the two steps give (few_warps only on ResNet-50)
    assert {"launch_overhead", "small_grid", "registers", "tail", "memory_latency",
            "instruction_issue", "few_warps"} <= found
    for row in rows.to_dict("records"):
        kind, reason = row["limiter"], row["reason"]
        slow = row["duration_ns"] >= LAUNCH_OVERHEAD_NS
        if kind == "launch_overhead":
            assert not slow
            assert f"{format_duration(row['duration_ns'], decimals=3)} launch: too short" \
                in reason
        else:
            assert slow, reason
        if kind == "small_grid":
            assert row["waves"] < 1
        if kind == "tail":
            assert tail_idle_pct(row["waves"]) >= TAIL_PCT
        if kind == "registers":
            assert f"{row['registers_per_thread']:.0f} registers per thread" in reason
            assert row["eligible_warps_per_scheduler"] < 1 and row["occupancy_pct"] <= 50
        if kind == "memory_latency":
            whole, top, share = group_share(row, "memory")
            assert whole >= DOMINANT_STALL_PCT
            assert f"{top.replace('_', ' ')} {share:.0f}% of stalls" in reason
            assert "waits on global memory" in reason
        if kind == "instruction_issue":
            issued = 100 * row["issued_warps_per_scheduler"]
            assert f"schedulers issue on {issued:.0f}% of cycles" in reason or \
                group_share(row, "issue")[0] >= DOMINANT_STALL_PCT
        if kind == "few_warps":
            assert row["achieved_occupancy_pct"] < row["occupancy_pct"] / 2
        if kind != "few_warps":
            assert warps_text(row) in reason, reason


def test_no_stall_group_is_skipped_for_a_later_rule(kernels) -> None:
    """A kernel whose launch is not the limit and one of whose stall groups holds the
    dominant share is named by that group."""
    group_cause = {"memory": "memory_latency", "synchronization": "synchronization",
                   "issue": "instruction_issue", "shared_memory": "shared_memory_access"}
    rows = latency(kernels)
    for row in rows.to_dict("records"):
        if row["limiter"] in ("launch_overhead", "small_grid", "tail", "registers",
                              "shared_memory", "block_size", "blocks_per_sm"):
            continue
        dominant = [g for g in STALL_GROUPS if group_share(row, g)[0] >= DOMINANT_STALL_PCT]
        if dominant:
            assert row["limiter"] == group_cause[dominant[0]]


@pytest.mark.parametrize("model", ["vit_s", "resnet50"])
def test_the_top_10_latency_hotspots_name_a_cause_with_numbers(kernels, model: str) -> None:
    table = word_hotspots(hotspots(kernels[model], n=10_000))
    top = table[table["bound"] == "latency"].head(10)
    assert len(top) == 10
    for row in top.to_dict("records"):
        assert row["next_step_code"] in LIMITER_CODES, row["reason"]  # a fix for a named cause
        assert re.search(r"\d+% of stalls", row["reason"]), row["reason"]
        assert re.search(r"[\d.]+ eligible warps? per scheduler", row["reason"])


@pytest.fixture(scope="module")
def vit_names() -> Iterator[list[tuple[str, str]]]:
    """(demangled name, Nsight Compute's function name: what ``-k`` matches) of every ViT-S
    kernel, read with ncu_report."""
    with reader.local_report(REPORTS["vit_s"]) as local:
        import ncu_report

        context = ncu_report.load_report(str(local))
        actions = [context.range_by_idx(r).action_by_idx(a)
                   for r in range(context.num_ranges())
                   for a in range(context.range_by_idx(r).num_actions())]
        yield [(a.name(ncu_report.IAction.NameBase_DEMANGLED),
                a.name(ncu_report.IAction.NameBase_FUNCTION)) for a in actions]


def test_the_second_pass_targets_on_the_vit_report(kernels, vit_names) -> None:
    k = kernels["vit_s"]
    vit_functions = [function for _, function in vit_names]
    targets = stall_targets(k)
    chosen = list(targets["function"])
    assert 0 < len(chosen) <= TARGET_NAMES
    # the names are ncu's, and hold the most latency-bound time (replicas counted)
    assert set(chosen) <= set(vit_functions)
    rows = k[k["bound"] == "latency"]
    by_name = rows.groupby(rows["kernel_full"].map(dict(vit_names)))["duration_ns"].sum()
    by_name = by_name.sort_values(ascending=False)
    covered = by_name[chosen].sum() / by_name.sum() * 100
    assert covered >= TARGET_COVER_PCT
    assert by_name[chosen[:-1]].sum() / by_name.sum() * 100 < TARGET_COVER_PCT
    assert list(by_name.index[:len(chosen)]) == chosen
    # the -k filter takes exactly those names, and the second pass profiles one launch per
    # launch configuration of those the first profiled (replicas are not in the report),
    # plus instrument()'s carrier kernels of those names (its messages: calls table,
    # replicated groups)
    pattern = re.compile(kernel_filter(chosen).removeprefix("regex:"))
    matched = [f for f in vit_functions if pattern.search(f)]
    assert set(matched) == set(chosen)
    raw = read_recorded(REPORTS["vit_s"])[0]
    carriers = raw["range_start_end"].map(lambda ranges: any(
        m.startswith((formats.CALLS_MESSAGE_PREFIX, formats.REPLICATION_PREFIX))
        for m in ranges))
    carried = sum(pattern.search(f) is not None for f, carrier in
                  zip(vit_functions, carriers, strict=True) if carrier)
    assert carried == carriers.sum() == 2
    configs = {(f, grid, block, shared) for f, grid, block, shared, carrier in zip(
        vit_functions, raw["grid"], raw["block"], raw["shared_dynamic_bytes"], carriers,
        strict=True) if pattern.search(f) and not carrier}
    assert len(configs) < len(matched) - carried  # fewer launches than every one
    assert int(targets["profiled_launches"].sum()) == len(configs)
    assert math.isclose(targets["cumulative_pct"].iloc[-1], covered)


def without_stall_reasons(frame: pd.DataFrame) -> pd.DataFrame:
    """The same kernels as the fast set records them since it holds the scheduler's
    figures: no stall reason, verdicts made again (and worded)."""
    from torch_nsight.analyze import classify
    from torch_nsight.analyze.limiter import add_limiter

    return word_kernels(add_limiter(classify(frame.drop(columns=["limiter"]).assign(
        **{c: math.nan for c in STALLS}))))


@pytest.mark.parametrize("model", ["vit_s", "resnet50"])
def test_the_scheduler_figures_alone_name_a_cause(kernels, model: str) -> None:
    """What the fast set's one pass gives (achieved occupancy, eligible and issued warps):
    every verdict that needs no stall reason is the one the stall reasons give, and a kernel
    whose warps wait is one the stall reasons call memory latency."""
    full = kernels[model]
    fast = without_stall_reasons(full)
    rows = fast["bound"] == "latency"
    verdicts = pd.DataFrame({"fast": fast.loc[rows, "limiter"], "full": full.loc[rows, "limiter"],
                             "ns": full.loc[rows, "duration_ns"]})
    waiting = verdicts[verdicts["fast"] == "waiting_warps"]
    assert len(waiting) > 0
    assert set(waiting["full"]) == {"memory_latency"}  # measured: the two recorded steps
    launch_only = verdicts["fast"].isin(["launch_overhead", "small_grid", "tail", "registers",
                                         "shared_memory", "block_size", "blocks_per_sm"])
    same = verdicts[launch_only]
    assert (same["fast"] == same["full"]).mean() > 0.9
    for row in fast[rows].to_dict("records"):
        if row["limiter"] == "waiting_warps":
            assert row["eligible_warps_per_scheduler"] < 1
            assert warps_text(row) + ": warps wait on memory or a dependency" in row["reason"]
            issued = 100 * row["issued_warps_per_scheduler"]
            assert f"schedulers issue on {issued:.0f}% of cycles" in row["reason"]
            assert not re.search(r"% of stalls", row["reason"])
    top = word_hotspots(hotspots(fast, n=10))
    top = top[top["bound"] == "latency"]
    assert len(top) > 0
    assert top["next_step_code"].isin(LIMITER_CODES).all(), list(top["reason"])
