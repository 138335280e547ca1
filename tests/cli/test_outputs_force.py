"""Nothing is overwritten without --force (issue 47): every file a command writes into its
output folder counts, not only its manifest or report; a folder holding only other files
stays usable; two outputs of one command named alike are refused. Each refusal is one line,
before any work."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import torch_nsight
import torch_nsight.collect.timeline as timelines
from torch_nsight import formats
from torch_nsight.cli.outputs import OutputExistsError, UsageError, check_out_files, check_outputs

from .conftest import run_main
from .test_profile_command import fake_ncu

ROOT = Path(__file__).resolve().parents[2]
SAVED = ROOT / "tests" / "data" / "profile_format1.parquet"
MODEL = """import torch
def make():
    return torch.nn.Sequential(torch.nn.Linear(8, 8))
"""


def refused(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> str:
    """The one line of a command refused with exit status 1."""
    status, _, err = run_main(argv, cwd, monkeypatch, capsys)
    assert status == 1
    (line,) = err.strip().splitlines()
    return line


def test_a_timeline_keeps_a_users_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "tl").mkdir()
    (tmp_path / "tl" / "trace-0.json.gz").write_text("mine")
    line = refused(["timeline", "m.py:make", "--shapes", "2x8", "--out", "tl"], tmp_path,
                   monkeypatch, capsys)
    assert line == ("torch-nsight: error: tl already holds trace-0.json.gz; pass --force to "
                    "overwrite, or another --out")
    assert (tmp_path / "tl" / "trace-0.json.gz").read_text() == "mine"
    # a folder holding only files a timeline never writes is used as it is
    (tmp_path / "tl" / "trace-0.json.gz").rename(tmp_path / "tl" / "notes.json.gz")
    recorded = torch_nsight.load(ROOT / "tests" / "data" / "timeline_train")
    monkeypatch.setattr(timelines, "timeline", lambda *_, **__: recorded)
    status, _, err = run_main(["timeline", "m.py:make", "--shapes", "2x8", "--out", "tl"],
                              tmp_path, monkeypatch, capsys)
    assert status == 0, err


def test_a_profile_keeps_an_earlier_runs_log_and_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    ncu = fake_ncu(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    for name in ("report.log", "report.run.json"):  # no report.ncu-rep beside them
        (out / name).write_text("earlier")
    line = refused(["profile", "--ncu", str(ncu), "--out", "out", "--", sys.executable,
                    "-c", "pass"], tmp_path, monkeypatch, capsys)
    assert line == ("torch-nsight: error: out already holds report.log, report.run.json; "
                    "pass --force to overwrite, or another --out")
    assert [(out / n).read_text() for n in ("report.log", "report.run.json")] == ["earlier"] * 2
    # what a run writes, replaces or removes, its second pass's and launch list's too
    (out / "report.log").unlink()
    (out / "report.run.json").unlink()
    (out / "notes.log").write_text("mine")
    written = formats.run_files(out / "report.ncu-rep")
    check_out_files(out, written, force=False)
    for name in ("stalls/report.ncu-rep", "launches/trace.json.gz"):
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_text("earlier")
        with pytest.raises(OutputExistsError, match=name):
            check_out_files(out, written, force=False)
        (out / name).unlink()


def test_a_dry_run_sweep_keeps_an_earlier_runs_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "sw").mkdir()
    for name in (formats.PROFILE_FILE, "job.json"):  # its manifest gone, or never written
        (tmp_path / "sw" / name).write_text("earlier")
    line = refused(["sweep", "m.py:make", "--shapes", "2x8", "--dry-run", "--out", "sw"],
                   tmp_path, monkeypatch, capsys)
    assert line == ("torch-nsight: error: sw already holds job.json, profile.parquet; pass "
                    "--force to overwrite, or another --out")
    assert (tmp_path / "sw" / formats.PROFILE_FILE).read_text() == "earlier"
    # each child's files count, per chosen GPU; a focused sweep's timeline folder too
    (tmp_path / "sw" / "job.json").unlink()
    (tmp_path / "sw" / "profile.parquet").rename(tmp_path / "sw" / "sweep-gpu1.log")
    line = refused(["sweep", "m.py:make", "--shapes", "2x8", "--devices", "0,1", "--out",
                    "sw"], tmp_path, monkeypatch, capsys)
    assert "sw already holds sweep-gpu1.log;" in line
    (tmp_path / "sw" / "sweep-gpu1.log").unlink()
    (tmp_path / "sw" / formats.FOCUS_FOLDER).mkdir()
    line = refused(["sweep", "m.py:make", "--shapes", "2x8", "--focus", "0.9", "--out",
                    "sw"], tmp_path, monkeypatch, capsys)
    assert f"sw already holds {formats.FOCUS_FOLDER};" in line


def test_two_outputs_named_alike_are_refused_before_any_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(SAVED, tmp_path / SAVED.name)
    line = refused(["report", SAVED.name, "--plot", "x.png", "--plot-scaling", "./x.png"],
                   tmp_path, monkeypatch, capsys)
    assert line == ("torch-nsight: error: x.png: named for two outputs of this command; "
                    "give each output its own file")
    assert sorted(p.name for p in tmp_path.iterdir()) == [SAVED.name]
    with pytest.raises(UsageError, match="two outputs"):  # even with --force
        check_outputs([tmp_path / "a.csv", None, tmp_path / "d" / ".." / "a.csv"], force=True)
