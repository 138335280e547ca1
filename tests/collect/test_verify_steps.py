"""Fixes measured on the script's own steps (collect/parent/measure.py), from a recorded
report's findings, on a small model run bare on the CPU, the fix off and on in turn in one
process; and `findings --verify --command`."""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import pytest

from tests.recorded import load_recorded
from torch_nsight.cli.main import main
from torch_nsight.collect.parent import measure
from torch_nsight.collect.parent.bare import BareRun, run_bare
from torch_nsight.collect.parent.measure import VerifyPlan, verify_on_steps, verify_window
from torch_nsight.environment import Steps
from torch_nsight.errors import VerifyError
from torch_nsight.verify_exchange import fix_on_at
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
for _ in range(24):
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
def test_the_recorded_finding_is_measured_with_its_switch(
        projection: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[BareRun] = []

    def kept(*args: object, **kwargs: object) -> BareRun:
        runs.append(run_bare(*args, **kwargs))  # type: ignore[arg-type]
        return runs[-1]

    monkeypatch.setattr(measure, "run_bare", kept)  # the runs, kept to check the gain
    found = load_recorded(DATA / "findings_gemm").finding_table()
    lines: list[str] = []
    table = verify_on_steps(found, VerifyPlan(projection, Steps(3, 19), quiet=True),
                            say=lines.append)
    row = table.iloc[0]
    assert row["finding"] == "gemm_misaligned" and row["verify_status"] == "measured", row
    assert row["gain_basis"] == STEPS_BASIS
    assert row["predicted_basis"] == found.iloc[0]["gain_basis"]
    assert row["est_gain_ns"] == found.iloc[0]["est_gain_ns"]  # the prediction stays
    # one process, the fix off and on in turn, ABBA from the first timed step
    (run,) = runs
    assert run.times is not None and run.error is None
    timed = run.times.steps
    assert [s["index"] for s in timed] == list(range(3, 19))
    assert [s["fix_on"] for s in timed] == [fix_on_at(i, 3) for i in range(3, 19)]
    assert [s["fix_on"] for s in timed[:8]] == [False, True, True, False] * 2
    # the gain is the median difference of the 8 pairs of adjacent steps (3, 4), (5, 6), ...
    differences = []
    for first, second in zip(timed[::2], timed[1::2], strict=True):
        off, on = (first, second) if not first["fix_on"] else (second, first)
        differences.append(off["time_ns"] - on["time_ns"])
    assert row["measured_gain_ns"] == statistics.median(differences)
    assert row["before_ns"] == statistics.median(
        s["time_ns"] for s in timed if not s["fix_on"])
    assert row["steps_timed"] == 8 and row["measured_spread_ns"] >= 0
    assert lines[0] == ("verify: run 1 of 1: pad_linear@proj:multiple=64 (the fix of "
                        "gemm_misaligned in proj), off and on in turn over steps 3:19")
    assert lines[1].startswith("verify: pad_linear@proj:multiple=64: 8 pairs of steps "
                               "(perf_counter): median ")
    assert "over 8 pairs; the gain's 95% interval " in lines[2]
    assert lines[2].endswith("loss within 2%")


@pytest.mark.slow
def test_findings_verify_times_the_fixes_on_the_command_given(
        projection: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["findings", str(DATA / "findings_gemm"), "--verify", "--command",
                   " ".join(projection), "--steps", "2:7"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "verified: gemm_misaligned in proj: measured" in out
    assert "measured µs" in out


def test_the_window_is_the_profiles_lengthened_to_ten_pairs_after_a_warm_up() -> None:
    def window(steps: str | None, chosen: str | None = None) -> str:
        return str(verify_window(steps and Steps.parse(steps), chosen and Steps.parse(chosen)))

    assert window("10:12") == "10:30"
    assert window("10") == "10:30"
    assert window("10:34") == "10:34"
    assert window("10:31") == "10:32"  # an even number of steps: whole pairs
    assert window("0:1") == "2:22"  # a step without the fix and one with it first
    assert window("10:12", "20:30") == "20:30"
    with pytest.raises(VerifyError, match="pass --steps"):
        window(None)
    with pytest.raises(VerifyError, match="at least 10 steps"):
        window("10:12", "20:26")
    with pytest.raises(VerifyError, match="a closed window of steps, not '3:': pass "
                                          "--verify-steps 3:23"):
        window("3:")


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
