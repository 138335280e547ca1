"""``torch-nsight profile --dry-run`` of compiled training loops on the CPU: the script runs
to its end with its own output, Dynamo counts no graph break, the chosen step is ready, the
sibling check stays off, and no false warning about a missing kernel map (real Inductor
compiles: C++ kernels stand in for Triton)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torch_nsight.capture.compiled.inductor import compiled_support

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: The four modes on one worker, one after the other: the kernels they share (the same layers,
#: compiled whole or per block) are built once, in the run's Inductor cache (tests/conftest.py);
#: what is tested is the dry run, not a cold compile.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("compiled_dry_run"),
              pytest.mark.skipif(compiled_support() is not None,
                                 reason=f"this torch cannot map compiled kernels: "
                                        f"{compiled_support()}")]


@pytest.mark.parametrize("mode", ["whole", "block", "dynamic", "fullgraph"])
def test_a_compiled_script_runs_unchanged_under_the_dry_run(tmp_path: Path, mode: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch_nsight", "profile", "--dry-run", "--steps", "3:4",
         "--out", str(tmp_path / "out"), "--", sys.executable, str(HERE / "compiled_steps.py"),
         mode], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    breaks = [int(n) for n in re.findall(r"^graph breaks: (\d+)$", output, re.M)]
    assert len(breaks) >= 4 and breaks[-1] == 0, output  # the script's own lines, 0 breaks
    assert "# ready: without --dry-run, ncu profiles step(s) 3" in done.stdout, output
    assert "the model runs torch.compile graphs: every module is profiled" in done.stdout
    assert "Traceback" not in output and "no kernel map" not in output, output
