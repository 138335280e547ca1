"""``profile --replicate-launches`` at the command line: what it refuses, and the hint a profile
whose repeated launches would have cost less replicated prints (on the zoo's recordings,
tests/data/zoo_families: an LSTM language model's step and Swin-T's, H100)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from tests.recorded import load_recorded
from torch_nsight.cli.main import main
from torch_nsight.cli.profile_launches import (
    probes_launches,
    replication_hint,
    say_replication_hint,
)
from torch_nsight.collect.parent.launch_list import forget_launches, record_launches
from torch_nsight.environment import Steps
from torch_nsight.errors import OutputWriteError
from torch_nsight.report.launch_replicas import replicated_count

DATA = Path(__file__).resolve().parents[1] / "data"
ZOO = DATA / "zoo_families"
#: One profiled kernel and the start-up, as the fast default measured them on lstm_lm's step
#: (docs/benchmarks.md, 2026-11-28: 1,433 kernels, 66.1 s whole).
SECONDS_PER_KERNEL, START_S = 0.035, 15.0


@pytest.mark.parametrize("argv, clash", [
    ([], "--steps"), (["--steps", "3:"], "need an end"), (["--steps", "3:4", "-k", "gemm"], "-k"),
    (["--steps", "3:4", "--timeline"], "--timeline"),
    (["--steps", "3:4", "--ncu-arg=--kernel-id=::x:1"], "--ncu-arg"),
])
def test_replication_refuses_what_would_shift_ncus_numbers(
        argv: list[str], clash: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--replicate-launches", *argv, "--", "python", "x.py"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--replicate-launches" in error[0] and clash in error[0], error


def test_the_hint_names_what_replication_would_save_where_it_pays() -> None:
    lstm = load_recorded(ZOO / "lstm_lm.ncu-rep.xz").kernels
    hint = replication_hint(lstm, seconds_per_kernel=SECONDS_PER_KERNEL, start_s=START_S)
    # 1,433 launches, 343 of them kept by the plan over the recorded step's own rows
    assert hint is not None and hint.startswith("hint: 1090 of the 1433 kernels"), hint
    assert "--replicate-launches would profile about 343" in hint and "about 38 s less" in hint
    # a transformer whose launches differ too much to pay back a start-up
    swin = load_recorded(ZOO / "swin_t.ncu-rep.xz").kernels
    assert replication_hint(swin, seconds_per_kernel=SECONDS_PER_KERNEL, start_s=START_S) is None


def test_the_hint_counts_the_blocks_the_option_would_profile_one_by_one() -> None:
    """Mixtral-style MoE (tests/data/zoo_families, every launch of the step): identical blocks
    profiled once left 347 kernels to profile; --replicate-launches turns that off, and its
    plan over all 1,284 launches keeps 993: no hint, however cheap a start-up."""
    moe = load_recorded(ZOO / "mixtral_moe.ncu-rep.xz").kernels
    assert replicated_count(moe) == (347, 993)
    assert replication_hint(moe, seconds_per_kernel=SECONDS_PER_KERNEL, start_s=0.01) is None


def test_no_hint_for_a_step_that_ran_compiled_graphs() -> None:
    """A compiled ViT's step (tests/data/compile): its repeated launches would pay at a
    roofline rate, but --replicate-launches refuses compiled graphs, so no hint."""
    vit = load_recorded(DATA / "compile" / "vit_train_flops.ncu-rep.xz").kernels
    assert replicated_count(vit)[0] - replicated_count(vit)[1] > 100
    assert replication_hint(vit, seconds_per_kernel=0.3, start_s=15.0) is None


def test_the_hint_is_shown_only_where_the_option_is_taken(
        capsys: pytest.CaptureFixture[str]) -> None:
    lstm = load_recorded(ZOO / "lstm_lm.ncu-rep.xz").kernels
    record = {"phases_s": {"start": START_S, "profiling": 1433 * SECONDS_PER_KERNEL},
              "kernels_profiled": 1433}
    options = dict(replicate_launches=None, metric_set="fast", ranks=None, timeline=False,
                   stalls=False, kernel_name=None, launch_skip=None, launch_count=None,
                   ncu_arg=[])
    for steps in (None, Steps(12, None)):  # refused: no step, steps without an end
        say_replication_hint(argparse.Namespace(**options, steps=steps), lstm, record)
        assert capsys.readouterr().err == ""
    say_replication_hint(argparse.Namespace(**options, steps=Steps(12, 13)), lstm, record)
    assert capsys.readouterr().err.startswith("hint: 1090 of the 1433 kernels")
    # --no-replicate-launches was the user's choice: no hint to undo it
    say_replication_hint(argparse.Namespace(**{**options, "replicate_launches": False},
                                            steps=Steps(12, 13)), lstm, record)
    assert capsys.readouterr().err == ""


def test_an_earlier_launch_list_goes_and_nothing_else(tmp_path: Path) -> None:
    report = tmp_path / "report.ncu-rep"
    folder = tmp_path / "launches"
    folder.mkdir()
    for name in ("plan.json", "timeline.json", "trace.json.gz", "rockets.csv"):
        (folder / name).write_text("x")
    forget_launches(report)
    assert sorted(p.name for p in folder.iterdir()) == ["rockets.csv"]
    with pytest.raises(OutputWriteError, match="rockets.csv"):  # before anything runs
        record_launches(["no-such-command"], report, steps=Steps(3, 4), timeout=1.0,
                        quiet=True, environ={})
    (folder / "rockets.csv").unlink()
    forget_launches(report)
    assert not folder.exists()


#: A script whose first step's probe finds a cuDNN recurrent layer: the CPU has none, so the
#: script stands one in for the probe's look at the GPU (the look itself runs in
#: tests/gpu/test_replicated_launches_gpu.py); every start and end is printed.
PROBED = """
import torch, torch_nsight
from torch import nn
import torch_nsight.capture.script.recurrent as recurrent
recurrent.recurrent_layers = lambda: ["lstm"]
model = nn.Sequential(nn.Linear(4, 4))
torch_nsight.instrument(model, record_calls=False)
print("started", flush=True)
for _ in range(4):
    with torch_nsight.step():
        model(torch.randn(2, 4)).sum().backward()
print("finished", flush=True)
"""


@pytest.mark.slow
def test_a_recurrent_model_is_run_again_after_a_launch_list(tmp_path: Path) -> None:
    """The probe ends the first run under ncu at its first step; profile then lists the
    launches without ncu (none on a CPU: the list fails, with a warning) and runs the command
    under ncu again, every launch profiled; the script's own exit status is kept."""
    from .test_profile_command import cli, fake_ncu

    ncu = fake_ncu(tmp_path)
    (tmp_path / "probed.py").write_text(PROBED)
    proc = cli("--ncu", str(ncu), "--steps", "2:3", "--", sys.executable, "probed.py",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("started") == 3, proc.stderr  # probe, launch list, ncu again
    assert 1 <= proc.stderr.count("finished") <= 2, proc.stderr  # not the probe's run
    assert "# cuDNN recurrent layers (lstm)" in proc.stdout + proc.stderr
    assert "no kernel ran inside the chosen steps" in proc.stderr  # the CPU's launch list
    assert "profiling every launch instead" in " ".join(proc.stderr.split())  # unwrapped
    record = json.loads((tmp_path / "torch_nsight_profile" / "report.run.json").read_text())
    assert [s["index"] for s in record["steps_profiled"]] == [2]
    off = cli("--ncu", str(ncu), "--steps", "2:3", "--no-replicate-launches", "--out", "off",
              "--", sys.executable, "probed.py", cwd=tmp_path)
    assert off.returncode == 0 and off.stderr.count("started") == 1, off.stderr
    assert "recurrent" not in off.stderr


@pytest.mark.slow
def test_one_timeout_holds_for_all_the_commands_runs(tmp_path: Path) -> None:
    """--timeout is the whole profile's: a script that sleeps 8 s before its steps fits one
    run in 14 s but not the probe's run and the launch list's together, so ncu's run is never
    started (before, each run had its own 14 s and all three finished)."""
    from .test_profile_command import cli, fake_ncu

    (tmp_path / "probed.py").write_text("import time\ntime.sleep(8)\n" + PROBED)
    proc = cli("--ncu", str(fake_ncu(tmp_path)), "--steps", "2:3", "--timeout", "14", "--",
               sys.executable, "probed.py", cwd=tmp_path)
    assert proc.returncode != 0
    assert "--timeout 14 s ran out after" in proc.stderr, proc.stderr
    # the probe's run started; the launch list's was stopped asleep; ncu's never began
    assert "before ncu's run" in proc.stderr and proc.stderr.count("started") == 1


@pytest.mark.slow
def test_a_dry_run_says_the_launches_would_be_listed_first(tmp_path: Path) -> None:
    (tmp_path / "probed.py").write_text(PROBED)
    from .test_profile_command import cli

    proc = cli("--dry-run", "--steps", "2:3", "--", sys.executable, "probed.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("started") == 1  # a rehearsal is not ended by the probe
    said = proc.stdout + proc.stderr
    assert "# cuDNN recurrent layers (lstm)" in said and "# ready:" in said, said
    duration = cli("--dry-run", "--steps", "2:3", "--metric-set", "duration", "--", sys.executable,
                   "probed.py", cwd=tmp_path)
    assert duration.returncode == 0 and "recurrent" not in duration.stdout + duration.stderr


def test_the_probe_is_on_only_where_replication_would_be_taken() -> None:
    options = dict(replicate_launches=None, no_replicate=False, metric_set="fast", ranks=None,
                   timeline=False, stalls=False, kernel_name=None, launch_skip=None,
                   launch_count=None, ncu_arg=[], steps=Steps(12, 13))
    assert probes_launches(argparse.Namespace(**options), 1)
    for change in ({"replicate_launches": True}, {"replicate_launches": False},
                   {"no_replicate": True}, {"metric_set": "duration"}, {"steps": Steps(12, None)},
                   {"steps": None}, {"stalls": True}, {"kernel_name": "gemm"}):
        assert not probes_launches(argparse.Namespace(**{**options, **change}), 1), change
    assert not probes_launches(argparse.Namespace(**options), 2)  # ranks
