"""Reports read in a recycled worker process (issue 45): the process that loads them never
imports NVIDIA's reader, whose memory grows by every report it opens; the worker is
replaced every few reports and after a crash, and what it reads equals what the reader
gives in this process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from torch_nsight.errors import ReportError
from torch_nsight.report import read_report, read_worker

DATA = Path(__file__).resolve().parents[1] / "data"
SMALL = DATA / "hand_s128.ncu-rep.xz"


@pytest.fixture
def copies(tmp_path: Path) -> list[Path]:
    """Five copies of a small recorded report, each read as a report of its own."""
    paths = [tmp_path / f"r{i}.ncu-rep.xz" for i in range(5)]
    for path in paths:
        shutil.copy(SMALL, path)
    return paths


def test_a_worker_reads_as_this_process_reads(copies: list[Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    worked, worked_meta = read_report(copies[0], cache=False)
    monkeypatch.setenv(read_worker.IN_PROCESS_ENV, "1")
    here, here_meta = read_report(copies[0], cache=False)
    pd.testing.assert_frame_equal(worked, here)
    assert worked_meta == here_meta
    assert worked_meta["kernels"] == len(worked) > 0


def test_the_worker_is_replaced_every_few_reports(copies: list[Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(read_worker.IN_PROCESS_ENV, raising=False)
    monkeypatch.setattr(read_worker, "REPORTS_PER_WORKER", 2)
    monkeypatch.setattr(read_worker, "WORKER_MAX_RSS", 1 << 62)
    read_worker.stop_worker()
    before = read_worker.workers_started()
    tables = [read_report(path, cache=False)[0] for path in copies]
    assert read_worker.workers_started() - before == 3  # 2 + 2 + 1
    assert {len(t) for t in tables} == {len(tables[0])}


def test_a_worker_that_dies_is_an_error_naming_the_report_then_replaced(
        copies: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(read_worker.IN_PROCESS_ENV, raising=False)
    # a worker this test starts and keeps: not replaced by a count earlier tests in this
    # process reached, nor by its memory
    monkeypatch.setattr(read_worker, "REPORTS_PER_WORKER", 1000)
    monkeypatch.setattr(read_worker, "WORKER_MAX_RSS", 1 << 62)
    read_worker.stop_worker()
    read_report(copies[0], cache=False)
    process = read_worker._WORKER._process
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    with pytest.raises(ReportError, match=r"reader crashed reading .*r1\.ncu-rep\.xz.*status"):
        read_report(copies[1], cache=False)
    assert len(read_report(copies[2], cache=False)[0]) > 0  # a new worker


def test_errors_of_the_worker_come_back_as_they_were_raised(tmp_path: Path) -> None:
    fake = tmp_path / "fake.ncu-rep"
    fake.write_bytes(b"not a report at all")
    with pytest.raises(ReportError, match="fake.ncu-rep"):
        read_report(fake, cache=False)


def test_loading_reports_leaves_nvidias_reader_out_of_the_process(copies: list[Path]) -> None:
    code = ("import sys, torch_nsight\n"
            "from torch_nsight.report import read_worker\n"
            f"for p in {[str(p) for p in copies[:3]]!r}:\n"
            "    torch_nsight.load(p, cache=False)\n"
            "print('ncu_report' in sys.modules, read_worker.workers_started())\n")
    env = {k: v for k, v in os.environ.items() if k != read_worker.IN_PROCESS_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["False", "1"]
