"""Text output fits a 120-column terminal and keeps every fix whole (real recorded profiles)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import torch_nsight
from tests.golden import findings_computed_once
from torch_nsight.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
SOURCES = ["hf_gpt2_fast", "sweep_stack", "findings_conv", "compile/vit_train.ncu-rep.xz",
           "timeline_train"]


@pytest.fixture(autouse=True, scope="module")
def _findings_computed_once_per_source() -> Iterator[None]:
    """Each source's findings computed once for this module's tests (several seconds a
    source); each test still loads its source and renders through the command line."""
    with findings_computed_once():
        yield


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("by", ["hotspot", "kernel_name", "shape", "finding"])
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


def test_a_trace_says_its_advice_once_and_drops_empty_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace has no counters: every hotspot's next step is the same advice and its bound
    and headroom are empty; the table says the advice once and gives the names the room."""
    from torch_nsight.render.table_output import render_table

    monkeypatch.setenv("COLUMNS", "120")
    profile = torch_nsight.load(DATA / "timeline_train")
    advice = set(profile.hotspots()["next_step"])
    assert len(advice) == 1  # the recorded trace's rows share one advice
    text = render_table(profile, "hotspots")
    flat = re.sub(r"\s+", " ", text)
    assert flat.count("no counters") == 1 and re.sub(r"\s+", " ", advice.pop()) in flat
    header = text.splitlines()[0]
    assert "next step" not in header and "bound" not in header and "headroom" not in header
    assert "h.{0-11}.mlp.c_proj ×12" in text  # module names whole now
    raw = render_table(torch_nsight.load(DATA / "hf_gpt2_fast"), "hotspots")
    # a report's rows keep their own advice: beside them, or under each where it would
    # otherwise wrap narrower than 30 columns
    assert "next step" in raw.splitlines()[0] or \
        sum(line.lstrip().startswith("next step: ") for line in raw.splitlines()) == 10
