"""The command line, in real subprocesses (``torch-nsight`` and ``python -m torch_nsight``)
and in-process through ``main(argv)``."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
import torch_nsight.demo
from tests.recorded import load_recorded
from torch_nsight.cli.main import build_parser, main

from .conftest import run_main

PACKAGED = Path(torch_nsight.demo.__file__).parent
FIXTURE = PACKAGED / torch_nsight.demo.RECORDED_REPORT
DATA = Path(__file__).resolve().parents[1] / "data"
LAUNCHERS = {
    "console-script": [shutil.which("torch-nsight") or "torch-nsight"],
    "python-m": [sys.executable, "-m", "torch_nsight"],
}


def run_cli(launcher: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    if launcher == "console-script" and shutil.which("torch-nsight") is None:
        pytest.skip("torch-nsight is not on PATH (pip install -e .)")
    return subprocess.run([*LAUNCHERS[launcher], *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.slow
def test_report_in_a_subprocess(launcher: str, report: Path, tmp_path: Path) -> None:
    result = run_cli(launcher, "report", report, "-n", "3", "--csv", "hot.csv",
                     "--plot", "roof.png", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == ("NVIDIA H200: 40 kernels, shapes 1x512; 92% of GPU time inside "
                        "module ranges")
    assert lines[2].split()[:4] == ["#", "module", "dir", "kernel"]
    assert lines[3].split()[:3] == ["1", "self_attn", "bwd"]
    assert "wrote hot.csv" in lines and "wrote roof.png" in lines
    assert len(pd.read_csv(tmp_path / "hot.csv")) == 3
    assert (tmp_path / "roof.png").read_bytes().startswith(b"\x89PNG")
    assert "Traceback" not in result.stderr


def test_not_a_report_is_one_line(tmp_path: Path) -> None:
    # each launcher is tried on a whole report above; one is enough for the other checks
    bogus = tmp_path / "notes.ncu-rep"
    bogus.write_text("not a report\n")
    result = run_cli("console-script", "report", bogus, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("torch-nsight: error: ")
    assert "not an Nsight Compute report" in line


def test_refuses_to_overwrite_without_force(report: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    existing = tmp_path / "modules.json"
    existing.write_text("keep me")
    status, _, err = run_main(["report", str(report), "--by", "module", "--json",
                               str(existing)], tmp_path, monkeypatch, capsys)
    assert status == 1
    assert err.splitlines() == [
        f"torch-nsight: error: {existing} already exists; pass --force to overwrite"]
    assert existing.read_text() == "keep me"
    assert main(["report", str(report), "--by", "module", "--json", str(existing),
                 "--force"]) == 0
    assert existing.read_text().startswith("[")


def test_demo_reads_the_recorded_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in PACKAGED.iterdir()
              if p.is_file()}
    status, out, err = run_main(["demo", "--recorded", "--out", str(tmp_path / "demo"),
                                 "--by", "module"], tmp_path, monkeypatch, capsys)
    assert status == 0, err
    assert "reading the recorded report" in err
    assert "· self_attn" in out
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == [
        "modules.csv", "roofline.png", "scaling.png"]
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in PACKAGED.iterdir()
             if p.is_file()}
    assert after == before, "the demo must not write beside its recorded report"


def test_the_readme_shows_what_the_demo_prints(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### What the demo prints", 1)[1]
    shown = section.split("```\n", 2)[1]
    monkeypatch.setenv("COLUMNS", "100")  # the command the README names
    status, out, err = run_main(["demo", "--recorded", "--top", "5"], tmp_path, monkeypatch,
                                capsys)
    assert status == 0, err
    assert shown == err + out


def test_the_readme_shows_what_report_prints_of_its_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The profile's output in the README: the rows as `report` reads the same recording
    today (its `time:` line is the recording command's own)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("Its real output on an H200", 1)[1]
    shown = section.split("```\n", 2)[1].splitlines(keepends=True)
    assert shown[-1].startswith("time: ")
    monkeypatch.setenv("COLUMNS", "130")
    recorded = DATA / "profile_fast" / "vit_profile_replicated.ncu-rep.xz"
    status, out, err = run_main(["report", str(recorded), "--top", "2"], tmp_path,
                                monkeypatch, capsys)
    assert status == 0, err
    assert "".join(shown[:-1]) == out


def test_demo_finds_its_report_through_the_package() -> None:
    resource = torch_nsight.demo.recorded_report()
    assert resource.is_file()
    assert resource.name == FIXTURE.name
    assert resource.read_bytes()[:6] == b"\xfd7zXZ\x00"  # xz magic


def test_demo_without_the_recording(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch_nsight.demo, "recorded_report",
                        lambda: tmp_path / "gone.ncu-rep.xz")
    assert main(["demo", "--recorded"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "recorded report is missing" in err[0] and "torch-nsight report" in err[0]


def test_demo_out_must_be_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["demo", "--recorded", "--out", str(tmp_path / "file")]) == 1
    assert "is a file" in capsys.readouterr().err


def test_demo_refuses_existing_outputs(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "roofline.png").write_bytes(b"old")
    assert main(["demo", "--recorded", "--out", str(tmp_path)]) == 1
    assert "roofline.png already exists" in capsys.readouterr().err
    assert (tmp_path / "roofline.png").read_bytes() == b"old"


@pytest.mark.parametrize("by", ["hotspot", "module", "kernel_name", "launch", "shape"])
def test_report_tables_in_process(report: Path, by: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(report), "--by", by, "--format", "github"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2].startswith("|")
    names = torch_nsight.load(report).kernels["kernel"].nunique()
    rows = {"hotspot": 10, "module": 21, "kernel_name": names, "launch": 40, "shape": 1}[by]
    assert len(out.splitlines()) == 2 + 2 + rows


@pytest.mark.parametrize("old", [
    ["--table", "modules"], ["--by", "time"], ["--by", "headroom"], ["--by", "kernel"],
    ["--by", "kernels"], ["--roofline", "roof.png"], ["--scaling", "s.svg"],
])
def test_report_spellings_of_earlier_releases_are_gone(
        report: Path, old: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # before 1.0 a deprecated spelling goes rather than stay beside the new one
    with pytest.raises(SystemExit) as exit_status:
        main(["report", str(report), *old])
    assert exit_status.value.code == 2
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction)).choices
    options = commands["report"]._option_string_actions
    assert old[0] not in options or old[1] not in (options[old[0]].choices or ())


@pytest.mark.parametrize(("args", "message"), [
    (["--by", "module", "--sort", "time"], "--sort ranks hotspots"),
    (["--by", "rank"], "--by rank needs reports of distributed ranks"),
    (["--plot", "roof.jpg"], "--plot needs a file ending in .png or .svg"),
])
def test_report_refuses_options_that_do_not_fit(report: Path, args: list[str], message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(report), *args]) == 1
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""


@pytest.mark.slow
def test_report_plots_under_their_new_names(report: Path, tmp_path: Path) -> None:
    roof, scaling = tmp_path / "roof.png", tmp_path / "scaling.svg"
    assert main(["report", str(report), "--plot", str(roof), "--plot-scaling",
                 str(scaling)]) == 0
    assert roof.read_bytes()[:4] == b"\x89PNG"
    assert scaling.read_text(encoding="utf-8").lstrip().startswith("<?xml")


def test_report_options_reach_the_renderers(report: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(report), "--sort", "time", "-n", "2", "--depth", "1",
                 "--parquet", str(tmp_path / "t.parquet"), "--plot-scaling",
                 str(tmp_path / "s.svg")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].split()[:3] == ["1", "self_attn", "bwd"]
    assert len(pd.read_parquet(tmp_path / "t.parquet")) == 2
    assert (tmp_path / "s.svg").read_bytes().startswith(b"<?xml")


def test_saved_profile_is_read_back(report: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    import torch_nsight

    saved = torch_nsight.load(report).save(tmp_path / "profile.parquet")
    assert main(["report", str(saved), "-n", "1"]) == 0
    assert "self_attn" in capsys.readouterr().out


def test_wrong_suffix_for_table_output(report: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(report), "--csv", str(tmp_path / "t.txt")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"torch-nsight: error: --csv needs a file ending in .csv, got {tmp_path / 't.txt'}"]


def test_missing_output_folder(report: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(report), "--plot", str(tmp_path / "no" / "r.png")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["report"])
    assert raised.value.code == 2
    with pytest.raises(SystemExit) as raised:
        main([])
    assert raised.value.code == 2


@pytest.mark.parametrize("argv, level", [([], logging.WARNING), (["-v"], logging.INFO),
                                         (["-vv"], logging.DEBUG)])
def test_verbosity(argv: list[str], level: int, report: Path,
                   capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args([*argv, "report", str(report)])
    assert args.verbose == len(argv[0]) - 1 if argv else args.verbose == 0
    assert main([*argv, "report", str(report), "-n", "1"]) == 0
    assert logging.getLogger("torch_nsight").level == level
    capsys.readouterr()


def test_verbose_after_the_subcommand(report: Path) -> None:
    args = build_parser().parse_args(["-v", "report", str(report), "-v"])
    assert isinstance(args, argparse.Namespace)
    assert args.verbose == 1  # the later -v counts on its own; neither is lost to a default
    args = build_parser().parse_args(["-v", "report", str(report)])
    assert args.verbose == 1


def test_report_reads_a_sweep_directory_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    def modules(*extra: str) -> list[str]:
        status, out, err = run_main(["report", str(DATA / "sweep_stack"), "--by", "module",
                                     "--depth", "1", *extra], tmp_path, monkeypatch, capsys)
        assert status == 0, err
        assert "294 kernels" in out and "rows replicated" in out
        return out.splitlines()

    lines = modules("--no-fold")
    for block in ("0", "1", "2", "3"):  # replicated blocks 2 and 3 are rows like the others
        assert sum(f"· {block} " in line for line in lines) == 4  # 2 shapes x fwd/bwd
    # folded (the default): the four blocks are one row per shape forward; backward, block
    # 0 computes no gradient of its input (other kernels), so it stays a row of its own
    folded = modules()
    assert sum("· {0-3} ×4 " in line and " fwd " in line for line in folded) == 2
    assert sum("· {1-3} ×3 " in line and " bwd " in line for line in folded) == 2
    assert sum("· 0 " in line and " bwd " in line for line in folded) == 2


def test_a_report_without_flop_counters_says_what_to_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    report = DATA / "emit_nvtx.ncu-rep.xz"
    chart = tmp_path / "roofline.png"
    status, out, err = run_main(["report", str(report), "--plot", str(chart)], tmp_path,
                                monkeypatch, capsys)
    assert status == 1 and not chart.exists()
    assert out == ""  # refused before any table was printed
    assert "no kernel can be placed on the roofline" in err
    assert "torch-nsight profile" in err and "dram__bytes.sum" in err
    status, _, err = run_main(["report", str(report)], tmp_path, monkeypatch, capsys)
    assert status == 0 and "note: emit_nvtx.ncu-rep.xz lacks 27 of the metrics" in err


def test_labels_name_reports_of_one_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    recorded = DATA / "hand_s128.ncu-rep.xz"
    first = shutil.copy(recorded, tmp_path / "a.ncu-rep.xz")
    second = shutil.copy(recorded, tmp_path / "b.ncu-rep.xz")

    def report(*extra: str) -> tuple[int, str, str]:
        return run_main(["report", str(first), str(second), "--by", "module", "--depth",
                         "0", *extra], tmp_path, monkeypatch, capsys)

    status, out, err = report("--label", "before", "--label", "after")
    assert status == 0, err
    assert "shapes before, after" in out
    _, out, _ = report("--label", "x", "--label", "x")
    assert "shapes x;" in out or "shapes x " in out or "shapes x\n" in out
    status, _, err = report("--label", "only-one")
    assert status == 1 and "one label per report" in err


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_csv_and_json_go_to_standard_output(tmp_path: Path, fmt: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    report = DATA / "hand_s128.ncu-rep.xz"
    status, out, err = run_main(["report", str(report), "--format", fmt, "-n", "5"], tmp_path,
                                monkeypatch, capsys)
    assert status == 0, err
    frame = (pd.read_csv(io.StringIO(out)) if fmt == "csv"
             else pd.DataFrame(json.loads(out)))
    expected = load_recorded(report).hotspots(n=5)
    assert frame["kernel"].tolist() == expected["kernel"].tolist()
    assert frame["duration_ns"].tolist() == pytest.approx(expected["duration_ns"].tolist())
    assert "40 kernels" in err  # the summary line goes to standard error


@pytest.mark.parametrize("code", ["EROFS", "EACCES", "ENOSPC"])
def test_an_output_the_file_system_refuses_is_one_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        code: str) -> None:
    # a read-only folder, one without permission, a full disk (root ignores modes, so the
    # file system's answer is given at the call that would meet it)
    import errno
    import os

    out = tmp_path / "ro"
    real_mkdir = Path.mkdir

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        if self == out or out in self.parents:
            number = getattr(errno, code)
            raise OSError(number, os.strerror(number), str(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refuse)
    assert main(["demo", "--recorded", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "--out" in err[0]
    assert os.strerror(getattr(errno, code)) in err[0]


@pytest.mark.parametrize("command", ["sweep", "profile", "demo", "doctor"])
def test_help_reads_as_plain_text(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert ":func:" not in text and "``" not in text
    assert f"torch-nsight {command}" in text
