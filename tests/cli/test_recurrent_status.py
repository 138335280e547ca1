"""``profile``'s probe for cuDNN recurrent layers, read from files the parent does not write:
the script's ``recurrent`` status line and the last run's manifest in the --out folder. Their
names are the script's to write: odd ones are left out, many are folded, none crashes the
command (a fake ncu that copies a report recorded on an H200, tests/data/hand_s128)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

#: The probe's stand-in (the CPU has no cuDNN layer) whose status line says ``MODULES``.
ODD = """
import json, os, torch, torch_nsight
from torch import nn
import torch_nsight.capture.script.recurrent as recurrent
import torch_nsight.status as status
recurrent.recurrent_layers = lambda: ["lstm"]
emit = status.StatusWriter.emit
def odd(self, event, **fields):
    if event == "recurrent":
        fields["modules"] = json.loads(os.environ["MODULES"])
    emit(self, event, **fields)
status.StatusWriter.emit = odd
model = nn.Sequential(nn.Linear(4, 4))
torch_nsight.instrument(model, record_calls=False)
for _ in range(4):
    with torch_nsight.step():
        model(torch.randn(2, 4)).sum().backward()
"""

#: A script without a recurrent layer: only the manifest's memo names one.
PLAIN = """
import torch, torch_nsight
from torch import nn
model = nn.Sequential(nn.Linear(4, 4))
torch_nsight.instrument(model, record_calls=False)
for _ in range(4):
    with torch_nsight.step():
        model(torch.randn(2, 4)).sum().backward()
"""

MANY = [f"encoder.{i}.lstm" for i in range(40)]


def test_the_names_are_folded_and_cut() -> None:
    from torch_nsight.cli.profile_launches import said_modules

    assert said_modules(MANY) == "encoder.{0-39}.lstm"
    assert said_modules([]) == "unnamed"
    assert said_modules([*"abcdefgh"]) == "a, b, c, d, e, f and 2 more"


def _said(proc: object) -> str:
    out = getattr(proc, "stdout", "") + getattr(proc, "stderr", "")
    lines = [line for line in out.splitlines() if line.startswith("#")]
    return " ".join(line.lstrip("# ") for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("modules", [5, [*MANY, 5, {"x": 1}, None, ["n"]]])
def test_an_odd_status_line_is_read_without_a_crash(tmp_path: Path, modules: object) -> None:
    from .test_profile_command import cli, fake_ncu

    (tmp_path / "odd.py").write_text(ODD)
    proc = cli("--ncu", str(fake_ncu(tmp_path)), "--steps", "2:3", "--", sys.executable,
               "odd.py", cwd=tmp_path, env={"MODULES": json.dumps(modules)})
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert "cuDNN recurrent layers (" in said, said
    assert ("encoder.{0-39}.lstm)" if isinstance(modules, list) else "(unnamed)") in said, said
    assert "{'x'" not in said and "None" not in said


@pytest.mark.slow
def test_an_odd_memo_in_the_last_manifest_names_no_junk(tmp_path: Path) -> None:
    from .test_profile_command import cli, fake_ncu

    (tmp_path / "plain.py").write_text(PLAIN)
    out = tmp_path / "out"
    out.mkdir()
    memo = {"command": [sys.executable, "plain.py"],
            "replicated_launches": {"recurrent": [*MANY, 5, {"x": 1}, None]}}
    (out / "report.run.json").write_text(json.dumps(memo))
    proc = cli("--ncu", str(fake_ncu(tmp_path)), "--steps", "2:3", "--out", "out", "--force",
               "--", sys.executable, "plain.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = _said(proc)
    assert "cuDNN recurrent layers (encoder.{0-39}.lstm), found by this command's last run" \
        in said, said


#: The probe's stand-in whose later runs raise in their first step: the launch list fails.
FAILS = """
import torch, torch_nsight
import torch_nsight.capture.script.recurrent as recurrent
recurrent.recurrent_layers = lambda: ["lstm"]
model = torch.nn.Linear(4, 4)  # kept: the probe looks once a module is instrumented
torch_nsight.instrument(model, record_calls=False)
with torch_nsight.step():
    raise RuntimeError("the first step fails")
"""


@pytest.mark.slow
def test_a_failed_automatic_launch_list_gives_no_advice_on_an_option_not_given(
        tmp_path: Path) -> None:
    from .test_profile_command import cli, fake_ncu

    (tmp_path / "fails.py").write_text(FAILS)
    proc = cli("--ncu", str(fake_ncu(tmp_path)), "--steps", "2:3", "--", sys.executable,
               "fails.py", cwd=tmp_path)
    said = " ".join(proc.stderr.split())  # lines unwrapped
    assert ("warning: the launch list for the cuDNN recurrent layers: the command recorded no "
            "launch list without ncu (exit status 1); profiling every launch instead") in said, said
    assert "run it without" not in proc.stderr and "--replicate-launches:" not in proc.stderr
    assert not (tmp_path / "torch_nsight_profile" / "launches").exists()  # nothing left


@pytest.mark.slow
def test_a_dry_run_reads_an_odd_status_line(tmp_path: Path) -> None:
    from .test_profile_command import cli

    (tmp_path / "odd.py").write_text(ODD)
    proc = cli("--dry-run", "--steps", "2:3", "--", sys.executable, "odd.py", cwd=tmp_path,
               env={"MODULES": "5"})
    assert proc.returncode == 0, proc.stderr
    assert "cuDNN recurrent layers (unnamed)" in _said(proc), _said(proc)
