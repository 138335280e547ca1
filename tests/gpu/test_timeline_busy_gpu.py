"""The busy share a ``profile --timeline`` verdict states is the live training step's: judged
on the steps the script ran before the window, not on the steps the profiler lengthened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.analyze import timeline_summary

ROOT = Path(__file__).resolve().parents[2]

#: An eager training loop of a small MLP, launch- or CPU-heavy; with ``timed`` it prints its
#: mean step time over steps 10-59, one synchronisation at each end (no profiler).
SCRIPT = r'''
import json, sys, time, torch, torch_nsight
steps, timed = int(sys.argv[1]), len(sys.argv) > 2
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU())
                              for _ in range(8)]).cuda()
torch_nsight.instrument(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(512, 1024, device="cuda")
for i in range(steps):
    if timed and i == 10:
        torch.cuda.synchronize()
        start = time.perf_counter()
    with torch_nsight.step():
        model(x).float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
if timed:
    print(json.dumps({"step_ns": 1e9 * (time.perf_counter() - start) / (steps - 10)}))
'''


@pytest.mark.gpu
def test_the_stated_busy_share_is_the_unprofiled_steps(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    bare = subprocess.run([sys.executable, "train.py", "60", "timed"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert bare.returncode == 0, bare.stderr
    step_ns = json.loads(bare.stdout.strip().splitlines()[-1])["step_ns"]
    proc = subprocess.run([sys.executable, "-m", "torch_nsight", "profile", "--timeline",
                           "--steps", "40:43", "--out", "tl", "--", sys.executable, "train.py",
                           "46"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    profile = torch_nsight.load(tmp_path / "tl")
    (item,) = json.loads((tmp_path / "tl" / "timeline.json").read_text())["items"]
    assert item["bare_steps"] == 10  # the ten steps just before the window, start to start
    row = timeline_summary(profile.kernels, profile.timeline).iloc[0]
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    reference = 100.0 * float(steps["busy_ns"].median()) / step_ns
    assert abs(row["bare_busy_pct"] - reference) <= 10.0, (row["bare_busy_pct"], reference)
    assert "timed without the profiler" in row["evidence"]
