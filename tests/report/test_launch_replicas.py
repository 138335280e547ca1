"""Launches replicated (``profile --replicate-launches``) on an LSTM language model's step
recorded on an H100 (tests/data/outside_lstm, see its README row): the launch list of a
process without ncu numbers the launches as ncu profiled them in another process;
replicating that step's launches keeps every module's time within the issue's noise; the replicated report reads a row for every
launch; rows that do not line up are never copied."""

from __future__ import annotations

import logging
import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.errors import ReportError
from torch_nsight.report.kernel_table import read_report
from torch_nsight.report.launch_replicas import (
    LaunchPlan,
    check_steps_listed,
    launch_list,
    numbered,
    plan_representatives,
    replicated_table,
    with_replicated_launches,
)
from torch_nsight.report.ncu_source import split_carried_calls, split_carried_replication
from torch_nsight.report.source_base import ReadOptions
from torch_nsight.report.timeline_source import TimelineDirectory
from torch_nsight.report.trace import function_name

DATA = Path(__file__).resolve().parents[1] / "data" / "outside_lstm"
STEP = "sweep;variant=;shape=;run=3"


@pytest.fixture(scope="module")
def launches() -> pd.DataFrame:
    """Step 3 of the timeline (steps 3 to 5, without ncu)."""
    kernels = TimelineDirectory().read(DATA / "timeline", ReadOptions(cache=False)).kernels
    listed = launch_list(kernels)
    return listed[listed["step"] == STEP].reset_index(drop=True)


@pytest.fixture(scope="module")
def measured() -> pd.DataFrame:
    """Step 3 under ncu, every launch profiled, in the report's order."""
    path = DATA / "profile.ncu-rep.xz"
    frame, _ = read_report(path, cache=False)
    frame, _ = split_carried_replication(*split_carried_calls(frame, path)[:1], path)
    return frame.sort_values(["range_index", "kernel_index"]).reset_index(drop=True)


def _keys(frame: pd.DataFrame, names: pd.Series) -> list[tuple[str, str, str]]:
    return list(zip(names, frame["grid"].astype(str), frame["block"].astype(str), strict=True))


def test_the_launch_list_numbers_launches_as_ncu_profiled_them(
        launches: pd.DataFrame, measured: pd.DataFrame) -> None:
    assert len(launches) == len(measured) == 625
    ncu_names = measured["kernel_full"].map(lambda n: function_name(n, for_filter=True))
    assert "" not in set(ncu_names)  # ncu's "<unnamed>::" namespaces read as the profiler's
    assert _keys(launches, launches["function"]) == _keys(measured, ncu_names)
    assert launches["invocation"].max() > 100  # the LSTM's per-time-step kernels


def test_replicating_the_recorded_step_keeps_every_module_in_its_noise(
        launches: pd.DataFrame, measured: pd.DataFrame) -> None:
    plan = plan_representatives(launches)
    profiled = launches["invocation"].isin(set(plan.invocations))
    assert plan.profiled == int(profiled.sum()) < len(launches) / 2
    # what ncu would have kept of this step with the plan's --kernel-id
    merged = replicated_table(measured[profiled.to_numpy()], plan, launches)
    assert merged is not None and len(merged) == len(launches)
    copied = merged["representative_index"].notna()
    assert int(copied.sum()) == len(launches) - plan.profiled
    modules = [" / ".join(s) for s in merged["range_stack"]]
    truth = measured.groupby([" / ".join(s) for s in measured["range_stack"]])["duration_ns"].sum()
    ratio = (merged.groupby(modules)["duration_ns"].sum() / truth - 1).abs()
    # the target, per module: median within 1%, max within 3% of the measured time
    assert statistics.median(ratio) <= 0.01 and ratio.max() <= 0.03, ratio.sort_values()
    assert ratio.max() > 0  # the copies are copies, not the measured rows themselves


def test_a_replicated_report_reads_a_row_for_every_launch(tmp_path: Path) -> None:
    plan = LaunchPlan.read(DATA / "replicated" / "launches" / "plan.json")
    profile = torch_nsight.load(DATA / "replicated" / "report.ncu-rep.xz", cache=False)
    kernels = profile.kernels
    assert len(kernels) == plan.launches == 625
    copied = kernels["replicated_from"].notna()
    assert 0 < profile.replicated_rows == int(copied.sum()) < len(kernels)
    lstm = kernels["module"].astype(str).str.contains("lstm")
    assert kernels.loc[copied & lstm, "replicated_from"].astype(str).str.contains("lstm").all()
    # against the step profiled launch by launch, another process on another day
    every = load_recorded(DATA / "profile.ncu-rep.xz").kernels
    ratio = (kernels.groupby("module")["duration_ns"].sum()
             / every.groupby("module")["duration_ns"].sum()).dropna()  # names new since
    assert len(ratio) >= 9 and ((ratio - 1).abs() < 0.1).all(), ratio
    # without its launch list the report reads its profiled rows alone, as ncu wrote them
    alone = tmp_path / "report.ncu-rep.xz"
    shutil.copy(DATA / "replicated" / "report.ncu-rep.xz", alone)
    assert len(torch_nsight.load(alone, cache=False).kernels) == len(kernels) - int(copied.sum())


def test_rows_that_do_not_line_up_are_not_copied(
        launches: pd.DataFrame, measured: pd.DataFrame, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    plan = plan_representatives(launches)
    kept = measured[launches["invocation"].isin(set(plan.invocations)).to_numpy()]
    other = kept.copy()
    other.loc[other.index[5], "kernel_full"] = "void another_kernel<int>(int)"
    assert replicated_table(other, plan, launches) is None  # a kernel the list does not hold
    short = LaunchPlan(plan.launches + 1, plan.invocations, plan.profiled)
    assert replicated_table(kept, short, launches) is None  # another launch list
    report = tmp_path / "report.ncu-rep"
    (tmp_path / "launches").mkdir()
    (tmp_path / "launches" / "plan.json").write_text('{"kind": "torch_nsight.launch_plan", '
                                                     '"format": 1, "invocations": ["x"]}')
    with caplog.at_level(logging.WARNING):
        same = with_replicated_launches(kept, report, ReadOptions(cache=False))
    assert same is kept and "left out" in caplog.text and "damaged" in caplog.text
    with pytest.raises(ReportError, match="not a launch plan"):
        LaunchPlan.read(tmp_path / "launches" / "plan.json")


def test_a_plan_reads_back_and_names_ncus_filter(launches: pd.DataFrame,
                                                 tmp_path: Path) -> None:
    plan = plan_representatives(launches)
    path = tmp_path / "plan.json"
    torch_nsight.formats.write_json(path, plan.document())
    assert LaunchPlan.read(path) == plan
    assert plan.kernel_id.startswith("::regex:.*:(1|2|")
    graph = launches.assign(launch_ns=float("nan"), kind="kernel",
                            range_start_end=[(s,) for s in launches["step"]])
    with pytest.raises(ReportError, match="CUDA graph"):
        launch_list(graph)


def test_a_step_that_ran_compiled_graphs_is_not_listed() -> None:
    """A compiled ViT's training steps recorded without ncu (tests/data/compile, H200): under
    ncu each compiled graph's first call in the step launches a kernel of its own to carry its
    kernel map, which the list does not hold, so the numbers would not match ncu's; the same
    steps eager list every launch."""
    compiled = TimelineDirectory().read(DATA.parent / "compile" / "vit_timeline",
                                        ReadOptions(cache=False)).kernels
    with pytest.raises(ReportError, match="compiled graphs ran in the chosen steps"):
        launch_list(compiled)
    eager = TimelineDirectory().read(DATA.parent / "timeline_train", ReadOptions(cache=False))
    assert len(launch_list(eager.kernels)) == int((eager.kernels["kind"] == "kernel").sum())


def test_two_steps_each_take_copies_of_their_own_launches() -> None:
    """Steps 3 and 4 of the LSTM loop under --replicate-launches (tests/data/outside_lstm/
    replicated_two_steps, H200): the calls table was carried after step 4's last launch, so
    the launch list's numbers held across both steps."""
    kernels = torch_nsight.load(DATA / "replicated_two_steps" / "report.ncu-rep.xz",
                                cache=False).kernels
    plan = LaunchPlan.read(DATA / "replicated_two_steps" / "launches" / "plan.json")
    assert len(kernels) == plan.launches == 1252 and plan.profiled == 506
    run = kernels["run"].astype(int)
    assert run.value_counts().to_dict() == {3: 626, 4: 626}
    for _, rows in kernels.groupby(run):
        copied = rows["replicated_from"].notna()
        assert copied.sum() > len(rows) / 3
        assert set(rows.loc[copied, "representative_index"].astype(int)) <= set(
            rows.loc[~copied, "kernel_index"].astype(int))  # from its own step
    assert (kernels["flops"].gt(0).groupby(run).sum() > 0).all()  # the calls table: both
    listed = launch_list(TimelineDirectory().read(DATA / "replicated_two_steps" / "launches",
                                                  ReadOptions(cache=False)).kernels)
    check_steps_listed(listed, 2)
    with pytest.raises(ReportError, match="ran 2 of the 3 chosen steps"):
        check_steps_listed(listed, 3)  # --steps 3:6 of a loop that stops after step 4
    by_step = kernels.groupby([run, "module"])["duration_ns"].sum().unstack(0)
    large = by_step[3] >= 0.01 * by_step[3].sum()
    assert large.sum() >= 5 and ((by_step[4] / by_step[3] - 1)[large].abs() <= 0.03).all()


def test_copies_across_modules_take_their_own_ranges() -> None:
    """Swin-T's step recorded launch by launch (tests/data/zoo_families, H100): its own rows
    as the launch list, the plan's rows kept as ncu would keep them, the others copied from
    launches of other blocks; each copy takes its own module ranges, and every module keeps
    its measured time within 3%."""
    kernels = load_recorded(DATA.parent / "zoo_families" / "swin_t.ncu-rep.xz").kernels
    rows = kernels[kernels["replicated_from"].isna()].reset_index(drop=True)
    rows = rows.assign(range_index=0, kernel_index=range(len(rows)))
    listed = rows.loc[:, ["kernel_full", "grid", "block", "registers_per_thread",
                          "duration_ns", "range_stack", "range_other"]].copy()
    listed["step"] = rows["range_start_end"].astype(str)
    listed = numbered(listed)
    plan = plan_representatives(listed)
    merged = replicated_table(rows[listed["invocation"].isin(set(plan.invocations))], plan, listed)
    assert merged is not None and len(merged) == len(rows)
    copied = merged["representative_index"].notna()
    moved = [a != b for a, b in zip(merged["range_stack"], rows["range_stack"], strict=True)]
    assert copied.sum() == len(rows) - plan.profiled and not any(moved)
    source_stacks = rows.set_index("kernel_index")["range_stack"]
    assert any(source_stacks[k] != s for k, s in zip(merged.loc[copied, "representative_index"],
                                                      merged.loc[copied, "range_stack"],
                                                      strict=True))
    modules = merged.groupby(merged["range_stack"].map(" / ".join))["duration_ns"].sum()
    truth = rows.groupby(rows["range_stack"].map(" / ".join))["duration_ns"].sum()
    assert ((modules / truth - 1).abs() <= 0.03).all()


def test_a_plan_is_read_only_with_its_own_report(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    shutil.copytree(DATA / "replicated" / "launches", tmp_path / "launches")
    shutil.copy(DATA / "profile.ncu-rep.xz", tmp_path / "every.ncu-rep.xz")
    with caplog.at_level(logging.WARNING):
        every = torch_nsight.load(tmp_path / "every.ncu-rep.xz", cache=False)
    assert len(every.kernels) == 625 and every.replicated_rows == 0 and not caplog.text
