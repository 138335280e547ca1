"""``torch-nsight profile --verify`` of a launch-bound training script on the GPU: the bare
runs time the user's step, the GPU's idle time in it is a ``step_idle`` finding whose fix
(the model's compile) is then measured on the script's own steps, and every figure is
physically possible."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Thirty-two narrow layers at batch 8: each kernel takes a few µs, fewer than the CPU
#: takes to launch it, so the GPU waits for the CPU most of the step.
TRAIN = """
import torch, torch_nsight
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(32) for m in (nn.Linear(64, 64), nn.ReLU())]).cuda()
torch_nsight.instrument(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8, 64, device="cuda")
for _ in range(30):
    with torch_nsight.step() as step:
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step.record_loss(loss)
print("trained")
"""


@pytest.mark.gpu
def test_the_idle_bare_step_is_found_and_its_compile_measured(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "torch_nsight", "profile", "--steps", "4:5",
                           "--verify", "--verify-rounds", "1", "--out", "out", "--",
                           sys.executable, "train.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in output, output
    assert "trained" in output  # the script ran to its end
    idle = re.search(r"the GPU idles ([0-9.]+) (µs|ms) of the bare step's ([0-9.]+) (µs|ms)",
                     proc.stderr)
    assert idle is not None, proc.stderr
    scale = {"µs": 1e3, "ms": 1e6}
    idle_ns = float(idle.group(1)) * scale[idle.group(2)]
    bare_ns = float(idle.group(3)) * scale[idle.group(4)]
    assert 0.3 * bare_ns <= idle_ns < bare_ns, idle.group(0)  # launch-bound, not above it
    (line,) = [v for v in proc.stdout.splitlines() if v.startswith("verified: step_idle")]
    assert ": compile: predicted " in line, line
    measured = re.search(r"measured (-?[0-9.]+) (µs|ms) over (\d+) pairs", line)
    assert measured is not None and line.split(": ")[2] == "measured", line
    gain_ns = float(measured.group(1)) * scale[measured.group(2)]
    # compiling cuts the launches: a gain, and never more than the whole bare step
    assert 0 < gain_ns < bare_ns, line
