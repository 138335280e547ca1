"""examples/sweep_llama.py, a command-line script: on a machine without a GPU, or when the
sweep refuses, one line and exit status 1, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from examples import sweep_llama
from torch_nsight.errors import NcuNotFoundError

SCRIPT = Path(sweep_llama.__file__).resolve()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
@pytest.mark.slow
def test_sweep_example_without_a_gpu(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("sweep_llama.py: error: no CUDA GPU is visible")
    assert "--dry-run" in line


def test_sweep_example_library_error_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    def no_ncu(*args: object, **kwargs: object) -> None:
        raise NcuNotFoundError("Nsight Compute (`ncu`) was not found on PATH.\n  Install it.")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sweep_llama, "torch_nsight", SimpleNamespace(sweep=no_ncu))
    assert sweep_llama.main([]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "sweep_llama.py: error: Nsight Compute (`ncu`) was not found on PATH. Install it."]
