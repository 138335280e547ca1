"""``torch-nsight profile --stalls`` on a CPU-only machine, with a fake ncu that writes the
recorded ViT-S report (the fast set with the warp-state sections) and logs how it was called:
the second pass's command, its merge, a failed second pass that loses nothing, the dry run."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.analyze.stalls import stall_targets
from torch_nsight.cli.text import joined_command
from torch_nsight.collect.parent.stall_pass import kernel_filter

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[2]
VIT = DATA / "latency" / "vit_s.ncu-rep.xz"

FAKE_NCU = """#!{python}
import json, lzma, os, shutil, subprocess, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("Version 2025.3.1.0 (build 36398880) (public-release)")
    raise SystemExit(0)
if "--query-metrics" in args:
    raise SystemExit(0)
with open("{calls}", "a") as log:
    log.write(json.dumps(args) + "\\n")
second = "--kernel-name-base" in args and args[args.index("-k") + 1].startswith("regex:^(?:")
out = args[args.index("-o") + 1]
app = args[args.index("{python}"):]  # the command profiled: python train.py
code = subprocess.run(app, env={{**os.environ,
                                "NV_COMPUTE_PROFILER_PERFWORKS_DIR": "/fake"}}).returncode
if second and "{mode}" == "fail":
    print("==ERROR== the second pass failed")
    raise SystemExit(1)
print('==PROF== Profiling "kernel" - 0: 0%....50%....100% - 1 pass')
with lzma.open("{report}") as src, open(out + ".ncu-rep", "wb") as dst:
    shutil.copyfileobj(src, dst)
raise SystemExit(code)
"""

STEPS = """
import torch_nsight
for _ in range(14):
    with torch_nsight.step():
        pass
"""


def fake_ncu(tmp_path: Path, mode: str) -> Path:
    path = tmp_path / "ncu"
    path.write_text(FAKE_NCU.format(python=sys.executable, mode=mode, report=VIT,
                                    calls=tmp_path / "calls.jsonl"))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "train.py").write_text(STEPS)
    return path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "torch_nsight", "profile", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_second_pass_profiles_the_latency_targets_and_is_merged(tmp_path: Path) -> None:
    ncu = fake_ncu(tmp_path, "ok")
    proc = cli("--ncu", str(ncu), "--steps", "12:13", "--stalls", "--", sys.executable,
               "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first, second = calls(tmp_path)
    names = list(stall_targets(torch_nsight.load(VIT).kernels)["function"])
    assert second[second.index("-k") + 1] == kernel_filter(names)
    assert "-k" not in first
    out = tmp_path / "torch_nsight_profile"
    assert (out / "stalls" / "report.ncu-rep").is_file()
    assert f"second pass (--stalls): {len(names)} kernel names" in proc.stderr
    assert "warps wait on global memory" in " ".join(proc.stdout.split())  # named causes
    assert len(torch_nsight.load(out).meta.sources) == 1


@pytest.mark.slow
def test_a_failed_second_pass_loses_nothing_of_the_first(tmp_path: Path) -> None:
    ncu = fake_ncu(tmp_path, "fail")
    proc = cli("--ncu", str(ncu), "--steps", "12:13", "--stalls", "--", sys.executable,
               "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "the second pass (--stalls) gave nothing" in proc.stderr
    assert "the first pass's results are shown" in proc.stderr
    alone = cli("--ncu", str(ncu), "--steps", "12:13", "--force", "--", sys.executable,
                "train.py", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    assert proc.stdout == alone.stdout  # the same hotspot table as without --stalls
    assert len(calls(tmp_path)) == 3


@pytest.mark.slow
def test_a_new_first_pass_forgets_an_old_second_one(tmp_path: Path) -> None:
    ncu = fake_ncu(tmp_path, "ok")
    assert cli("--ncu", str(ncu), "--steps", "12:13", "--stalls", "--", sys.executable,
               "train.py", cwd=tmp_path).returncode == 0
    stalls = tmp_path / "torch_nsight_profile" / "stalls" / "report.ncu-rep"
    assert stalls.is_file()
    assert cli("--ncu", str(ncu), "--steps", "12:13", "--force", "--", sys.executable,
               "train.py", cwd=tmp_path).returncode == 0
    assert not stalls.exists()


@pytest.mark.slow
def test_the_dry_run_shows_the_second_command(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(STEPS)
    proc = cli("--dry-run", "-v", "--stalls", "--steps", "12:13", "--", sys.executable, "train.py",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first, rest = proc.stdout.split("\n# ", 1)
    second = joined_command(rest.split("(--stalls)", 1)[1].split("\n", 2)[2].split("\n# ")[0])
    words = shlex.split(second)
    assert words[:2] == ["TORCH_NSIGHT_STEPS=12:13", "TORCH_NSIGHT_REPLICATE=1"]
    assert words[words.index("-k") + 1] == "regex:^(?:NAMES)$"
    assert words[words.index("-o") + 1].endswith(os.path.join("stalls", "report"))
    assert "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio" in second
    assert "-k" not in shlex.split(joined_command(first))


def test_stalls_needs_steps_and_one_process(tmp_path: Path) -> None:
    proc = cli("--stalls", "--", sys.executable, "train.py", cwd=tmp_path)
    assert proc.returncode != 0 and "--stalls" in proc.stderr and "--steps" in proc.stderr
    proc = cli("--stalls", "--timeline", "--steps", "1:2", "--", sys.executable, "train.py",
               cwd=tmp_path)
    assert proc.returncode != 0 and "--timeline" in proc.stderr
    for shifting in (["--launch-skip", "3"], ["--ncu-arg=--launch-count=4"]):
        proc = cli("--stalls", "--steps", "1:2", *shifting, "--", sys.executable, "train.py",
                   cwd=tmp_path)
        assert proc.returncode != 0 and "shift" in proc.stderr


@pytest.mark.parametrize("spent, runs", [(96.0, False), (90.0, True)])
def test_the_second_pass_runs_in_what_is_left_of_the_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        spent: float, runs: bool) -> None:
    """``--timeout 100`` is one limit for both passes: after a first pass whose phases took
    96 s the second is refused (under ``MIN_PASS_S`` left), after 90 s it gets the 10 s left
    as its own limit. The first pass is the recorded ViT-S report."""
    from torch_nsight.cli import profile_stalls
    from torch_nsight.collect.parent import stall_pass
    from torch_nsight.collect.parent.script import ScriptRun, plan_script

    assert 100.0 - 96.0 < profile_stalls.MIN_PASS_S <= 100.0 - 90.0
    first = plan_script([sys.executable, "train.py"], tmp_path / "report.ncu-rep",
                        ncu="ncu", metric_set="fast", timeout=100.0)
    profile = torch_nsight.load(VIT)
    ran = ScriptRun(0, profile, {"phases_s": {"start-up": spent - 20.0, "profiling": 20.0}})
    given: list[float | None] = []

    def second(plan: object, shown: object, **options: object) -> object:
        given.append(plan.timeout)  # type: ignore[attr-defined]
        return stall_pass.StallPass(profile, (), 0, 0.0, 0, "not run in this test")

    monkeypatch.setattr(stall_pass, "run_stall_pass", second)
    with caplog.at_level("WARNING"):
        shown = profile_stalls.second_pass(first, ran, ncu="ncu", ncu_args=(), known=None,
                                           timeout=100.0)
    assert shown is profile
    assert given == ([pytest.approx(100.0 - spent)] if runs else [])
    assert ("no second pass (--stalls)" in caplog.text) is not runs
