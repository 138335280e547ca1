"""A gate that cannot lie (issue 45): ``compare`` reads both sides strictly, so a damaged
side, a report cut short or a trace with events left out, is an error naming the side
(exit 1, one line), never a run that looks faster. Before, a current report cut at half
its size exited 0 with "improved -95.6%". The damaged files are the recorded report
tests/data/hand_s128.ncu-rep.xz cut short, and the graph-captured trace with one kernel's
duration made negative."""

from __future__ import annotations

import gzip
import json
import logging
import lzma
import shutil
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.environment import CACHE_DIR_ENV
from torch_nsight.errors import ReportError

from .conftest import run_main

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The recorded report (whole) and the same report cut at half its size."""
    folder = tmp_path_factory.mktemp("damaged")
    raw = lzma.decompress((DATA / "hand_s128.ncu-rep.xz").read_bytes())
    whole, cut = folder / "main.ncu-rep", folder / "branch.ncu-rep"
    whole.write_bytes(raw)
    cut.write_bytes(raw[: len(raw) // 2])
    return whole, cut


def _one_line(err: str) -> str:
    (line,) = err.strip().splitlines()
    return line


@pytest.mark.parametrize("side", ["current", "baseline"])
def test_a_damaged_side_is_an_error_naming_it(
        reports: tuple[Path, Path], side: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    whole, cut = reports
    pair = [whole, cut] if side == "current" else [cut, whole]
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "caches"))
    status, out, err = run_main(["compare", *map(str, pair)], tmp_path, monkeypatch, capsys)
    assert status == 1 and out == ""
    line = _one_line(err)
    assert line.startswith(f"torch-nsight: error: the {side} profile ({side.upper()}) "
                           f"cannot be compared: {cut.name} is damaged (cut short?)")
    assert "record it again" in line


def test_a_damaged_report_read_before_is_refused_from_its_cache(
        reports: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    whole, cut = reports
    caches = tmp_path / "caches"
    monkeypatch.setenv(CACHE_DIR_ENV, str(caches))
    assert len(torch_nsight.load(cut).kernels) > 0  # read, with a warning, and cached
    assert len(list(caches.iterdir())) == 1
    status, _, err = run_main(["compare", str(whole), str(cut)], tmp_path, monkeypatch,
                              capsys)
    assert status == 1 and "the current profile (CURRENT)" in _one_line(err)


def test_report_still_reads_a_damaged_file_with_a_warning(
        reports: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, cut = reports
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        profile = torch_nsight.load(cut, cache_dir=tmp_path)
    assert len(profile.kernels) > 0
    assert any("is damaged (cut short?)" in r.getMessage() for r in caplog.records)
    with pytest.raises(ReportError, match="is damaged .* record it again"):
        torch_nsight.load(cut, cache_dir=tmp_path, strict=True)


def test_a_trace_with_events_left_out_is_refused_by_compare(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    source = DATA / "graph_captured_timeline" / "trace.json.gz"
    baseline = tmp_path / "main.json.gz"
    shutil.copy(source, baseline)
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    kernel = next(e for e in document["traceEvents"] if e.get("cat") == "kernel")
    kernel["dur"] = -5
    current = tmp_path / "branch.json"
    current.write_text(json.dumps(document))
    status, out, err = run_main(["compare", str(baseline), str(current)], tmp_path,
                                monkeypatch, capsys)
    assert status == 1 and out == ""
    line = _one_line(err)
    assert "the current profile (CURRENT) cannot be compared" in line
    assert "1 kernel events with invalid" in line and "left out" in line
