"""The warp-state columns (achieved occupancy, scheduler warps, stall reasons) of the latency
fixtures, read as ncu_report itself reads them; reports without them read as before; and the
focused second pass merged onto the first by step, kernel name and launch order, on the
real ViT-S report."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import read_recorded
from torch_nsight.analyze.stalls import stall_targets
from torch_nsight.formats import STALL_FOLDER
from torch_nsight.metrics import METRICS, OPTIONAL_KINDS
from torch_nsight.report import reader
from torch_nsight.report.names import function_name
from torch_nsight.report.ncu_source import split_carried_calls, split_carried_replication
from torch_nsight.report.stall_merge import STALL_COLUMNS, find_stall_report, merge_stall_pass

DATA = Path(__file__).resolve().parents[1] / "data"
VIT = DATA / "latency" / "vit_s.ncu-rep.xz"
RESNET = DATA / "latency" / "resnet50.ncu-rep.xz"
WARP_STATE = [m for m in METRICS if m.kind in OPTIONAL_KINDS]


@pytest.fixture(scope="module")
def vit_actions() -> Iterator[list[Any]]:
    with reader.local_report(VIT) as local:
        import ncu_report

        context = ncu_report.load_report(str(local))
        yield [context.range_by_idx(r).action_by_idx(a)
               for r in range(context.num_ranges())
               for a in range(context.range_by_idx(r).num_actions())]


@pytest.fixture(scope="module")
def vit_raw() -> pd.DataFrame:
    return read_recorded(VIT)[0]


def test_the_columns_are_what_ncu_report_reads(vit_raw: pd.DataFrame,
                                               vit_actions: list[Any]) -> None:
    assert len(WARP_STATE) == 4 + 18  # the four scheduler/occupancy figures, 18 reasons
    assert len(vit_raw) == len(vit_actions)
    for row, action in zip(vit_raw.to_dict("records"), vit_actions, strict=True):
        for declared in WARP_STATE:
            value = action.metric_by_name(declared.name)
            assert value is not None, declared.name  # recorded with the four sections
            assert row[declared.column] == value.as_double(), declared.name


def test_a_report_without_them_reads_as_before() -> None:
    frame, meta = read_recorded(DATA / "hand_s128.ncu-rep.xz")
    assert frame[list(STALL_COLUMNS)].isna().all().all()
    assert not set(meta["missing_metrics"]) & {m.name for m in WARP_STATE}
    with_sections = read_recorded(VIT)[1]
    # the optional columns never make a report "custom": the fixture is the fast set
    assert with_sections["metric_set"] == "fast"


def _function_rows(frame: pd.DataFrame, functions: set[str]) -> pd.Series:
    return frame["kernel_full"].map(function_name).isin(functions)


def _carriers_out(frame: pd.DataFrame) -> pd.DataFrame:
    frame, _ = split_carried_calls(frame, VIT)
    return split_carried_replication(frame, VIT)[0]


def test_merge_by_step_name_and_launch_order(vit_raw: pd.DataFrame) -> None:
    """The first pass without warp states, the second as ncu would record it (only the
    target names' launches, with them): each targeted launch gets its own values back."""
    frame = _carriers_out(vit_raw)
    functions = set(stall_targets(torch_nsight.load(VIT).kernels)["function"])
    first = frame.assign(**{c: math.nan for c in STALL_COLUMNS})
    second = frame[_function_rows(frame, functions)]
    assert 0 < len(second) < len(frame)
    merged = merge_stall_pass(first, second.iloc[::-1])  # order of rows read: irrelevant
    chosen = _function_rows(frame, functions)
    pd.testing.assert_frame_equal(merged.loc[chosen, list(STALL_COLUMNS)],
                                  frame.loc[chosen, list(STALL_COLUMNS)])
    assert merged.loc[~chosen, list(STALL_COLUMNS)].isna().all().all()
    # a launch the second pass lacks shifts nothing before it, and leaves it blank
    name = second["kernel_full"].value_counts().index[0]
    last = second[second["kernel_full"] == name].index[-1]
    partial = merge_stall_pass(first, second.drop(index=last))
    assert partial.loc[last, list(STALL_COLUMNS)].isna().all()
    others = chosen & (frame.index != last)
    pd.testing.assert_frame_equal(partial.loc[others, list(STALL_COLUMNS)],
                                  frame.loc[others, list(STALL_COLUMNS)])


def test_values_of_the_first_pass_are_kept(vit_raw: pd.DataFrame) -> None:
    frame = _carriers_out(vit_raw)
    doubled = frame.assign(**{c: frame[c] * 2 for c in STALL_COLUMNS})
    merged = merge_stall_pass(frame, doubled)
    pd.testing.assert_frame_equal(merged, frame)


def test_the_second_pass_beside_a_report_is_merged_not_loaded_alone(tmp_path: Path) -> None:
    shutil.copyfile(VIT, tmp_path / "report.ncu-rep.xz")
    (tmp_path / STALL_FOLDER).mkdir()
    assert find_stall_report(tmp_path / "report.ncu-rep.xz") is None
    shutil.copyfile(VIT, tmp_path / STALL_FOLDER / "report.ncu-rep.xz")
    assert find_stall_report(tmp_path / "report.ncu-rep.xz") == \
        tmp_path / STALL_FOLDER / "report.ncu-rep.xz"
    folder = torch_nsight.load(tmp_path)
    alone = torch_nsight.load(VIT)
    assert len(folder.meta.sources) == 1  # the stalls folder is no second source
    assert len(folder.kernels) == len(alone.kernels)
    pd.testing.assert_frame_equal(folder.kernels[list(STALL_COLUMNS)],
                                  alone.kernels[list(STALL_COLUMNS)])


def test_one_launch_per_configuration_gives_its_values_to_every_launch_of_it(
        vit_raw: pd.DataFrame) -> None:
    """The second pass as ncu records it with ``--filter-mode per-launch-config -c 1``: the
    first launch of each configuration of the target names; every launch of the first pass
    with that name, grid, block and dynamic shared memory gets that launch's values."""
    frame = _carriers_out(vit_raw)
    functions = set(stall_targets(torch_nsight.load(VIT).kernels)["function"])
    chosen = _function_rows(frame, functions)
    frame = frame.assign(function=frame["kernel_full"].map(function_name))
    config = ["function", "grid", "block", "shared_dynamic_bytes"]
    ordered = frame[chosen].sort_values(["range_index", "kernel_index"], kind="stable")
    second = ordered.drop_duplicates(config)
    # as many launches as stall_targets says the second pass profiles
    targets = stall_targets(torch_nsight.load(VIT).kernels)
    assert len(second) == int(targets["profiled_launches"].sum())
    assert len(second) < chosen.sum()  # some configurations launch more than once
    first = frame.assign(**{c: math.nan for c in STALL_COLUMNS})
    merged = merge_stall_pass(first, second.iloc[::-1])
    assert merged.loc[~chosen, list(STALL_COLUMNS)].isna().all().all()
    assert merged.loc[chosen, list(STALL_COLUMNS)].notna().all().all()  # every target row
    expected = frame.loc[chosen, config].merge(
        second[config + list(STALL_COLUMNS)], on=config, how="left").set_axis(
        frame.index[chosen])
    pd.testing.assert_frame_equal(merged.loc[chosen, list(STALL_COLUMNS)],
                                  expected[list(STALL_COLUMNS)].astype("float64"))
    pd.testing.assert_frame_equal(merged.loc[second.index, list(STALL_COLUMNS)],
                                  frame.loc[second.index, list(STALL_COLUMNS)])
