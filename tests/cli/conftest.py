"""What the CLI tests share: the demo's recorded report, copied where its cache may land;
the command line run in this process or in a fresh one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import torch_nsight.demo
from torch_nsight.cli.main import main

#: The demo's recorded report, shipped in the package (torch_nsight/demo/).
PACKAGED = Path(torch_nsight.demo.__file__).parent
FIXTURE = PACKAGED / torch_nsight.demo.RECORDED_REPORT


@pytest.fixture
def report(tmp_path: Path) -> Path:
    """The recorded report, copied so that its cache lands in tmp, not in the package."""
    target = tmp_path / FIXTURE.name
    shutil.copy(FIXTURE, target)
    return target


def run_main(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``torch-nsight ARGV`` in this process, from ``cwd``: exit status, stdout, stderr (for
    checks that need no fresh interpreter: seconds saved a test)."""
    monkeypatch.chdir(cwd)
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


#: What the commands that read or launch keep out of their own process where they can.
HEAVY = ("torch", "torch_nsight.capture", "torch_nsight.collect", "matplotlib", "pandas")


def imported_after(argv: list[str], cwd: Path) -> dict[str, Any]:
    """Run ``main(argv)`` in a fresh interpreter; return its exit status, which of
    :data:`HEAVY` it imported, its process id and what it wrote (``out``, ``err``)."""
    code = ("import json, os, sys\n"
            "from torch_nsight.cli.main import main\n"
            "try:\n"
            f"    status = main({argv!r})\n"
            "except SystemExit as done:\n"
            "    status = done.code\n"
            "sys.stdout.flush()\n"
            f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
            "print('@@' + json.dumps({'status': status, 'heavy': heavy, 'pid': os.getpid()}))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    out, found = result.stdout.rsplit("@@", 1)
    return {**json.loads(found), "out": out, "err": result.stderr}

