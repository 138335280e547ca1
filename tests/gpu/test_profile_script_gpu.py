"""``torch-nsight profile`` of a user's training script on the GPU, eager and compiled: the
script runs to its end with its own output, its kernels lie in their modules, and no
kernel is placed above its roofline ceiling."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.analyze import UNATTRIBUTED

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "cli" / "compiled_steps.py"


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["eager", "whole", "dynamic"])
def test_a_script_is_profiled_and_runs_unchanged(tmp_path: Path, mode: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "torch_nsight", "profile", "--steps", "3:4",
                           "--out", "out", "--", sys.executable, str(SCRIPT), mode],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert output.count("graph breaks: 0") == 6 and "Traceback" not in output, output
    profile = torch_nsight.load(tmp_path / "out")
    k = profile.kernels
    # the model is tiny: its loss (outside every module) takes a good share
    assert len(k) > 10 and profile.coverage >= 0.7
    model = k["module"] != UNATTRIBUTED
    assert model.sum() >= 10
    # the optimizer's step is a range of its own (torch's foreach AdamW kernels)
    step = k[k["direction"] == "step"]
    assert len(step) > 0 and set(step["module"]) == {"AdamW"}, k["module"].unique()
    assert step["kernel"].str.contains("multi_tensor_apply|foreach").all(), step["kernel"]
    assert not (k["pct_of_roof"] > 100).any() and not k["above_roof"].any()
    if mode != "eager":
        inductor = k["kernel_full"].str.startswith("triton_")
        assert inductor.sum() > 3, "the model did not run compiled"
        assert (k.loc[inductor, "module"] != UNATTRIBUTED).all()
