"""Text output fits a 120-column terminal and keeps every fix whole (real recorded profiles)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
SOURCES = ["hf_gpt2_fast", "sweep_stack", "findings_conv", "compile/vit_train.ncu-rep.xz",
           "timeline_train"]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("by", ["hotspot", "kernel", "shape", "finding"])
def test_report_lines_fit_120_columns(source: str, by: str, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["report", str(DATA / source), "--by", by, "--findings"]) == 0
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)


@pytest.mark.parametrize("source", SOURCES)
def test_findings_fit_and_keep_every_fix_whole(source: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["findings", str(DATA / source)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120
    flat = re.sub(r"\s+", " ", out)
    for fix in torch_nsight.load(DATA / source).findings().head(10)["fix"]:
        assert re.sub(r"\s+", " ", fix) in flat  # wrapped, not cut


def test_a_wide_terminal_gets_the_whole_table(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    main(["report", str(DATA / "hf_gpt2_fast")])
    out = capsys.readouterr().out
    assert "reason" in out and "% of roof" in out  # nothing dropped when there is room
