"""``torch-nsight profile --replicate-launches`` on the GPU, given or chosen by the probe that
finds a cuDNN recurrent layer: an LSTM language model's step (a
cuDNN ``nn.LSTM`` launching its kernels once per time step from one call) gets a row for
every launch of the launch list, most of them copied from a few profiled ones, and its
modules' times within a few percent of the same step profiled launch by launch; two steps the
same, each with its own copies, the calls table carried after the last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.formats import launch_plan_of

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "data" / "record_outside.py"


def _profile(tmp_path: Path, out: str, *extra: str, steps: str = "3:4",
             said: list[str] | None = None) -> torch_nsight.Profile:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "torch_nsight", "profile", "--steps", steps,
                           *extra, "--out", out, "--", sys.executable, str(SCRIPT), "--train",
                           "--steps", "6"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=400)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "outside_lstm done" in output, output
    if said is not None:
        said.append(output)
    return torch_nsight.load(tmp_path / out / "report.ncu-rep")


@pytest.mark.gpu
def test_replicated_launches_stand_for_every_launch(tmp_path: Path) -> None:
    """Without the option, the probe finds the cuDNN LSTM at the first step and the launches
    are replicated all the same; ``--no-replicate-launches`` profiles every one."""
    said: list[str] = []
    first = _profile(tmp_path, "replicated", said=said)
    assert "# cuDNN recurrent layers (lstm)" in said[0] and "the probe's run" in said[0]
    # the same command again into the same folder: the launch list first, no probe
    replicated = _profile(tmp_path, "replicated", "--force", said=said)
    assert "found by this command's last run" in said[1] and "the probe's run" not in said[1]
    assert len(replicated.kernels) == len(first.kernels)
    every = _profile(tmp_path, "every", "--no-replicate-launches")
    assert launch_plan_of(tmp_path / "replicated" / "report.ncu-rep").is_file()
    assert not launch_plan_of(tmp_path / "every" / "report.ncu-rep").is_file()
    record = json.loads((tmp_path / "replicated" / "report.run.json").read_text())
    assert record["replicated_launches"]["profiled"] < record["replicated_launches"]["launches"]
    s, e = replicated.kernels, every.kernels
    assert len(s) == len(e), (len(s), len(e))
    copied = s["replicated_from"].notna()
    assert copied.sum() > len(s) / 3, copied.sum()  # the LSTM's time steps
    lstm = s["module"].astype(str).str.contains("lstm")
    assert s.loc[lstm & copied, "replicated_from"].astype(str).str.contains("lstm").all()
    truth = e.groupby("module")["duration_ns"].sum()
    by_module = s.groupby("module")["duration_ns"].sum() / truth
    large = truth >= 0.01 * truth.sum()  # a module of a few µs moves 10% between processes
    assert ((by_module - 1)[large].abs() < 0.1).all(), by_module.to_string()
    assert abs(s["duration_ns"].sum() / e["duration_ns"].sum() - 1) < 0.05


@pytest.mark.gpu
def test_two_steps_are_replicated_each_on_its_own(tmp_path: Path) -> None:
    one = _profile(tmp_path, "one", "--replicate-launches").kernels
    two = _profile(tmp_path, "two", "--replicate-launches", steps="3:5").kernels
    assert len(two) == 2 * len(one), (len(two), len(one))
    assert set(two["run"].astype(int)) == {3, 4}
    for run, rows in two.groupby(two["run"].astype(int)):
        copied = rows["replicated_from"].notna()
        assert copied.sum() > len(rows) / 3, (run, copied.sum())
        sources = set(rows.loc[copied, "representative_index"].astype(int))
        assert sources <= set(rows.loc[~copied, "kernel_index"].astype(int)), run  # its own
    # the calls table, carried after step 4's last launch, gives both steps their FLOPs
    assert two["flops"].gt(0).groupby(two["run"].astype(int)).sum().min() > 0
    by_step = two.groupby([two["run"].astype(int), "module"])["duration_ns"].sum().unstack(0)
    large = by_step[3] >= 0.01 * by_step[3].sum()
    assert ((by_step[4] / by_step[3] - 1)[large].abs() < 0.1).all(), by_step.to_string()

