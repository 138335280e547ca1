"""The busy share a ``profile --timeline`` verdict states is the live training step's: judged
on warm steps the script ran outside the window (after it, where enough followed), not on
the steps the profiler lengthened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.analyze import timeline_summary
from torch_nsight.render.timeline_words import word_summary

ROOT = Path(__file__).resolve().parents[2]

#: An eager training loop of a small MLP, launch- or CPU-heavy. It also times steps 30-39
#: itself, from outside the loop body (one synchronisation before step 30 and one before step
#: 40, where the profiled window starts), and writes the mean to step.json: the step as the
#: script runs it, over the same steps the verdict's CUDA events time.
SCRIPT = r'''
import json, sys, time, torch, torch_nsight
steps = int(sys.argv[1])
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU())
                              for _ in range(8)]).cuda()
torch_nsight.instrument(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(512, 1024, device="cuda")
for i in range(steps):
    if i in (30, 40):
        torch.cuda.synchronize()
        if i == 30:
            start = time.perf_counter()
        else:
            json.dump({"step_ns": 1e9 * (time.perf_counter() - start) / 10}, open("step.json", "w"))
    with torch_nsight.step():
        model(x).float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
'''


@pytest.mark.gpu
def test_the_stated_busy_share_is_the_unprofiled_steps(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "torch_nsight", "profile", "--timeline",
                           "--steps", "40:43", "--out", "tl", "--", sys.executable, "train.py",
                           "56"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    step_ns = json.loads((tmp_path / "step.json").read_text())["step_ns"]
    profile = torch_nsight.load(tmp_path / "tl")
    (item,) = json.loads((tmp_path / "tl" / "timeline.json").read_text())["items"]
    # the warm steps either side of the window (the later half before it, 35-39, or 44-52
    # after it, whichever ran faster) against the script's own steps 30-39, two clocks
    assert (item["bare_basis"], item["bare_steps"]) in (("before", 5), ("after", 9))
    assert item["bare_ns"] == pytest.approx(step_ns, rel=0.15)
    assert item["bare_min_ns"] <= item["bare_ns"] <= item["bare_max_ns"]
    row = word_summary(timeline_summary(profile.kernels, profile.timeline)).iloc[0]
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    reference = 100.0 * float(steps["busy_ns"].median()) / step_ns
    assert abs(row["bare_busy_pct"] - reference) <= 10.0, (row["bare_busy_pct"], reference)
    assert "timed without the profiler" in row["evidence"]
    # the profiled steps themselves (profiler and synchronisation) read far less busy
    assert row["busy_pct"] < row["bare_busy_pct"]
