"""The tool speaks with one voice (issue 47): the library's log records as ``warning:`` /
``note:`` lines, a dry run that checked nothing fails, a step that calls ``sys.exit`` is an
exit status, and reading a trace raises no pandas warning."""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from torch_nsight.cli.text import LogFormatter

from .conftest import run_main

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize(("level", "line"), [
    (logging.WARNING, "warning: the report is partial"),
    (logging.INFO, "note: the report is partial"),
    (logging.DEBUG, "debug: torch_nsight.loading: the report is partial"),
])
def test_log_records_are_the_tools_own_lines(level: int, line: str) -> None:
    record = logging.LogRecord("torch_nsight.loading", level, __file__, 1,
                               "the report is %s", ("partial",), None)
    assert LogFormatter().format(record) == line


def test_a_dry_run_that_cannot_check_the_script_fails_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(["profile", "--dry-run", "--", "python", "missing.py"],
                                tmp_path, monkeypatch, capsys)
    assert status == 1 and out == ""
    assert err.count("\n") == 1 and "missing.py: no such file" in err
    (tmp_path / "present.py").write_text("")
    status, out, _ = run_main(["profile", "--dry-run", "--", "python", "present.py"],
                              tmp_path, monkeypatch, capsys)
    assert status == 0 and len(out.splitlines()) <= 10


@pytest.mark.slow
def test_sys_exit_in_a_chosen_step_is_an_exit_status(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exits.py").write_text(
        "import sys, torch_nsight\nfor i in range(5):\n    with torch_nsight.step():\n"
        "        if i == 2:\n            sys.exit(3)\n")
    status, _, err = run_main(["profile", "--dry-run", "--steps", "1:3", "--", sys.executable,
                               "exits.py"], tmp_path, monkeypatch, capsys)
    assert status == 1
    assert "exit status 3" in err and "raised" not in err


def test_a_trace_is_read_into_one_consolidated_frame() -> None:
    """pandas warns (PerformanceWarning) when a column is added to a frame of more than 100
    blocks, as the timeline reader then does: the kernel table is built whole instead."""
    from torch_nsight.report.trace import trace_tables

    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)
        frame, _, _ = trace_tables(DATA / "timeline_train" / "trace-0.json.gz",
                                   measured_only=True)
        frame["rank"] = 0
    assert frame._mgr.nblocks < 20  # one block per dtype, not one per column
