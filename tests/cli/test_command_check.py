"""``profile --dry-run`` without ``--steps`` checks the script of the ways a PyTorch script is
started, through the real command line in a fresh process (issue 47): ``torchrun [options]
X.py``, ``python -m torch.distributed.run [options] X.py`` and ``python -m MODULE``; what is
missing is one line naming it, and what is there passes."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_CHECKED = "the dry run could not check the command"


def dry_run(*command: str, cwd: Path) -> tuple[int, str, str]:
    """``python -m torch_nsight profile --dry-run -- COMMAND`` from ``cwd``: exit status,
    standard output and error."""
    done = subprocess.run(
        [sys.executable, "-m", "torch_nsight", "profile", "--dry-run", "--", *command],
        capture_output=True, text=True, cwd=cwd, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done.returncode, done.stdout, done.stderr


def assert_refused(result: tuple[int, str, str], *named: str) -> None:
    """Exit status 1, nothing on standard output, one line on standard error naming
    ``named``."""
    status, out, err = result
    assert status == 1 and out == "", err
    (line,) = err.strip().splitlines()
    assert line.startswith("torch-nsight: error:") and NOT_CHECKED in line
    assert all(word in line for word in named), line


def assert_passed(result: tuple[int, str, str]) -> None:
    status, out, err = result
    assert status == 0, err
    assert out.startswith("# dry run: ncu would profile")


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_torchrun_options_then_its_script(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    # options with a value (as the next word, after "=", attached) and without one
    options = ["--nproc-per-node", "2", "--standalone", "--rdzv_backend=c10d", "-r3",
               "--max-restarts", "0"]
    assert_refused(dry_run("torchrun", *options, "missing.py", "--lr", "3e-4", cwd=tmp_path),
                   "missing.py: no such file")
    assert_passed(dry_run("torchrun", *options, "train.py", "--lr", "3e-4", cwd=tmp_path))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_python_m_torch_distributed_run_then_its_script(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
                "--nproc_per_node=2", "--standalone"]
    assert_refused(dry_run(*launcher, "missing.py", "data.txt", cwd=tmp_path),
                   "missing.py: no such file")
    assert_passed(dry_run(*launcher, "train.py", "data.txt", cwd=tmp_path))


def test_python_m_a_module_found_without_importing_it(tmp_path: Path) -> None:
    """The module is looked for as ``-m`` would from the command's folder, and its package's
    ``__init__`` (user code) is not run: this one would exit with status 5."""
    package = tmp_path / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("raise SystemExit(5)\n")
    (package / "main.py").write_text("")
    assert_refused(dry_run(sys.executable, "-m", "trainer.missing", cwd=tmp_path),
                   "trainer.missing: no such module")
    assert_refused(dry_run(sys.executable, "-u", "-m", "no_such_module_here", "--lr", "3",
                           cwd=tmp_path), "no_such_module_here: no such module")
    assert_passed(dry_run(sys.executable, "-m", "trainer.main", "--lr", "3", cwd=tmp_path))


def test_a_script_given_without_its_interpreter_is_told_to_add_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``profile --steps 2:3 train.py`` (no ``--``, no ``python``): the rehearsal cannot start
    ``train.py``, and the line says how to run it; an empty ``--command`` is named."""
    from .conftest import run_main

    (tmp_path / "train.py").write_text("print('trained')\n")
    status, _, err = run_main(["profile", "--dry-run", "--steps", "2:3", "train.py",
                               "--lr", "3"], tmp_path, monkeypatch, capsys)
    assert status == 1
    assert err.strip().endswith(
        "could not start train.py: to run a Python script, put the interpreter first: "
        "-- python train.py --lr 3"), err
    report = str(ROOT / "tests" / "data" / "convnet_fwd.ncu-rep.xz")
    status, _, err = run_main(["findings", report, "--verify", "--command", " ", "--steps",
                               "2:4"], tmp_path, monkeypatch, capsys)
    assert status == 1 and "--command is empty" in err and "Traceback" not in err
