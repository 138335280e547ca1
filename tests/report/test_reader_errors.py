"""Files that are not readable reports fail with ReportError and a message saying what to do."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest

from torch_nsight.errors import ReportError
from torch_nsight.report import read_report


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="does not exist"):
        read_report(tmp_path / "absent.ncu-rep")


def test_file_that_is_not_a_report(tmp_path: Path) -> None:
    # the reader itself raises nothing here and reports zero ranges
    path = tmp_path / "notes.ncu-rep"
    path.write_text("not a report\n")
    with pytest.raises(ReportError, match="not an Nsight Compute report"):
        read_report(path, cache=False)


def test_xz_that_is_not_a_report(tmp_path: Path) -> None:
    path = tmp_path / "notes.ncu-rep.xz"
    with lzma.open(path, "wb") as handle:
        handle.write(b"not a report\n")
    with pytest.raises(ReportError, match="not an Nsight Compute report"):
        read_report(path, cache=False)


def test_damaged_xz(tmp_path: Path) -> None:
    path = tmp_path / "broken.ncu-rep.xz"
    path.write_bytes(b"\xfd7zXZ\x00garbage")
    with pytest.raises(ReportError, match="not a valid xz file"):
        read_report(path, cache=False)
