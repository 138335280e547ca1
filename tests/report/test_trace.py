"""PyTorch profiler traces recorded on the H200 (tests/data/timeline_*, made by
tests/data/record_timeline.py): every GPU activity attributed, and the step and gap numbers
checked against a plain reading of the same JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze import UNATTRIBUTED
from torch_nsight.errors import ReportError
from torch_nsight.profile import Profile
from torch_nsight.vocabulary import in_module_range, outside_module

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def train() -> Profile:
    """GPT2Small, bf16, batch 8, seq 512, forward + backward, 3 measured steps."""
    return torch_nsight.load(DATA / "timeline_train")


@pytest.fixture(scope="module")
def decode() -> Profile:
    """GPT2Small, bf16, batch 1, one token, forward only, 3 measured steps."""
    return torch_nsight.load(DATA / "timeline_decode")


def events(name: str) -> list[dict]:
    with gzip.open(DATA / name / "trace-0.json.gz", "rt", encoding="utf-8") as handle:
        return [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]


def plain_reading(name: str, run: int) -> dict[str, float]:
    """Step ``run`` read straight from the JSON: its labelled CPU range, the GPU activity
    whose launch call starts inside it, the union of that activity, the launch calls."""
    evs = events(name)
    label = next(e for e in evs if e["name"].startswith("torch_nsight/sweep;")
                 and e["name"].endswith(f";run={run}"))
    start, end = label["ts"], label["ts"] + label["dur"]
    launches = {e["args"]["correlation"]: e for e in evs
                if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    gpu = [e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
           and e["args"]["correlation"] in launches
           and start <= launches[e["args"]["correlation"]]["ts"] < end]
    window_end = max([end, *(e["ts"] + e["dur"] for e in gpu)])
    busy, cursor = 0.0, start
    for e in sorted(gpu, key=lambda e: e["ts"]):
        lo, hi = max(e["ts"], cursor), min(e["ts"] + e["dur"], window_end)
        if hi > lo:
            busy += hi - lo
            cursor = hi
    enqueue = [e for e in launches.values() if start <= e["ts"] < end
               and any(w in e["name"] for w in ("Launch", "Memcpy", "Memset"))]
    return {"activities": len(gpu), "busy_ns": busy * 1e3, "wall_ns": (window_end - start) * 1e3,
            "launches": len(enqueue)}


@pytest.mark.parametrize("name", ["timeline_train", "timeline_decode", "timeline_copy"])
@pytest.mark.parametrize("run", [0, 2])
def test_step_numbers_match_a_plain_reading_of_the_trace(name: str, run: int) -> None:
    profile = torch_nsight.load(DATA / name)
    expected = plain_reading(name, run)
    step = profile.timeline[(profile.timeline["kind"] == "step")
                            & (profile.timeline["run"] == run)].iloc[0]
    assert (profile.kernels["run"] == run).sum() == expected["activities"]
    # µs floats in the JSON: within 1 ns of rounding per activity
    assert step["busy_ns"] == pytest.approx(expected["busy_ns"], abs=expected["activities"])
    assert step["end_ns"] - step["start_ns"] == pytest.approx(expected["wall_ns"], abs=1.0)
    assert step["launches"] == expected["launches"]
    gaps = profile.timeline[(profile.timeline["kind"] == "gap")
                            & (profile.timeline["run"] == run)]
    idle = (gaps["end_ns"] - gaps["start_ns"]).sum()
    # idle intervals under 1 µs are not gaps: the rest of the window is busy or such slivers
    slivers = expected["wall_ns"] - expected["busy_ns"] - idle
    assert -expected["activities"] <= slivers <= 1000.0 * (expected["activities"] + 1)


def test_every_training_kernel_is_attributed_forward_and_backward(train: Profile) -> None:
    k = train.kernels
    assert len(k) == 1653 and set(k["run"]) == {0, 1, 2}  # 3 steps, warm-ups left out
    outside = k[~k["module"].map(in_module_range)]
    # only the loss gradient, named after its op range
    assert set(outside["module"]) == {outside_module("loss")}
    assert set(outside["op"]) == {"loss"} and set(outside["direction"]) == {"fwd"}
    assert set(k["direction"].dropna()) == {"fwd", "bwd"}
    backward = k[k["direction"] == "bwd"]
    forward = k[k["direction"] == "fwd"]
    # autograd launches the backward from its own thread, where the bwd: ranges are open
    assert set(backward["launch_thread"]).isdisjoint(set(forward["launch_thread"]))
    assert backward["module_path"].str.startswith("GPT2Small").all()
    per_step = k.groupby(["run", "direction"], dropna=False).size().unstack()
    assert per_step.nunique().max() == 1  # the same step three times


def test_a_decode_step_is_mostly_idle(decode: Profile) -> None:
    steps = decode.timeline[decode.timeline["kind"] == "step"]
    busy = steps["busy_ns"] / (steps["end_ns"] - steps["start_ns"])
    assert (busy < 0.2).all()
    assert (decode.kernels["module"] != UNATTRIBUTED).all()
    assert steps["bare_ns"].notna().all() and steps["ranged_ns"].notna().all()


def test_copies_carry_their_direction_bytes_and_memory_kind() -> None:
    profile = torch_nsight.load(DATA / "timeline_copy")
    copies = profile.kernels[profile.kernels["kind"] == "memcpy"]
    assert len(copies) == 3  # one per step
    assert set(copies["copy_kind"]) == {"HtoD"} and set(copies["pinned"]) == {False}
    assert (copies["bytes"] == 64 * 1024 * 1024 * 4).all()  # the 256 MiB host tensor
    assert set(copies["module"]) == {"HostFed"}


def test_a_timeline_survives_save_and_read(train: Profile, tmp_path: Path) -> None:
    again = Profile.read(train.save(tmp_path / "t.parquet"))
    pd.testing.assert_frame_equal(again.timeline, train.timeline, check_dtype=False)
    loaded = torch_nsight.load(tmp_path / "t.parquet")
    assert loaded.timeline is not None and len(loaded.timeline) == len(train.timeline)


def test_a_single_trace_file_reads_without_its_manifest(tmp_path: Path) -> None:
    trace = tmp_path / "run.json.gz"
    trace.write_bytes((DATA / "timeline_decode" / "trace-0.json.gz").read_bytes())
    profile = torch_nsight.load(trace)
    # without the manifest the warm-up iterations are kept, unlabelled
    assert len(profile.kernels) > 414
    assert profile.timeline["bare_ns"].isna().all()


@pytest.mark.parametrize(("content", "message"), [
    (b"not json", "not a readable Chrome trace"),
    (b'{"a": 1}', "not a Chrome trace"),
    (b'{"traceEvents": []}', "holds no GPU activity"),
])
def test_bad_traces_are_refused_in_one_line(tmp_path: Path, content: bytes,
                                            message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ReportError, match=message):
        torch_nsight.load(path)


@pytest.mark.parametrize(("name", "verdict"), [
    ("timeline_decode", "launch-bound"),  # GPT-2-small-sized decode: batch 1, one token
    ("timeline_train", "GPU-bound"),  # the same model training at batch 8, seq 512
    ("timeline_copy", "copy-bound"),  # inputs copied from pageable host memory each step
])
def test_recorded_steps_get_their_verdict(name: str, verdict: str) -> None:
    from torch_nsight.analyze import timeline_summary

    profile = torch_nsight.load(DATA / name)
    row = timeline_summary(profile.kernels, profile.timeline).iloc[0]
    assert row["verdict"] == verdict, row["facts"]
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    # judged on the GPU work over the step timed without the profiler
    assert row["bare_busy_pct"] == pytest.approx(
        100 * steps["busy_ns"].median() / steps["bare_ns"].median())


def test_trace_and_report_rows_join_and_save(train: Profile, tmp_path: Path) -> None:
    report = torch_nsight.load(DATA / "hand_s128.ncu-rep.xz")
    joined = Profile.concat([train, report])
    again = Profile.read(joined.save(tmp_path / "both.parquet"))
    assert len(again.kernels) == len(train.kernels) + len(report.kernels)
    assert set(again.kernels["grid"].dropna().map(type)) == {str}


def test_copies_that_overlap_count_once(tmp_path: Path) -> None:
    """The recorded copy-bound step with each host copy run twice at once on another stream:
    the step's copy time is the time some copy ran (the union), never the sum of their
    durations, which can exceed the step."""
    import gzip
    import json
    import shutil

    from torch_nsight.analyze.steps import step_table

    folder = tmp_path / "timeline_copy"
    shutil.copytree(DATA / "timeline_copy", folder)
    with gzip.open(folder / "trace-0.json.gz", "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    events = document["traceEvents"]
    twins = [{**e, "args": {**e["args"], "stream": e["args"]["stream"] + 1}}
             for e in events if e.get("cat") == "gpu_memcpy"]
    document["traceEvents"] = events + twins
    with gzip.open(folder / "trace-0.json.gz", "wt", encoding="utf-8") as handle:
        json.dump(document, handle)
    once = torch_nsight.load(DATA / "timeline_copy", cache=False)
    twice = torch_nsight.load(folder, cache=False)
    copies = [(p.kernels["kind"] == "memcpy").sum() for p in (once, twice)]
    assert copies[1] == 2 * copies[0] > 0
    before = step_table(once.kernels, once.timeline, "test")[0]
    after = step_table(twice.kernels, twice.timeline, "test")[0]
    assert after["copy_ns"].tolist() == pytest.approx(before["copy_ns"].tolist())
    assert (after["copy_pct"] <= 100.0).all() and (after["copy_busy_pct"] <= 100.0).all()
    assert after["copies"].sum() == 2 * before["copies"].sum()


def test_events_written_twice_count_once(tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """The recorded decode trace with every GPU event written twice: the same kernels as the
    trace itself, and one warning that says how many twins were left out."""
    import gzip
    import json
    import logging
    import shutil

    folder = tmp_path / "timeline_decode"
    shutil.copytree(DATA / "timeline_decode", folder)
    with gzip.open(folder / "trace-0.json.gz", "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    gpu = [e for e in document["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")]
    document["traceEvents"] += gpu
    with gzip.open(folder / "trace-0.json.gz", "wt", encoding="utf-8") as handle:
        json.dump(document, handle)
    once = torch_nsight.load(DATA / "timeline_decode", cache=False)
    with caplog.at_level(logging.WARNING):
        twice = torch_nsight.load(folder, cache=False)
    assert len(twice.kernels) == len(once.kernels)
    assert twice.kernels["duration_ns"].sum() == once.kernels["duration_ns"].sum()
    kernels = sum(e.get("cat") == "kernel" for e in gpu)
    assert f"{kernels} kernel events with a twin earlier in the file" in caplog.text

def test_a_copy_claiming_more_bytes_than_memory_moves_is_not_believed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The recorded copy-bound step with one copy's byte count made a petabyte: its rate
    would be above any GPU's memory, so its bytes are left out, with a warning; the other
    steps' copies keep theirs."""
    import gzip
    import json
    import logging
    import shutil

    from torch_nsight.analyze.steps import MAX_COPY_BYTES_PER_NS, step_table

    folder = tmp_path / "timeline_copy"
    shutil.copytree(DATA / "timeline_copy", folder)
    with gzip.open(folder / "trace-0.json.gz", "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    copy = [e for e in document["traceEvents"] if e.get("cat") == "gpu_memcpy"][-1]  # measured
    copy["args"]["bytes"] = 10**15
    with gzip.open(folder / "trace-0.json.gz", "wt", encoding="utf-8") as handle:
        json.dump(document, handle)
    honest = step_table(*(lambda p: (p.kernels, p.timeline))(
        torch_nsight.load(DATA / "timeline_copy", cache=False)), "test")[0]
    crafted = torch_nsight.load(folder, cache=False)
    with caplog.at_level(logging.WARNING, logger="torch_nsight.analyze.steps"):
        steps = step_table(crafted.kernels, crafted.timeline, "test")[0]
    assert "1 copies claim more bytes" in caplog.text
    assert not (steps["copy_gb_per_s"] > MAX_COPY_BYTES_PER_NS).any()
    assert steps["copy_bytes"].isna().sum() == 1  # the crafted step's: not known
    assert steps["copy_gb_per_s"].isna().sum() == 1
    assert (steps["copy_bytes"] == honest["copy_bytes"]).sum() == len(steps) - 1


@pytest.mark.parametrize(("name", "verdict", "advice_code"), [
    # busy 72.9% of its bare step: its GPU idles 27.1% of it, from FINDING_PCT (10%)
    ("timeline_train", "GPU-bound", "gpu_bound_idle"),
    ("timeline_decode", "launch-bound", "launch-bound"),
    ("timeline_copy", "copy-bound", "copy-bound"),
])
def test_analyze_decides_what_to_try_as_a_code(name: str, verdict: str,
                                               advice_code: str) -> None:
    """The advice is analyze's code: a GPU-bound step whose GPU idles at least FINDING_PCT
    of it gets its own, any other verdict its verdict's."""
    from torch_nsight.analyze import timeline_summary
    from torch_nsight.analyze.verdicts import FINDING_PCT

    profile = load_recorded(DATA / name)
    row = timeline_summary(profile.kernels, profile.timeline).iloc[0]
    assert (row["verdict"], row["advice_code"]) == (verdict, advice_code)
    if name == "timeline_train":
        assert 100.0 - row["bare_busy_pct"] == pytest.approx(27.1, abs=0.05)
        assert 100.0 - row["bare_busy_pct"] >= FINDING_PCT


def test_a_gpu_bound_step_that_idles_is_not_told_the_gpu_alone_limits_it() -> None:
    """The recorded GPT-2 training step is GPU-bound (busy 73% of its bare step), yet its GPU
    idles 27% of it: what to try says both, beside the gpu_idle finding."""
    from torch_nsight.analyze import timeline_summary
    from torch_nsight.render.timeline_words import word_summary

    profile = load_recorded(DATA / "timeline_train")
    summary = word_summary(timeline_summary(profile.kernels, profile.timeline))
    row = summary.iloc[0]
    assert row["verdict"] == "GPU-bound"
    assert row["advice"].startswith("The GPU is busy most of the step")
    assert "idle time the findings below name" in row["advice"]


def test_a_trace_of_many_shapes_judges_the_first_and_names_how_many_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded GPT-2 steps relabelled as three shapes, with room for one verdict and
    two names: one verdict block (a trace of thousands of shapes once printed and judged
    each, 20,000 lines), the others counted; the header names two shapes and counts one."""
    import torch_nsight.render.verdict as verdict
    import torch_nsight.units as units

    with gzip.open(DATA / "timeline_train" / "trace-0.json.gz", "rt", encoding="utf-8") as f:
        document = json.load(f)
    for event in document["traceEvents"]:
        name = str(event.get("name", ""))
        if name.startswith("torch_nsight/sweep;") and "run=" in name:
            run = name.rsplit("run=", 1)[1]
            event["name"] = name.replace("shape=8x512", f"shape=s{run}")
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    monkeypatch.setattr(verdict, "SHAPES_SHOWN", 1)
    monkeypatch.setattr(units, "NAMES_LISTED", 2)
    profile = torch_nsight.load(path, cache=False)
    assert profile.shapes == ["s0", "s1", "s2"]
    assert "shapes s0, s1 and 1 more;" in profile.describe()
    text = verdict.render_verdicts(profile)
    assert "(the first 1 of 3 shapes;" in " ".join(text.split())
    assert "\ns0: " in text and "\ns1: " not in text and "\ns2: " not in text


def test_names_longer_than_a_line_are_cut_in_the_verdict_and_the_header(
        tmp_path: Path) -> None:
    """The recorded GPT-2 steps with a 100,000-character embedding module, GPU and shape:
    the verdict and the one-line description stay lines (the names once filled 4,400 lines
    of a terminal), each name cut in its middle, its start and end kept."""
    from torch_nsight.render.verdict import render_verdicts
    from torch_nsight.units import NAME_CHARS

    with gzip.open(DATA / "timeline_train" / "trace-0.json.gz", "rt", encoding="utf-8") as f:
        document = json.load(f)
    long = "w" + "e" * 100_000
    for event in document["traceEvents"]:
        name = str(event.get("name", ""))
        if name in ("torch_nsight/wte", "torch_nsight/bwd:wte"):
            event["name"] = name.replace("wte", long)
        elif name.startswith("torch_nsight/sweep;"):
            event["name"] = name.replace("shape=8x512", "shape=" + "8x" * 50_000)
    document["deviceProperties"][0]["name"] = "H" * 100_000
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    profile = torch_nsight.load(path, cache=False)
    assert long in set(profile.kernels["module"])  # read whole, shown cut
    text = render_verdicts(profile) + "\n" + profile.describe()
    assert len(text) < 10_000, len(text)
    assert max(len(word) for word in text.split()) <= NAME_CHARS + 2
    assert "…" in text and "weee" in text
