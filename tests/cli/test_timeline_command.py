"""torch-nsight timeline and profile --timeline on a CPU-only machine: PyTorch's profiler
records the CPU ops and the steps (no GPU rows), the output directory reads back, and the
usage errors are one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import torch_nsight
import torch_nsight.collect.timeline as timelines
from torch_nsight.render import plot_timeline

from .conftest import run_main

ROOT = Path(__file__).resolve().parents[2]

MODEL = """import torch
def make():
    return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
"""
LOOP = """import torch, torch_nsight
m = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
with torch_nsight.instrument(m):
    for i in range(6):
        with torch_nsight.step():
            m(torch.randn(8, 32)).sum().backward()
raise SystemExit(3)
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TORCH_NSIGHT_TIMELINE", None)
    return subprocess.run([sys.executable, "-m", "torch_nsight", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


@pytest.mark.slow
def test_timeline_of_a_factory_reads_back_per_shape(tmp_path: Path) -> None:
    (tmp_path / "mk.py").write_text(MODEL)
    proc = cli("timeline", "mk.py:make", "--shapes", "8x32,16x32", "--runs", "2",
               "--warmup", "1", "--out", "tl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    profile = torch_nsight.load(tmp_path / "tl")
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    assert steps["shape"].tolist() == ["8x32", "8x32", "16x32", "16x32"]
    assert steps["run"].tolist() == [0, 1, 0, 1]
    assert (steps["bare_ns"] > 0).all() and (steps["ranged_ns"] > 0).all()
    again = cli("timeline", "mk.py:make", "--shapes", "8x32", "--out", "tl", cwd=tmp_path)
    assert again.returncode == 1 and "--force" in again.stderr


@pytest.mark.slow
def test_a_timeline_without_gpu_activity_draws_no_idle_step(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU records kernels")
    (tmp_path / "mk.py").write_text(MODEL)
    proc = cli("timeline", "mk.py:make", "--shapes", "8x32", "--runs", "2", "--warmup", "1",
               "--out", "tl", "--plot-timeline", "step.png", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--plot-timeline not drawn: the profile holds no GPU activity" in proc.stderr
    assert not (tmp_path / "step.png").exists()
    with pytest.raises(ValueError, match="no GPU activity"):
        plot_timeline(torch_nsight.load(tmp_path / "tl"), tmp_path / "x.png")


def test_a_shape_that_failed_is_listed_and_not_drawn(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # the H200 recording of 8x512, with a second shape that ran out of memory beside it
    recorded = tmp_path / "recorded"
    shutil.copytree(ROOT / "tests" / "data" / "timeline_train", recorded)
    manifest = json.loads((recorded / "timeline.json").read_text())
    manifest["items"].append({"variant": "", "shape": "16x512", "status": "failed",
                              "error": "OutOfMemoryError: CUDA out of memory"})
    (recorded / "timeline.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(timelines, "timeline", lambda *_, **__: torch_nsight.load(recorded))
    (tmp_path / "mk.py").write_text(MODEL)
    status, out, err = run_main(["timeline", "mk.py:make", "--shapes", "8x512,16x512", "--out",
                                 "tl", "--plot-timeline", "step.png"], tmp_path, monkeypatch,
                                capsys)
    assert status == 0, err
    assert "wrote step-8x512.png" in out and (tmp_path / "step-8x512.png").is_file()
    assert "note: step-16x512.png not drawn: shape 16x512 did not run" in err
    (failure,) = torch_nsight.load(recorded).failures
    assert (failure["shape"], failure["status"]) == ("16x512", "failed")


@pytest.mark.slow
def test_profile_timeline_records_the_chosen_steps_and_passes_the_status_on(
        tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    proc = cli("profile", "--timeline", "--steps", "2:4", "--out", "tl", "--",
               sys.executable, "loop.py", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr  # the script's own status
    profile = torch_nsight.load(tmp_path / "tl")
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    assert steps["run"].tolist() == [2, 3]
    assert steps["bare_ns"].isna().all()  # a user's script is not timed without ranges
    # the same engine as under ncu: the steps' status lines, the run's record
    record = json.loads((tmp_path / "tl" / "timeline.run.json").read_text())
    assert [(s["index"], s["status"]) for s in record["steps_profiled"]] == [(2, "ok"),
                                                                            (3, "ok")]
    assert record["exit_status"] == 3 and record["metric_set"] == "timeline"


@pytest.mark.parametrize(("args", "message"), [
    (["profile", "--timeline", "--", sys.executable, "-c", "pass"], "--timeline records"),
    (["timeline", "mk.py:make", "--shapes", "8xa"], "--shapes"),
    (["timeline", "nope.py:make", "--shapes", "8"], "does not exist"),
    (["timeline", "mk.py:make", "--shapes", "8", "--plot-timeline", "t.jpg"],
     "--plot-timeline needs"),
    (["timeline", "mk.py:make", "--shapes", "8", "--runs", "0"], "runs must be"),
])
def test_usage_errors_are_one_line(tmp_path: Path, args: list[str], message: str,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mk.py").write_text(MODEL)
    status, _, err = run_main(args, tmp_path, monkeypatch, capsys)
    assert status == 1
    (line,) = err.strip().splitlines()[-1:]
    assert line.startswith("torch-nsight: error:") and message in line


def test_a_factory_that_returns_no_module_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The factory's result, not an AttributeError deep inside (``'int' object has no
    attribute 'to'``), is what the error names."""
    (tmp_path / "mk.py").write_text("def make():\n    return 3\n")
    status, _, err = run_main(["timeline", "mk.py:make", "--shapes", "8x32", "--out", "tl"],
                              tmp_path, monkeypatch, capsys)
    assert status == 1 and "the factory returned int, not an nn.Module" in err, err
    assert "AttributeError" not in err
