"""profile --verify on the CPU: the command run bare once per fix, the fix switched on in the
script by TORCH_NSIGHT_APPLY and off and on again at every step
(TORCH_NSIGHT_VERIFY_ALTERNATE), the gains measured on pairs of its own steps beside the
predicted ones; fixes that fail or change the loss reported, not counted."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from torch_nsight.environment import Steps
from torch_nsight.errors import VerifyError

from .conftest import run_main
from .test_profile_command import FAKE_NCU, cli

DATA = Path(__file__).resolve().parents[1] / "data"

TRAIN = """
import sys, time, torch, torch_nsight
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 37))
torch_nsight.instrument(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 16), torch.randn(8, 37)
for _ in range(int(sys.argv[1]) if sys.argv[1:] else 24):
    with torch_nsight.step() as step:
        loss = (model(x) - y).square().mean()
        if "{scaled}" and torch.backends.cuda.matmul.allow_tf32:
            loss = loss * 2  # a fix that changes the loss (in the steps it is on)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step.record_loss(loss)
        time.sleep({pause})  # the CPU's own work between launches, where asked
"""


def script(tmp_path: Path, *, scaled: bool = False, pause: float = 0.0) -> None:
    (tmp_path / "train.py").write_text(TRAIN.replace("{scaled}", "1" if scaled else "")
                                       .replace("{pause}", str(pause)))


def findings_section(out: str) -> list[str]:
    lines = out[out.index("Findings (ranked"):].splitlines()
    return [line for line in lines[2:] if line.strip() and not line.startswith("verified:")]


@pytest.mark.slow
def test_a_dry_run_measures_the_fixes_named_on_the_steps(tmp_path: Path) -> None:
    script(tmp_path)
    proc = cli("--dry-run", "--steps", "3:5", "--verify", "--verify-rounds", "2",
               "--verify-fix", "pad_linear@2", "--verify-fix", "tf32", "--verify-fix",
               "compile@0:backend=eager", "--verify-fix", "pad_linear@nowhere", "--",
               sys.executable, "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # one line when each run starts and ends, the 2 steps lengthened to 20 (10 pairs); one
    # process per fix and round, no run without a fix, a fix that failed to apply not run
    # again
    started = [line.split(": ", 2)[1:] for line in proc.stderr.splitlines()
               if line.startswith("verify: run ")]
    assert [s for s, _ in started] == [f"run {n} of 8" for n in range(1, 9)]
    fixes = ["pad_linear@2", "tf32", "compile@0:backend=eager", "pad_linear@nowhere"]
    assert [what for _, what in started] == [
        *(f"{fix}, off and on in turn over steps 3:23" for fix in fixes),
        *(f"{fix}, off and on in turn over steps 3:23" for fix in fixes[:3]),
        "pad_linear@nowhere: not run again (its run in an earlier round failed)"]
    ended = [line for line in proc.stderr.splitlines()
             if line.startswith("verify: tf32: ") and "pairs of steps (" in line]
    assert len(ended) == 2 and all("10 pairs of steps (perf_counter)" in e for e in ended)
    rows = findings_section(proc.stdout)
    assert "predicted µs" in rows[0] and "measured µs" in rows[0]
    verdicts = [line for line in proc.stdout.splitlines() if line.startswith("verified:")]
    assert [v.split(": ")[2] for v in verdicts] == ["measured", "measured", "measured",
                                                    "fix_failed"]
    assert all("over 20 pairs of steps" in v for v in verdicts[:3])  # two runs pooled
    assert all("2 runs pooled" in v for v in verdicts[:3])
    assert "Sequential has no module named 'nowhere'" in verdicts[3]
    assert "loss within 2%" in verdicts[0]  # the padded Linear computes the same loss
    assert "NOT applied" in proc.stderr  # the script's own warning


@pytest.mark.slow
def test_a_fix_that_changes_the_loss_is_not_counted(tmp_path: Path) -> None:
    script(tmp_path, scaled=True)
    proc = cli("--dry-run", "--steps", "2:7", "--verify", "--verify-fix", "tf32", "--",
               sys.executable, "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "verify: tf32: NOT counted (loss_changed)" in proc.stderr
    # the steps with the fix doubled the loss, from the adjacent ones without it
    (changed,) = re.findall(r"loss_changed: the loss changed by \+([0-9.]+)% \(tolerance 2%, "
                            r"steps with the fix against the adjacent ones without\)",
                            proc.stdout)
    assert 90 < float(changed) < 110


@pytest.mark.slow
def test_a_profile_measures_its_top_findings_switch(tmp_path: Path) -> None:
    """A fake ncu gives the recorded fp32 GEMM report, whose top finding (TF32 off) has a
    switch; it is measured on the script's own steps. The script's steps sleep 20 ms beside
    the report's one 2.7 ms GEMM: the bare step the runs timed leaves the GPU idle most of
    it, a step_idle finding, whose one long launch says the CPU's own work, not launches,
    holds it (no switch)."""
    ncu = tmp_path / "ncu"
    report = DATA / "findings_fp32_off" / "sweep.ncu-rep.xz"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, mode="ok", report=report))
    ncu.chmod(0o755)
    script(tmp_path, pause=0.02)
    proc = cli("--ncu", str(ncu), "--steps", "4:10", "--verify", "--verify-rounds", "1", "--",
               sys.executable, "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ("verify: run 1 of 1: tf32 (the fix of fp32_no_tensor_cores in Linear), off and on "
            "in turn over steps 4:24") in proc.stderr
    (row,) = [r for r in findings_section(proc.stdout) if "fp32_no_tensor_cores" in r]
    assert "±" in row  # the gain measured on the steps, beside the predicted one
    (line,) = [v for v in proc.stdout.splitlines() if v.startswith("verified:")]
    # one line per fix: every row it stands for predicted together, beside what it measured
    assert line.startswith("verified: fp32_no_tensor_cores in Linear")
    assert ": measured: tf32: predicted " in line and "x the prediction" in line
    assert "over 10 pairs of steps" in line
    section = findings_section(proc.stdout)
    (at,) = [i for i, r in enumerate(section) if "step_idle" in r]
    assert "bare_step" in section[at]  # its gain: the bare step against its kernels
    assert "No switch known" in section[at + 1] and "--timeline" in " ".join(section[at + 1:])
    bare = float(re.search(r"the GPU idles ([0-9.]+) ms of the bare step's ([0-9.]+) ms",
                           proc.stderr).group(2))
    assert bare >= 20.0  # the sleep is in every step, with or without the fix


def test_a_script_that_never_instruments_cannot_have_its_fix_applied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plain.py").write_text(
        "import torch_nsight\nfor _ in range(9):\n    with torch_nsight.step():\n        pass\n")
    status, out, err = run_main(["profile", "--dry-run", "--steps", "2:7", "--verify",
                                 "--verify-fix", "channels_last", "--", sys.executable,
                                 "plain.py"], tmp_path, monkeypatch, capsys)
    assert status == 0, err
    assert "never called torch_nsight.instrument(model)" in out
    assert "channels_last: NOT counted (fix_failed)" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--verify", "--dry-run", "--", "python", "x.py"], "pass --steps A:B"),
    (["--verify", "--steps", "3:", "--dry-run", "--", "python", "x.py"],
     "a closed window of steps"),
    (["--verify", "--steps", "3", "--verify-steps", "3:5", "--dry-run", "--", "python",
      "x.py"], "time at least 10 steps"),
    (["--verify", "--steps", "3", "--verify-steps", "1:20", "--dry-run", "--", "python",
      "x.py"], "after at least 2 to warm up (e.g. 2:12)"),
    (["--verify", "--steps", "3", "--verify-fix", "fuse", "--dry-run", "--", "python",
      "x.py"], "unknown fix 'fuse'"),
    (["--verify", "--steps", "3", "--verify-steps", "-2:20", "--", "python", "x.py"],
     "--verify-steps: steps '-2:20': step indices start at 0"),
    (["--verify", "--steps", "3", "--verify-top", "0", "--", "python", "x.py"],
     "--verify-top must be at least 1"),
    (["--verify", "--steps", "3", "--timeline", "--", "python", "x.py"], "nor --timeline"),
    # (issue 45) ignored before: the fix named was never timed, the run exited 0
    (["--steps", "3", "--verify-fix", "tf32", "--dry-run", "--", "python", "x.py"],
     "--verify-fix tunes --verify, which was not given: add --verify"),
    (["--steps", "3", "--verify-top", "2", "--verify-rounds", "2", "--", "python", "x.py"],
     "--verify-top, --verify-rounds tune --verify, which was not given"),
])
def test_bad_verify_options_are_one_line(tmp_path: Path, args: list[str], message: str,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RANK", "")
    status, out, err = run_main(["profile", *args], tmp_path, monkeypatch, capsys)
    assert status == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("torch-nsight: error:") and message in line


def test_nothing_to_verify_is_a_verify_error() -> None:
    import pandas as pd

    from torch_nsight.collect.parent.measure import VerifyPlan, verify_on_steps
    from torch_nsight.vocabulary import FINDING_COLUMNS

    found = pd.DataFrame([{"finding": "ncu_CPIStall", "module": "m", "module_path": "M/m",
                           "est_gain_ns": 1.0, "gain_basis": "ncu_rule"}],
                         columns=list(FINDING_COLUMNS))
    with pytest.raises(VerifyError, match="none of the findings has a fix that is a switch"):
        verify_on_steps(found, VerifyPlan(["python", "x.py"], Steps(2, 12)))


def test_a_fix_that_makes_the_loss_nan_is_not_counted() -> None:
    from torch_nsight.analyze.measured import (
        StepPair,
        loss_change,
        measured_status,
        paired_gain,
    )

    gain = paired_gain([StepPair(10.0, 9.0)] * 5)
    for on in ([float("nan")], [2.0, float("nan")]):
        change = loss_change([StepPair(10.0, 9.0, 2.0, loss) for loss in on])
        assert measured_status(gain, change) == "loss_changed"
    assert measured_status(gain, loss_change([StepPair(10.0, 9.0, 2.0, 2.01)])) == "measured"


def test_the_idle_time_is_judged_only_on_a_profile_of_every_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The bare step's time beyond its kernels is the GPU's idle time only where the profile
    holds every kernel of its chosen steps."""
    import argparse

    from torch_nsight.cli.verify import _left_out

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    whole = {"steps_profiled": [{"status": "ok"}, {"status": "ok"}]}

    def args(**given: object) -> argparse.Namespace:
        base = {"kernel_name": None, "launch_skip": None, "launch_count": None,
                "ncu_arg": [], "steps": Steps.parse("10:12"), "metric_set": "fast"}
        return argparse.Namespace(**{**base, **given})

    assert _left_out(args(), whole) is None
    assert _left_out(args(kernel_name="gemm"), whole) == "-k"
    assert _left_out(args(launch_count=10), whole) == "--launch-count"
    assert _left_out(args(ncu_arg=["--kernel-id=::regex:gemm:1"]), whole) == (
        "--ncu-arg --kernel-id=::regex:gemm:1")
    assert _left_out(args(ncu_arg=["--cache-control=all"]), whole) is None
    assert _left_out(args(steps=None), whole) is not None
    assert _left_out(args(), {"steps_profiled": [{"status": "ok"}, {"status": "error"}]})
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _left_out(args(), whole) == "NCCL kernels"
    assert _left_out(args(metric_set="duration"), whole) is None  # one pass keeps NCCL
