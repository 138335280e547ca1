"""Timeline verdicts on small hand-built step, gap and activity tables.

Each test states its scenario; the expected numbers follow from it by the arithmetic in the
comments. The builders take times in µs (``US`` ns each); the tables hold ns. The verdicts
and findings are read as a person reads them: analyze's codes and numbers, worded by render.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from torch_nsight.analyze.steps import MODULE_LAUNCH_COLUMNS, module_launches
from torch_nsight.analyze.timeline_analysis import timeline_findings as finding_codes
from torch_nsight.analyze.timeline_analysis import timeline_summary as summary_codes
from torch_nsight.errors import MissingMetricError
from torch_nsight.render.timeline_words import (
    WORDED_STEP_FINDING_COLUMNS as STEP_FINDING_COLUMNS,
)
from torch_nsight.render.timeline_words import WORDED_SUMMARY_COLUMNS as SUMMARY_COLUMNS
from torch_nsight.render.timeline_words import word_step_findings, word_summary


def timeline_summary(kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    return word_summary(summary_codes(kernels, timeline))


def timeline_findings(kernels: pd.DataFrame, timeline: pd.DataFrame) -> pd.DataFrame:
    return word_step_findings(finding_codes(kernels, timeline))

US = 1_000.0
NAN = math.nan
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def step(run: int, wall: float, busy: float, launches: int, *, start: float | None = None,
         sync: float = 0.0, bare: float = NAN, ranged: float = NAN, variant: str | None = "eager",
         shape: str | None = "s") -> dict:
    """One measured iteration: its window starts at ``start`` (default run x 10 ms)."""
    start = run * 10_000.0 if start is None else start
    return {"source": "t.json", "variant": variant, "shape": shape, "run": run, "kind": "step",
            "start_ns": start * US, "end_ns": (start + wall) * US, "cpu_ns": wall * US,
            "busy_ns": busy * US, "launches": launches, "sync_ns": sync * US,
            "bare_ns": bare * US, "ranged_ns": ranged * US, "cpu": None, "prev_module": None,
            "next_module": None}


def gap(run: int, length: float, *, cpu: str = "", prev_module: str | None = None,
        next_module: str | None = None, offset: float = 0.0, variant: str | None = "eager",
        shape: str | None = "s") -> dict:
    """An idle interval of ``length`` µs inside step ``run``."""
    start = run * 10_000.0 + offset
    return {"source": "t.json", "variant": variant, "shape": shape, "run": run, "kind": "gap",
            "start_ns": start * US, "end_ns": (start + length) * US, "cpu_ns": NAN,
            "busy_ns": NAN, "launches": NAN, "sync_ns": NAN, "bare_ns": NAN, "ranged_ns": NAN,
            "cpu": cpu, "prev_module": prev_module, "next_module": next_module}


def activity(run: int, duration: float, *, kind: str = "kernel", path: str = "Model/a",
             nbytes: float = NAN, pinned: bool | None = None, variant: str | None = "eager",
             shape: str | None = "s") -> dict:
    """One GPU activity of ``duration`` µs in step ``run``."""
    return {"source": "t.json", "variant": variant, "shape": shape, "run": run, "kind": kind,
            "kernel": "Memcpy HtoD" if kind == "memcpy" else "k",
            "start_ns": run * 10_000.0 * US, "duration_ns": duration * US, "stream": 7,
            "device": 0, "launch_ns": NAN, "launch_thread": 1, "bytes": nbytes,
            "copy_kind": "HtoD" if kind == "memcpy" else None,
            "pinned": pinned if kind == "memcpy" else None,
            "module": path.split("/")[-1], "module_path": path, "direction": "fwd", "op": None}


def kernels_of(run: int, count: int, duration: float, path: str = "Model/a") -> list[dict]:
    return [activity(run, duration, path=path) for _ in range(count)]


def tables(kernel_rows: list[dict], timeline_rows: list[dict],
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    kernels = pd.DataFrame(kernel_rows, columns=list(activity(0, 1.0)))
    timeline = pd.DataFrame(timeline_rows, columns=list(step(0, 1.0, 1.0, 1)))
    for table in (kernels, timeline):
        table["run"] = table["run"].astype("Int64")
    return kernels, timeline


def summary_row(kernel_rows: list[dict], timeline_rows: list[dict]) -> pd.Series:
    summary = timeline_summary(*tables(kernel_rows, timeline_rows))
    assert len(summary) == 1
    return summary.iloc[0]


def test_a_decode_like_step_is_launch_bound() -> None:
    """Two steps of 1000 µs, each 10 kernels of 6 µs (busy 60 µs) from 12 launches:
    busy 60/1000 = 6%, idle 94%, 12 launches per ms, every kernel under 10 µs."""
    rows = kernels_of(0, 10, 6.0) + kernels_of(1, 10, 6.0)
    row = summary_row(rows, [step(0, 1000, 60, 12), step(1, 1000, 60, 12)])
    assert row["steps"] == 2
    assert row["wall_ns"] == pytest.approx(1000 * US)
    assert row["busy_pct"] == pytest.approx(6.0)
    assert row["idle_pct"] == pytest.approx(94.0)
    assert row["kernels_per_step"] == 10
    assert row["launches_per_step"] == 12
    assert row["launches_per_ms"] == pytest.approx(12.0)
    assert row["small_kernel_pct"] == pytest.approx(100.0)
    assert row["small_kernel_time_pct"] == pytest.approx(100.0)
    assert row["copies_per_step"] == 0
    assert math.isnan(row["copy_gb_per_s"])
    assert row["verdict"] == "launch-bound"
    assert "busy 6.0% (under 50%) of the 1.0 ms step" in row["evidence"]
    assert "reduce-overhead" in row["advice"]
    assert not row["distorted"]


def test_the_measured_decode_step_is_launch_bound() -> None:
    """The H200 reference: a 7.4 ms decode step ran 108 kernels with 0.46 ms of kernel time.
    Here 100 kernels of 3 µs and 8 of 20 µs = 300 + 160 = 460 µs: busy 460/7400 = 6.2%,
    108/7.4 = 14.6 launches per ms, 100/108 = 92.6% of kernels under 10 µs, holding
    300/460 = 65.2% of kernel time."""
    rows = kernels_of(0, 100, 3.0) + kernels_of(0, 8, 20.0)
    row = summary_row(rows, [step(0, 7400, 460, 108)])
    assert row["busy_pct"] == pytest.approx(6.216, abs=1e-3)
    assert row["launches_per_ms"] == pytest.approx(14.595, abs=1e-3)
    assert row["small_kernel_pct"] == pytest.approx(92.593, abs=1e-3)
    assert row["small_kernel_time_pct"] == pytest.approx(65.217, abs=1e-3)
    assert row["verdict"] == "launch-bound"
    assert row["evidence"] == ("The GPU was busy 6.2% (under 50%) of the 7.4 ms step, with "
                               "108 kernels, 93% of them under 10 µs, 14.6 launches per ms.")


def test_a_training_like_step_is_gpu_bound() -> None:
    """One step of 10 ms, 50 kernels of 190 µs = 9.5 ms busy: 95% busy, no kernel small."""
    row = summary_row(kernels_of(0, 50, 190.0), [step(0, 10_000, 9_500, 50)])
    assert row["busy_pct"] == pytest.approx(95.0)
    assert row["small_kernel_pct"] == 0
    assert row["verdict"] == "GPU-bound"
    assert "Nsight Compute" in row["advice"]


def scenario(data_gap: float, copy: float) -> tuple[list[dict], list[dict]]:
    """One 1000 µs step: 10 kernels of 5 µs, an optional pinned copy of ``copy`` µs and an
    optional data-loading gap of ``data_gap`` µs; busy = 50 µs + copy."""
    rows = kernels_of(0, 10, 5.0)
    if copy:
        rows.append(activity(0, copy, kind="memcpy", path="(unattributed)", nbytes=1e6,
                             pinned=True))
    timeline = [step(0, 1000, 50 + copy, 10 + bool(copy))]
    if data_gap:
        timeline.append(gap(0, data_gap, cpu=LOADER, next_module="a"))
    return rows, timeline


@pytest.mark.parametrize(("data_gap", "copy", "verdict"), [
    # data wait 300/1000 = 30% >= 20; the copy (25% of the step) and launch rules hold too
    (300, 250, "data-bound"),
    # no data wait: the copy takes 250/1000 = 25% >= 20% of the step; busy 30% with only
    # small kernels would also be launch-bound
    (0, 250, "copy-bound"),
    # neither: busy 50/1000 = 5% with 10 kernels of 5 µs
    (0, 0, "launch-bound"),
    # exactly at the data threshold: 200/1000 = 20% counts
    (200, 0, "data-bound"),
    # just under it: 199/1000 = 19.9%
    (199, 0, "launch-bound"),
])
def test_rules_are_checked_in_order(data_gap: float, copy: float, verdict: str) -> None:
    row = summary_row(*scenario(data_gap, copy))
    assert row["data_wait_pct"] == pytest.approx(100 * data_gap / 1000)
    assert row["copy_pct"] == pytest.approx(100 * copy / 1000)
    assert row["verdict"] == verdict


def test_copies_over_half_the_busy_time_are_copy_bound() -> None:
    """1000 µs step: 4 kernels of 10 µs (not small) and one 6 MB copy of 60 µs; busy 100 µs.
    Copies are 60/1000 = 6% of the step but 60/100 = 60% >= 50% of busy time;
    6e6 B / 60e3 ns = 100 GB/s."""
    rows = kernels_of(0, 4, 10.0) + [activity(0, 60, kind="memcpy", path="(unattributed)",
                                              nbytes=6e6, pinned=True)]
    row = summary_row(rows, [step(0, 1000, 100, 5)])
    assert row["copy_pct"] == pytest.approx(6.0)
    assert row["copy_busy_pct"] == pytest.approx(60.0)
    assert row["copies_per_step"] == 1
    assert row["copy_bytes_per_step"] == pytest.approx(6e6)
    assert row["copy_gb_per_s"] == pytest.approx(100.0)
    assert row["pageable_copies_per_step"] == 0
    assert row["verdict"] == "copy-bound"
    assert "(1 copy of 6.0 MB at 100.0 GB/s;" in row["evidence"]
    assert "pin_memory=True" in row["advice"] and "non_blocking=True" in row["advice"]


@pytest.mark.parametrize(("cpu", "waits"), [
    (LOADER, True),
    ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", True),
    ("torch/utils/data/_utils/collate.py(141): default_collate", True),
    ("aten::pin_memory", True),
    ("MyBatches.__next__", True),
    ("aten::linear", False),
    ("cudaStreamSynchronize", False),
    ("", False),
])
def test_data_loading_gaps_are_found_by_name(cpu: str, waits: bool) -> None:
    """1000 µs step, 2 kernels of 350 µs (70% busy) and a 250 µs gap: 25% data wait if the
    CPU was loading data, else nothing fires and the step is GPU-bound."""
    row = summary_row(kernels_of(0, 2, 350.0), [step(0, 1000, 700, 2), gap(0, 250, cpu=cpu)])
    assert row["data_wait_pct"] == pytest.approx(25.0 if waits else 0.0)
    assert row["verdict"] == ("data-bound" if waits else "GPU-bound")
    if waits:
        assert "num_workers" in row["advice"]


def test_numbers_are_medians_over_steps() -> None:
    """Steps of 1000, 2000 and 9000 µs, busy 100, 1000 and 900 µs, with 1, 3 and 8 kernels
    (one launch each). Median wall 2000 µs; busy per step 10%, 50%, 10% -> median 10% (the
    ratio of medians, 1000/2000, would be 50%); kernels median 3; launches per ms
    1/1 = 1, 3/2 = 1.5, 8/9 = 0.89 -> median 1."""
    rows = kernels_of(0, 1, 100.0) + kernels_of(1, 3, 1000 / 3) + kernels_of(2, 8, 900 / 8)
    row = summary_row(rows, [step(0, 1000, 100, 1), step(1, 2000, 1000, 3),
                             step(2, 9000, 900, 8)])
    assert row["steps"] == 3
    assert row["wall_ns"] == pytest.approx(2000 * US)
    assert row["busy_pct"] == pytest.approx(10.0)
    assert row["idle_pct"] == pytest.approx(90.0)
    assert row["kernels_per_step"] == 3
    assert row["launches_per_ms"] == pytest.approx(1.0)


def test_a_step_without_activity_counts_as_zero() -> None:
    """Three 1000 µs steps; 6 kernels and 2 pageable copies, all in step 0. Kernels per step
    are 6, 0, 0 -> median 0; the pageable finding divides by the 3 steps: 2/3 copies and
    (40 + 20)/3 = 20 µs per step."""
    rows = kernels_of(0, 6, 5.0) + [
        activity(0, 40, kind="memcpy", path="(unattributed)", nbytes=3e6, pinned=False),
        activity(0, 20, kind="memcpy", path="(unattributed)", nbytes=3e6, pinned=False)]
    kernels, timeline = tables(rows, [step(0, 1000, 90, 8), step(1, 1000, 0, 0),
                                      step(2, 1000, 0, 0)])
    row = timeline_summary(kernels, timeline).iloc[0]
    assert row["kernels_per_step"] == 0
    assert row["pageable_copies_per_step"] == 0
    findings = timeline_findings(kernels, timeline).set_index("finding")
    pageable = findings.loc["pageable_copies"]
    assert pageable["est_gain_ns"] == pytest.approx(20 * US)
    assert pageable["module"] == "(unattributed)"
    assert pageable["evidence"].startswith("0.666667 copies per step (2.0 MB, 20 µs)")
    one = timeline_findings(*tables(rows, [step(0, 1000, 90, 8)])).set_index("finding")
    assert one.loc["pageable_copies", "evidence"].startswith("2 copies per step")


def test_module_launches_divide_by_steps() -> None:
    """Two steps. Model/a (with its child a.inner folded in at depth 1) runs 4 kernels of
    5 µs in step 0 and 2 in step 1: 3 launches and 15 µs per step. Model/b runs one 100 µs
    kernel in step 0: 50 µs per step, so it comes first; of 65 µs per step b holds 76.9%."""
    rows = (kernels_of(0, 2, 5.0, "Model/a") + kernels_of(0, 2, 5.0, "Model/a/a.inner")
            + kernels_of(1, 2, 5.0, "Model/a") + kernels_of(0, 1, 100.0, "Model/b"))
    table = module_launches(tables(rows, [])[0])
    assert list(table.columns) == list(MODULE_LAUNCH_COLUMNS)
    assert list(table["module_path"]) == ["Model/b", "Model/a"]
    b, a = table.iloc[0], table.iloc[1]
    assert (a["module"], a["steps"], a["launches"], a["kernels"]) == ("a", 2, 3.0, 3.0)
    assert a["gpu_ns"] == pytest.approx(15 * US)
    assert a["median_kernel_ns"] == pytest.approx(5 * US)
    assert a["small_kernel_pct"] == pytest.approx(100.0)
    assert b["gpu_ns"] == pytest.approx(50 * US)
    assert b["pct_of_gpu"] == pytest.approx(100 * 50 / 65)
    assert module_launches(tables(rows, [])[0], depth=0)["module_path"].tolist() == ["Model"]
    with pytest.raises(ValueError, match="depth"):
        module_launches(tables(rows, [])[0], depth=-1)


@pytest.mark.parametrize(("bare", "ranged", "distortion", "distorted"), [
    ([1000], [1150], 15.0, True),     # (1150 - 1000) / 1000 = 15% > 10%
    ([1000], [1100], 10.0, False),    # exactly 10% is not above the threshold
    ([1000], [1050], 5.0, False),
    # medians: bare 1000 of (1000, 1000, 4000), ranged 1200 of (1100, 1200, 1200) -> 20%
    ([1000, 1000, 4000], [1100, 1200, 1200], 20.0, True),
])
def test_distortion_flag(bare: list[float], ranged: list[float], distortion: float,
                         distorted: bool) -> None:
    """1000 µs steps, 5% busy with small kernels: launch-bound either way."""
    rows = [k for run in range(len(bare)) for k in kernels_of(run, 10, 5.0)]
    row = summary_row(rows, [step(run, 1000, 50, 10, bare=b, ranged=r)
                             for run, (b, r) in enumerate(zip(bare, ranged, strict=True))])
    assert row["distortion_pct"] == pytest.approx(distortion)
    assert bool(row["distorted"]) is distorted
    assert row["verdict"] == "launch-bound"
    assert (f"lengthened the step by {distortion:.1f}%" in row["evidence"]) is distorted


def test_distortion_is_nan_when_not_measured() -> None:
    row = summary_row(kernels_of(0, 10, 5.0), [step(0, 1000, 50, 10)])
    for column in ("distortion_pct", "profiler_pct", "bare_busy_pct"):
        assert math.isnan(row[column])
    assert not row["distorted"]
    assert row["evidence"].endswith("launches per ms.")


def test_profiler_overhead_is_reported_and_taken_out_of_the_gains() -> None:
    """A 1000 µs profiled step, 24 kernels of 2.5 µs in blocks (60 µs busy), whose bare step
    took 400 µs and ranged step 420 µs: ranges add 20/400 = 5% (not distorted); the profiler
    adds (1000 - 420)/420 = 138%; busy 60/400 = 15% of the bare step. Launch-bound gain: the
    bare step's idle 400 - 60 = 340 µs, not the profiled 940 µs. The 470 µs of gaps before
    blocks are scaled by 340/940 to 170 µs."""
    rows = kernels_of(0, 24, 2.5, "Model/blocks/blocks.0")
    kernels, timeline = tables(rows, [
        step(0, 1000, 60, 24, bare=400, ranged=420),
        gap(0, 470, cpu="aten::add", next_module="blocks.0")])
    row = timeline_summary(kernels, timeline).iloc[0]
    assert row["distortion_pct"] == pytest.approx(5.0)
    assert not row["distorted"]
    assert row["profiler_pct"] == pytest.approx(100 * 580 / 420)
    assert row["bare_busy_pct"] == pytest.approx(15.0)
    # the verdict is judged on the step timed without the profiler, and says so
    assert row["evidence"].startswith("The GPU was busy 15.0% (under 50%) of the 400 µs step "
                                      "timed without the profiler")
    findings = timeline_findings(kernels, timeline).set_index("finding")
    assert findings.loc["launch_bound", "est_gain_ns"] == pytest.approx(340 * US)
    assert findings.loc["small_kernels", "est_gain_ns"] == pytest.approx(470 * 340 / 940 * US)
    assert "idles 470 µs per step" in findings.loc["small_kernels", "evidence"]


def test_largest_gaps_come_from_the_median_step() -> None:
    """Steps of 1000, 1100 and 5000 µs: the median (1100 µs) is step 1. Its four gaps, three
    largest first; step 2's 3000 µs gap is not the median step's and stays out."""
    timeline = [step(0, 1000, 500, 1), step(1, 1100, 200, 1), step(2, 5000, 1000, 1),
                gap(1, 1.5, cpu="aten::add", prev_module="h.0.attn", next_module="h.0.mlp"),
                gap(1, 812, cpu="aten::linear", next_module="h.0.attn", offset=10),
                gap(1, 50, prev_module="h.11", offset=900),
                gap(1, 2.5, cpu="aten::add", prev_module="h.0.mlp", next_module="ln_f",
                    offset=850),
                gap(2, 3000, cpu="aten::linear", next_module="h.0.attn")]
    row = summary_row([], timeline)
    assert row["largest_gaps"] == ("812 µs before h.0.attn (CPU: aten::linear); "
                                   "50 µs after h.11 (CPU: outside any op); "
                                   "2.5 µs before ln_f (CPU: aten::add)")


def test_largest_gaps_of_an_even_number_of_steps_and_of_a_step_without_gaps() -> None:
    """Steps of 1000 and 1200 µs: median 1100, both 100 µs away -> the first, step 0, whose
    1500 µs gap (window edge, no module either side) reads in ms. A shape whose median step
    has no gap gets ``""``."""
    timeline = [step(0, 1000, 0, 0), step(1, 1200, 0, 0), gap(0, 1500), gap(1, 30),
                step(0, 1000, 900, 1, shape="t")]
    summary = timeline_summary(*tables([], timeline))
    assert summary["largest_gaps"].tolist() == [
        "1.5 ms with no GPU work in the step (CPU: outside any op)", ""]


def test_steps_and_labels_in_the_order_they_first_appear() -> None:
    """Shape 4x1024 has its step first; an unlabelled variant comes back as None."""
    timeline = [step(0, 1000, 950, 1, shape="4x1024", variant=None),
                step(0, 1000, 950, 1, shape="4x256", variant=None, start=20_000),
                step(1, 1000, 950, 1, shape="4x1024", variant=None)]
    summary = timeline_summary(*tables([], timeline))
    assert summary["shape"].tolist() == ["4x1024", "4x256"]
    assert summary["steps"].tolist() == [2, 1]
    assert summary["variant"].tolist() == [None, None]
    assert list(summary.columns) == list(SUMMARY_COLUMNS)


def test_low_busy_with_long_kernels_is_not_launch_bound() -> None:
    """1000 µs step, 2 kernels of 150 µs from 2 launches: busy 30% but no small kernel:
    CPU-bound, with CPU advice; the 700 µs idle is a gpu_idle finding placed before the module
    with the most idle time (head: 500 µs of it)."""
    kernels, timeline = tables(
        kernels_of(0, 1, 150.0, "Model/body") + kernels_of(0, 1, 150.0, "Model/head"),
        [step(0, 1000, 300, 2), gap(0, 200, cpu="aten::item", next_module="body"),
         gap(0, 500, cpu="aten::item", next_module="head", offset=400)])
    row = timeline_summary(kernels, timeline).iloc[0]
    assert row["verdict"] == "CPU-bound"
    assert "busy only 30.0%" in row["evidence"]
    assert "largest_gaps" in row["advice"]
    findings = timeline_findings(kernels, timeline)
    assert findings["finding"].tolist() == ["gpu_idle"]
    idle = findings.iloc[0]
    assert (idle["module"], idle["module_level"]) == ("head", "innermost")
    assert idle["est_gain_ns"] == pytest.approx(700 * US)
    assert idle["evidence"] == ("The GPU was idle 70.0% of the 1.0 ms step outside data "
                                "loading, 500 µs per step of it just before head.")


def test_the_analysis_gives_codes_and_numbers_and_render_the_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """analyze's timeline tables hold no sentence (issue 43): a verdict, its numbers, the
    largest gaps as numbers and each finding's numbers; rewording render changes the words
    and nothing analyze returns."""
    import torch_nsight.render.timeline_words as words

    kernels, timeline = tables(
        kernels_of(0, 1, 150.0, "Model/body") + kernels_of(0, 1, 150.0, "Model/head"),
        [step(0, 1000, 300, 2), gap(0, 500, cpu="aten::item", next_module="head")])
    summary, found = summary_codes(kernels, timeline), finding_codes(kernels, timeline)
    assert not {"evidence", "advice", "fix"} & {*summary.columns, *found.columns}
    gaps = summary["largest_gaps"].iat[0]
    assert gaps[0]["next_module"] == "head" and gaps[0]["gap_ns"] == pytest.approx(500 * US)
    assert found["facts"].iat[0]["found"]["next_module"] == "head"
    monkeypatch.setitem(words.VERDICT_ADVICE, "CPU-bound", "reworded")
    monkeypatch.setitem(words.FINDING_FIXES, "gpu_idle", "reworded")
    pd.testing.assert_frame_equal(summary_codes(kernels, timeline), summary)
    pd.testing.assert_frame_equal(finding_codes(kernels, timeline), found)
    assert word_summary(summary)["advice"].iat[0] == "reworded"
    assert word_step_findings(found)["fix"].iat[0] == "reworded"


@pytest.mark.parametrize(("small", "verdict"), [
    # 6 of 20 kernels small: 30% < 50%, however many launches per ms: the GPU idles over
    # half the step between long kernels, so the CPU side sets the pace
    (6, "CPU-bound"),
    # 10 of 20: exactly 50% counts
    (10, "launch-bound"),
])
def test_many_launches_of_mostly_long_kernels_are_not_launch_bound(small: int,
                                                                  verdict: str) -> None:
    """Like the recorded training step (30% small kernels, 20 launches per ms): 1000 µs step,
    20 launches, ``small`` kernels of 5 µs and the rest of 30 µs; busy under 50% either way
    (10 x 5 + 10 x 30 = 350 µs at most)."""
    rows = kernels_of(0, small, 5.0) + kernels_of(0, 20 - small, 30.0)
    busy = 5.0 * small + 30.0 * (20 - small)
    row = summary_row(rows, [step(0, 1000, busy, 20)])
    assert row["launches_per_ms"] == pytest.approx(20.0)
    assert row["small_kernel_pct"] == pytest.approx(100 * small / 20)
    assert row["verdict"] == verdict


def test_findings_of_a_launch_bound_step_name_the_model_and_its_busy_module() -> None:
    """Two 1000 µs steps, each 24 kernels of 5 µs in Model/blocks/blocks.0 (folded into the
    top-level module blocks) and 2 of 20 µs in Model/head: busy 160 µs = 16%, 24/26 small.
    Idle outside data loading: step 0 840 µs, step 1 840 - 40 (a DataLoader gap) = 800 µs
    -> median 820 µs. blocks: 24 launches per step, median kernel 5 µs; idle just before
    it, data gap excluded: (100 + 60) / 2 = 80 µs per step."""
    rows = [k for run in (0, 1) for k in kernels_of(run, 24, 5.0, "Model/blocks/blocks.0")
            + kernels_of(run, 2, 20.0, "Model/head")]
    timeline = [step(0, 1000, 160, 26), step(1, 1000, 160, 26),
                gap(0, 100, cpu="aten::linear", next_module="blocks.0"),
                gap(0, 300, cpu="aten::linear", next_module="head", offset=400),
                gap(1, 60, cpu="aten::linear", next_module="blocks.0"),
                gap(1, 40, cpu=LOADER, next_module="blocks.0", offset=100)]
    findings = timeline_findings(*tables(rows, timeline))
    assert list(findings.columns) == list(STEP_FINDING_COLUMNS)
    assert findings["finding"].tolist() == ["launch_bound", "small_kernels"]
    launch, small = findings.iloc[0], findings.iloc[1]
    assert (launch["module"], launch["module_level"]) == ("Model", "root")
    assert launch["est_gain_ns"] == pytest.approx(820 * US)
    assert (small["module"], small["module_level"]) == ("blocks", "top-level")
    assert small["est_gain_ns"] == pytest.approx(80 * US)
    assert "24 launches per step" in small["evidence"]
    assert set(findings["gain_basis"]) == {"timeline"}


def test_every_rule_that_holds_is_a_finding() -> None:
    """The data-bound scenario with a pageable copy: 1000 µs step, busy 300 µs (10 kernels of
    5 µs and a 250 µs copy), a 300 µs DataLoader gap. Gains per step: data wait 300 µs,
    copy 250 µs, pageable copy 250 µs, launch-bound idle outside data 700 - 300 = 400 µs."""
    rows, timeline = scenario(300, 250)
    rows[-1]["pinned"] = False
    kernels, timeline = tables(rows, timeline)
    assert timeline_summary(kernels, timeline).iloc[0]["verdict"] == "data-bound"
    findings = timeline_findings(kernels, timeline)
    assert findings["finding"].tolist() == ["launch_bound", "data_wait", "copy_bound",
                                            "pageable_copies"]
    assert (findings["est_gain_ns"] / US).tolist() == pytest.approx([400, 300, 250, 250])
    data = findings.iloc[1]
    assert data["module"] is None and data["module_level"] is None
    assert LOADER in data["evidence"]
    assert findings.iloc[2]["module"] == "(unattributed)"


def test_a_data_wait_under_the_verdict_threshold_is_still_a_finding() -> None:
    """1000 µs step, 2 kernels of 400 µs (80% busy) and a 150 µs collate gap: 15% data wait
    is under 20% (GPU-bound) but over the 10% worth a finding; the other 50 µs of idle
    (5%) is not."""
    kernels, timeline = tables(kernels_of(0, 2, 400.0),
                               [step(0, 1000, 800, 2), gap(0, 150, cpu="default_collate")])
    assert timeline_summary(kernels, timeline).iloc[0]["verdict"] == "GPU-bound"
    findings = timeline_findings(kernels, timeline)
    assert findings["finding"].tolist() == ["data_wait"]
    assert findings.iloc[0]["est_gain_ns"] == pytest.approx(150 * US)


def test_one_step_reports_its_own_numbers() -> None:
    row = summary_row(kernels_of(0, 3, 300.0), [step(0, 1000, 900, 3, sync=100)])
    assert (row["steps"], row["wall_ns"], row["busy_pct"]) == (1, 1000 * US, 90.0)
    assert row["sync_pct"] == pytest.approx(10.0)
    assert row["verdict"] == "GPU-bound"


def test_empty_tables_give_empty_results() -> None:
    kernels, timeline = tables([], [])
    summary = timeline_summary(kernels, timeline)
    assert summary.empty and list(summary.columns) == list(SUMMARY_COLUMNS)
    findings = timeline_findings(kernels, timeline)
    assert findings.empty and list(findings.columns) == list(STEP_FINDING_COLUMNS)
    launches = module_launches(kernels)
    assert launches.empty and list(launches.columns) == list(MODULE_LAUNCH_COLUMNS)


def test_activity_outside_every_step_is_left_out() -> None:
    """A kernel of run 5 has no step: the one step still counts 1 kernel."""
    row = summary_row(kernels_of(0, 1, 500.0) + kernels_of(5, 1, 500.0),
                      [step(0, 1000, 500, 1)])
    assert row["kernels_per_step"] == 1


def test_a_report_without_a_timeline_is_refused() -> None:
    """Nsight Compute rows have no kind, bytes or pinned, and no timeline table."""
    kernels, timeline = tables(kernels_of(0, 1, 5.0), [step(0, 1000, 5, 1)])
    ncu_rows = kernels.drop(columns=["kind", "bytes", "pinned"])
    for analysis in (timeline_summary, timeline_findings):
        with pytest.raises(MissingMetricError, match=analysis.__name__):
            analysis(ncu_rows, timeline)
        with pytest.raises(MissingMetricError, match="start_ns"):
            analysis(kernels, None)
        with pytest.raises(MissingMetricError, match="cpu"):
            analysis(kernels, timeline.drop(columns=["cpu"]))
    with pytest.raises(MissingMetricError, match="kind"):
        module_launches(ncu_rows)
