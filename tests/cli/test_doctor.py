"""``torch-nsight doctor``: the CPU machine's failure lines in real subprocesses, each check
with fake ``ncu`` / ``nvidia-smi`` scripts printing the real tools' messages, and (marked
``gpu``) the full run on a GPU machine."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from torch_nsight.cli.main import main
from torch_nsight.collect.parent import doctor
from torch_nsight.collect.shared import ncu as ncu_cli
from torch_nsight.environment import NCU_ENV

from .conftest import FIXTURE

NAMES = ["gpu", "driver", "ncu", "counters", "reader", "report", "nvtx", "nvtx_ranges",
         "pyarrow"]
# Real lines printed by ncu 2025.3.1 (see tests/collect/conftest.py and docs/GPU.md).
PERMISSION_LINE = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
    "Performance Counters on the target device 0. For instructions on enabling permissions "
    "and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
NOTHING_LINE = "==WARNING== No kernels were profiled."
PROFILING_LINE = ('==PROF== Profiling "vectorized_elementwise_kernel" - 0: 0%....50%....100% '
                  "- 1 pass")
CONNECTED_LINE = "==PROF== Connected to process 4242 (/usr/bin/python3.12)"
REPORT_LINE = "==PROF== Report: {report}.ncu-rep"

FAKE_NCU = '''#!{python}
"""A stand-in for ncu 2025.3.1: answers --version; otherwise prints the given lines and, when
asked, writes the recorded report where -o says (as the real one writes NAME.ncu-rep)."""
import lzma, shutil, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Copyright (c) 2018-2025 NVIDIA Corporation")
    print("Version {version} (build 36398880) (public-release)")
    sys.exit(0)
time.sleep({sleep})
report = args[args.index("-o") + 1]
for line in {lines!r}:
    print(line.format(report=report), flush=True)
if {write_report!r}:
    with lzma.open({fixture!r}) as source, open(report + ".ncu-rep", "wb") as target:
        shutil.copyfileobj(source, target)
sys.exit(0)
'''
FAKE_SMI = '''#!/bin/sh
echo "NVIDIA H200, 580.159.04"
'''


def write_fake_ncu(folder: Path, lines: Sequence[str] = (), *, version: str = "2025.3.1.0",
                   write_report: bool = False, sleep: float = 0) -> Path:
    """Write a fake ``ncu`` into ``folder`` (created) and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "ncu"
    script.write_text(FAKE_NCU.format(python=sys.executable, version=version, lines=list(lines),
                                      write_report=write_report, fixture=str(FIXTURE),
                                      sleep=sleep))
    script.chmod(0o755)
    return script


def write_fake_smi(folder: Path) -> Path:
    """Write a fake ``nvidia-smi`` (the real CSV answer of the GPU machine) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(FAKE_SMI)
    script.chmod(0o755)
    return script


def run_doctor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m torch_nsight doctor`` with no GPU visible and no ncu to be found."""
    empty = tmp_path / "empty bin"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": str(empty), "CUDA_VISIBLE_DEVICES": "",
           NCU_ENV: str(tmp_path / "no such folder" / "ncu")}
    return subprocess.run([sys.executable, "-m", "torch_nsight", "doctor", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def no_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No ncu anywhere: PATH empty, no $TORCH_NSIGHT_NCU, no default or usual install."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(NCU_ENV, raising=False)
    monkeypatch.setattr(ncu_cli, "DEFAULT_NCU", str(tmp_path / "missing" / "ncu"))
    monkeypatch.setattr(doctor, "USUAL_NCU_GLOBS", (str(tmp_path / "opt" / "*" / "ncu"),))
    return tmp_path


@pytest.fixture
def gpu_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch says a CUDA GPU is there."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")


# --- the whole command, in a subprocess, on a machine without GPU nor ncu ------------------

def test_no_gpu_fails_with_fixes_and_skips_later_checks(tmp_path: Path) -> None:
    result = run_doctor(tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert max(map(len, result.stdout.splitlines())) <= 120  # wrapped under its text
    lines: list[str] = []  # one check a line again
    for line in result.stdout.splitlines():
        if line.startswith("       "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    assert len(lines) == len(NAMES) + 1
    gpu, _driver, ncu, counters, reader, report, nvtx, ranges, pyarrow, verdict = lines
    assert gpu.startswith("[FAIL] no CUDA GPU visible to torch ")
    assert " — fix: " in gpu and ("CUDA_VISIBLE_DEVICES" in gpu or "CUDA build" in gpu)
    assert ncu.startswith(f"[FAIL] ${NCU_ENV}=")
    assert "is not an executable" in ncu
    assert ncu.endswith(f"— fix: point ${NCU_ENV} at the ncu binary "
                        "(e.g. /usr/local/cuda/bin/ncu) or unset it")
    for line in (counters, report, ranges):
        assert line.startswith("[skip] ") and line.endswith("(needs a GPU)")
    assert reader.startswith("[ ok ] report reader ncu_report ")
    assert nvtx.startswith("[ ok ] nvtx ")
    assert pyarrow.startswith("[ ok ] pyarrow ")
    assert verdict.startswith("profiling cannot work here: ")
    assert_names_what_works(verdict)


def assert_names_what_works(verdict: str) -> None:
    """The verdict of a machine that cannot profile names what still works there, each a
    subcommand and option the command line has."""
    from torch_nsight.cli.main import build_parser

    named = re.findall(r"torch-nsight ([a-z]+)( --[a-z-]+)?", verdict.partition("works")[2])
    assert {command for command, _ in named} >= {"demo", "report", "findings", "profile"}
    assert "--timeline" in verdict
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction)).choices
    for command, option in named:
        assert command in commands
        if option:
            assert option.strip() in commands[command]._option_string_actions, (command, option)


def test_json_is_parseable(tmp_path: Path) -> None:
    result = run_doctor(tmp_path, "--format", "json")
    assert result.returncode == 1, result.stderr
    answer = json.loads(result.stdout)
    assert answer["ok"] is False
    assert [c["name"] for c in answer["checks"]] == NAMES
    status = {c["name"]: c["status"] for c in answer["checks"]}
    assert status["gpu"] == status["ncu"] == "fail"
    assert status["counters"] == status["report"] == status["nvtx_ranges"] == "skip"
    gpu = answer["checks"][0]
    assert gpu["fix"] and gpu["data"]["torch"]


def test_loading_the_cli_imports_no_check(tmp_path: Path) -> None:
    from torch_nsight.cli import doctor as command

    assert command.DEFAULT_TIMEOUT_S == doctor.DEFAULT_TIMEOUT_S
    code = ("import sys, torch_nsight.cli.main\n"
            "print([m for m in ('torch', 'torch_nsight.collect') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_bad_timeout_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["doctor", "--timeout", "0"])
    assert exit_info.value.code == 2


# --- each check -------------------------------------------------------------------------

def test_gpu_check(gpu_visible: None) -> None:
    result = doctor.check_gpu()
    assert result.status == "ok"
    assert result.detail.startswith("CUDA GPU NVIDIA H200 visible to torch ")


def test_gpu_check_fails_with_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = doctor.check_gpu()
    assert result.status == "fail" and "no CUDA GPU visible" in result.detail
    assert result.fix


def test_driver_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(write_fake_smi(tmp_path / "bin").parent))
    result = doctor.check_driver()
    assert result.status == "ok"
    assert result.detail == "NVIDIA driver 580.159.04 (1 GPU(s): NVIDIA H200)"


def test_no_driver(no_ncu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "LIBCUDA", "libno-such-cuda.so.1")
    result = doctor.check_driver()
    assert result.status == "fail"
    assert "nvidia-smi is not on PATH" in result.detail
    assert "nvidia-smi" in result.fix and "--gpus all" in result.fix


def test_ncu_found_with_its_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = write_fake_ncu(tmp_path / "cuda bin")
    monkeypatch.setenv(NCU_ENV, str(script))
    result = doctor.check_ncu()
    assert result.status == "ok"
    assert result.detail == f"ncu 2025.3.1 at {script}"
    assert result.data == {"path": str(script), "version": "2025.3.1"}


def test_ncu_too_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NCU_ENV, str(write_fake_ncu(tmp_path / "b", version="2019.5.0.0")))
    result = doctor.check_ncu()
    assert result.status == "fail" and "ncu 2019.5.0" in result.detail
    assert "older than 2023.1.0" in result.detail and "2023.1.0 or newer" in result.fix


def test_ncu_missing(no_ncu: Path) -> None:
    result = doctor.check_ncu()
    assert result.status == "fail"
    assert result.detail.startswith("Nsight Compute (ncu) not found on PATH")
    assert "CUDA toolkit" in result.fix and NCU_ENV in result.fix


def test_ncu_in_a_usual_folder(no_ncu: Path) -> None:
    script = write_fake_ncu(no_ncu / "opt" / "2025.3.1")
    result = doctor.check_ncu()
    assert result.status == "fail"
    assert result.fix == f"found {script}: export {NCU_ENV}={script}"


def test_tiny_command() -> None:
    cmd = doctor.build_tiny_command("/usr/local/cuda/bin/ncu", "/tmp/d/doctor")
    assert cmd[:6] == ["/usr/local/cuda/bin/ncu", "--clock-control", "none",
                       "--target-processes", "application-only", "--nvtx"]
    assert cmd[cmd.index("-o") + 1] == "/tmp/d/doctor"
    assert cmd[-3:] == [sys.executable, "-c", doctor.TINY_KERNEL_SCRIPT]
    compile(doctor.TINY_KERNEL_SCRIPT, "<doctor>", "exec")


def test_counter_permission_denied(tmp_path: Path) -> None:
    script = write_fake_ncu(tmp_path / "b", [CONNECTED_LINE, PERMISSION_LINE])
    result = doctor.check_counters(str(script), tmp_path / "doctor")
    assert result.status == "fail"
    assert "ERR_NVGPUCTRPERM" in result.detail
    for remedy in ("root", "NVreg_RestrictProfilingToAdminUsers=0", "--cap-add SYS_ADMIN"):
        assert remedy in result.fix


def test_nothing_profiled(tmp_path: Path) -> None:
    script = write_fake_ncu(tmp_path / "b", [CONNECTED_LINE, NOTHING_LINE])
    result = doctor.check_counters(str(script), tmp_path / "doctor")
    assert result.status == "fail"
    assert "profiled no kernel" in result.detail and "No kernels were profiled" in result.detail


def test_profiling_times_out(tmp_path: Path) -> None:
    script = write_fake_ncu(tmp_path / "b", sleep=60)
    result = doctor.check_counters(str(script), tmp_path / "doctor", timeout=0.5)
    assert result.status == "fail" and "within 0.5 s" in result.detail
    assert "--timeout" in result.fix


def test_counters_readable(tmp_path: Path) -> None:
    script = write_fake_ncu(tmp_path / "b", [CONNECTED_LINE, PROFILING_LINE, REPORT_LINE],
                            write_report=True)
    result = doctor.check_counters(str(script), tmp_path / "doctor")
    assert result.status == "ok", result
    assert result.data == {"report": str(tmp_path / "doctor.ncu-rep"), "kernels": 1}


def test_report_opens() -> None:
    result = doctor.check_report(FIXTURE)
    assert result.status == "ok"
    assert result.detail == ("ncu_report opened the report (40 kernel(s), written by ncu "
                             "2025.3.1)")


def test_not_a_report(tmp_path: Path) -> None:
    bogus = tmp_path / "doctor.ncu-rep"
    bogus.write_text("not a report\n")
    result = doctor.check_report(bogus)
    assert result.status == "fail" and "not an Nsight Compute report" in result.detail


def test_nvtx_ranges(tmp_path: Path) -> None:
    result = doctor.check_nvtx_ranges(FIXTURE, "self_attn")
    assert result.status == "ok" and "inside torch_nsight@self_attn" in result.detail
    missing = doctor.check_nvtx_ranges(FIXTURE, doctor.DOCTOR_RANGE)
    assert missing.status == "fail" and "torch_nsight@doctor" in missing.detail
    assert "--nvtx" in missing.fix


@pytest.mark.parametrize(("check", "module", "fix"), [
    (doctor.check_reader, "ncu_report", "pip install ncu-report"),
    (doctor.check_nvtx, "nvtx", "pip install nvtx"),
    (doctor.check_pyarrow, "pyarrow", "pip install pyarrow"),
])
def test_packages(check, module: str, fix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert check().status == "ok"
    monkeypatch.setitem(sys.modules, module, None)  # the next import raises ImportError
    result = check()
    assert result.status == "fail" and result.fix == fix


def test_a_crashing_check_is_a_failed_line(monkeypatch: pytest.MonkeyPatch, no_ncu: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    def broken() -> doctor.CheckResult:
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor, "check_pyarrow", broken)
    assert main(["doctor"]) == 1
    last_check = [line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("[")][-1]  # (the verdict after it wraps)
    assert last_check.startswith("[FAIL] the pyarrow check itself failed (RuntimeError: boom)")


# --- every check passing, with fakes --------------------------------------------------------

def test_everything_ok_exits_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               gpu_visible: None, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "bin"
    write_fake_smi(folder)
    write_fake_ncu(folder, [CONNECTED_LINE, PROFILING_LINE, REPORT_LINE], write_report=True)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.delenv(NCU_ENV, raising=False)
    # The recorded report has no `doctor` range: look for one of its module ranges instead.
    monkeypatch.setattr(doctor, "DOCTOR_RANGE", "self_attn")
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("[ ok ] ") for line in lines[:-1]), lines
    assert lines[2] == f"[ ok ] ncu 2025.3.1 at {folder / 'ncu'}"
    assert lines[-1] == "profiling can work here"


# --- on a GPU machine -------------------------------------------------------------------------

@pytest.mark.gpu
def test_doctor_on_a_gpu_machine(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "torch_nsight", "doctor"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600, check=False)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(NAMES) + 1
    assert all(line.startswith("[ ok ] ") for line in lines[:-1]), result.stdout
