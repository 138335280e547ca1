"""Fixes measured on the script's own steps (collect/parent/measure.py), from a recorded
report's findings, on a small model run bare on the CPU; and `findings --verify --command`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.cli.main import main
from torch_nsight.collect.parent.measure import VerifyPlan, verify_on_steps, verify_window
from torch_nsight.errors import VerifyError
from torch_nsight.vocabulary import STEPS_BASIS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"

#: The recorded report's module (``Projection/proj``, a misaligned vocabulary) in a script.
PROJECTION = """
import torch, torch_nsight
from torch import nn
class Projection(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 1001)
    def forward(self, x):
        return self.proj(x)
torch.manual_seed(0)
model = Projection()
torch_nsight.instrument(model)
x = torch.randn(16, 32)
for _ in range(10):
    with torch_nsight.step() as step:
        loss = model(x).logsumexp(-1).mean()
        loss.backward()
        step.record_loss(loss)
print("class", type(model.proj).__name__)
"""


@pytest.fixture
def projection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    (tmp_path / "train.py").write_text(PROJECTION)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")]))
    return [sys.executable, "train.py"]


@pytest.mark.slow
def test_the_recorded_finding_is_measured_with_its_switch(projection: list[str]) -> None:
    found = torch_nsight.load(DATA / "findings_gemm", cache=False).finding_table()
    lines: list[str] = []
    table = verify_on_steps(found, VerifyPlan(projection, "3:8", quiet=True), say=lines.append)
    row = table.iloc[0]
    assert row["finding"] == "gemm_misaligned" and row["verify_status"] == "measured", row
    assert row["gain_basis"] == STEPS_BASIS
    assert row["predicted_basis"] == found.iloc[0]["gain_basis"]
    assert row["est_gain_ns"] == found.iloc[0]["est_gain_ns"]  # the prediction stays
    assert row["measured_gain_ns"] == pytest.approx(row["before_ns"] - row["after_ns"])
    # two rounds pooled: 5 steps a run
    assert row["steps_timed"] == 10 and row["measured_spread_ns"] >= 0
    assert "2 rounds" in row["verify_detail"]
    assert lines[0] == "verify: run 1 of 4: no fix, steps 3:8"
    assert lines[2] == ("verify: run 2 of 4: pad_linear@proj:multiple=64 (the fix of "
                        "gemm_misaligned in proj)")
    assert lines[3] == "verify: run 3 of 4: no fix, steps 3:8"


@pytest.mark.slow
def test_findings_verify_times_the_fixes_on_the_command_given(
        projection: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["findings", str(DATA / "findings_gemm"), "--verify", "--command",
                   " ".join(projection), "--steps", "2:7"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "verified: gemm_misaligned in proj: measured" in out
    assert "measured µs" in out


def test_the_window_is_the_profiles_lengthened_to_five_steps() -> None:
    assert verify_window("10:12") == "10:15"
    assert verify_window("10") == "10:15"
    assert verify_window("10:30") == "10:30"
    assert verify_window("10:12", "20:26") == "20:26"
    with pytest.raises(VerifyError, match="pass --steps"):
        verify_window(None)


def test_a_command_that_does_not_parse_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["findings", str(DATA / "findings_gemm"), "--verify", "--command",
                   'python "train.py', "--steps", "2:7"])
    out, err = capsys.readouterr()
    assert status == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("torch-nsight: error: --command") and "quotation" in line


def test_step_options_without_a_command_are_one_line(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    status = main(["findings", str(DATA / "findings_gemm"), "--verify-top", "2"])
    out, err = capsys.readouterr()
    assert status == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert "--verify-top" in line and "--command" in line
