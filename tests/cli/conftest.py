"""What the CLI tests share: the demo's recorded report, copied where its cache may land."""

from __future__ import annotations

import shutil
from pathlib import Path

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
