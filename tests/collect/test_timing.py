"""Where a sweep's time goes: the phase stamps of the child and the parent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.collect.shared import timing

from .models import Stack

DATA = Path(__file__).resolve().parents[1] / "data"


def _assert_adds_up(record: dict) -> None:
    phases = record["phases_s"]
    assert list(phases) == [p for p in timing.PHASES if p in phases]  # in the order they ran
    assert all(v >= 0 for v in phases.values())
    assert sum(phases.values()) + record["other_s"] == pytest.approx(record["total_s"], abs=0.01)


@pytest.mark.slow
def test_a_dry_run_records_every_phase_and_they_add_up(tmp_path: Path) -> None:
    profile = torch_nsight.sweep(Stack(2), [(2, 16), (4, 16)], quiet=True, profiler=None,
                                 output_dir=tmp_path / "out")
    record = profile.meta.sweeps[0].timing
    assert {"prepare", "python_start", "job_read", "cuda_init", "build", "warmup", "calls",
            "check", "measure", "cleanup", "child_exit", "load"} <= set(record["phases_s"])
    _assert_adds_up(record)
    # the stamps cover the sweep: what no phase names is the parent's polling, a small part
    assert abs(record["other_s"]) < 0.5 * record["total_s"]
    assert [c["name"] for c in record["children"]] == ["sweep"]
    # the first shape's cleanup ran; the last shape's was skipped (the child ends there)
    items = {i["shape"]: i for i in profile.results}
    assert "cleanup" in items["2x16"]["phases_s"] and "cleanup" not in items["4x16"]["phases_s"]
    # the manifest keeps the final record (loading included) and reads back the same
    manifest = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert manifest["record"]["timing"] == record
    assert torch_nsight.load(tmp_path / "out").meta.sweeps[0].timing == record


def test_the_recorded_gpu_sweep_says_where_its_time_went() -> None:
    # bench/real_model.py sweep on an H200: Hugging Face GPT-2 small, metric_set 'fast'
    record = load_recorded(DATA / "hf_gpt2_fast").meta.sweeps[0].timing
    _assert_adds_up(record)
    phases = record["phases_s"]
    # unpickling the model imports transformers in the child: the largest phase there
    assert max(phases, key=phases.get) == "job_read"
    assert phases["measure"] > 0 and phases["ncu_start"] > 0
    text = timing.describe(record)
    assert text.startswith(f"{record['total_s']:.1f} s: unpickling the job")


def test_process_start_time_is_when_the_process_started() -> None:
    before = time.time()
    out = subprocess.run([sys.executable, "-c", "from torch_nsight.collect.shared.timing "
                          "import process_start_time as p; print(repr(p()))"],
                         capture_output=True, text=True, check=True).stdout
    after = time.time()
    started = float(out)
    # clock ticks are 10 ms; the child started after `before` and before it answered
    assert before - 0.05 <= started <= after


def test_child_phases_of_a_child_that_died_early() -> None:
    # no results file: only what the parent saw, nothing invented
    assert timing.child_phases(100.0, 105.0, None) == {}
    phases = timing.child_phases(100.0, 109.0, {"timing": {"process_start": 100.5,
                                                           "imported": 103.0}})
    assert phases == {"ncu_start": 0.5, "python_start": 2.5}
