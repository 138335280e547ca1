"""What the command line does with errors: the user's mistakes and library errors become one
line and exit 1; argparse's usage errors exit 2; a bug keeps its traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_nsight.cli import report as report_command
from torch_nsight.cli.main import main
from torch_nsight.cli.outputs import (
    OutputExistsError,
    OutputWriteError,
    UsageError,
    check_outputs,
    writing,
)
from torch_nsight.errors import TorchNsightError


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("torch-nsight: error: ")
    return line.removeprefix("torch-nsight: error: ")


def test_cli_errors_are_library_errors() -> None:
    for error in (UsageError, OutputExistsError, OutputWriteError):
        assert issubclass(error, TorchNsightError)
    assert issubclass(OutputExistsError, UsageError)


@pytest.mark.parametrize("argv, message", [
    (["--csv", "t.txt"], "--csv needs a file ending in .csv, got t.txt"),
    (["--json", "t.csv"], "--json needs a file ending in .json, got t.csv"),
    (["--plot", "r.pdf"], "--plot needs a file ending in .png or .svg, got r.pdf"),
    (["--shape", "1x512"], "--shape picks the shape drawn by --plot; pass --plot too"),
])
def test_refused_options_before_any_work(argv: list[str], message: str,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    def no_reading(paths: object) -> None:
        raise AssertionError("options must be checked before the reports are read")

    monkeypatch.setattr(report_command, "read_profile", no_reading)
    assert main(["report", "never-read.ncu-rep", *argv]) == 1
    assert one_error_line(capsys) == message


def test_unknown_shape_is_one_line(report: Path, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(report), "--plot", str(tmp_path / "r.png"),
                 "--shape", "8x8"]) == 1
    assert one_error_line(capsys) == "--shape 8x8 is not in the profile; it holds: 1x512"
    assert not (tmp_path / "r.png").exists()


def test_output_that_is_a_folder(report: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.csv").mkdir()
    assert main(["report", str(report), "--csv", str(tmp_path / "t.csv"), "--force"]) == 1
    assert one_error_line(capsys) == f"{tmp_path / 't.csv'}: is a folder; name a file to write"


@pytest.mark.parametrize("argv", [["-n", "0"], ["-n", "x"], ["--depth", "-1"],
                                  ["--table", "hotspots"], ["--by", "size"]])
def test_bad_values_are_usage_errors(argv: list[str],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["report", "r.ncu-rep", *argv])
    assert raised.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_check_outputs(tmp_path: Path) -> None:
    (tmp_path / "old.csv").write_text("x")
    check_outputs([None, tmp_path / "new.csv"], force=False)
    with pytest.raises(OutputExistsError, match="already exists"):
        check_outputs([tmp_path / "old.csv"], force=False)
    check_outputs([tmp_path / "old.csv"], force=True)
    with pytest.raises(UsageError, match="does not exist"):
        check_outputs([tmp_path / "no" / "new.csv"], force=True)


def test_no_output_is_written_when_one_folder_is_closed(
        report: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    closed = tmp_path / "closed"
    closed.mkdir()
    real_access = os.access
    # root may write anywhere, so the refusal a user gets is simulated at the OS call
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != closed
                        and real_access(path, mode))
    code = main(["report", str(report), "--csv", str(tmp_path / "a.csv"), "--plot",
                 str(tmp_path / "b.png"), "--plot-scaling", str(closed / "c.png")])
    assert code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is not writable" in line and str(closed) in line
    assert not (tmp_path / "a.csv").exists() and not (tmp_path / "b.png").exists()


def test_writing_turns_os_errors_into_one_library_error(tmp_path: Path) -> None:
    target = tmp_path / "no" / "t.csv"
    with pytest.raises(OutputWriteError, match=f"cannot write {target}") as raised, \
            writing(target):
        target.write_text("x")
    assert isinstance(raised.value.__cause__, FileNotFoundError)


@pytest.mark.parametrize("verbosity, traceback", [([], False), (["-v"], False),
                                                   (["-vv"], True)])
def test_library_error_traceback_only_with_vv(verbosity: list[str], traceback: bool,
                                              report: Path, tmp_path: Path) -> None:
    existing = tmp_path / "t.csv"
    existing.write_text("x")
    result = subprocess.run([sys.executable, "-m", "torch_nsight", *verbosity, "report",
                             str(report), "--csv", str(existing)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"torch-nsight: error: {existing} already exists; pass --force to overwrite")
    assert ("Traceback" in result.stderr) is traceback
    assert ("OutputExistsError" in result.stderr) is traceback


def test_the_traceback_names_the_subcommand_not_the_users_command(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """``profile``'s own ``command`` is the user's (``-- python train.py``): the log line
    before the traceback says which subcommand failed, not that list."""
    assert main(["-vv", "profile", "--replicate-launches", "--steps", "3:", "--", "python",
                 "train.py"]) == 1
    assert "profile failed" in caplog.text and "'--'" not in caplog.text
    assert capsys.readouterr().err.strip().endswith("not --steps 3:")


@pytest.mark.parametrize("bug", [RuntimeError, ValueError, OSError, ImportError, KeyError])
def test_a_bug_is_not_swallowed(bug: type[Exception], report: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(profile: object, args: object) -> None:
        raise bug("a bug in the renderer")

    monkeypatch.setattr(report_command, "emit", broken)
    with pytest.raises(bug, match="a bug in the renderer"):
        main(["report", str(report)])


def test_a_bug_prints_its_traceback_in_a_subprocess(report: Path, tmp_path: Path) -> None:
    code = ("import sys\n"
            "from torch_nsight.cli import report\n"
            "from torch_nsight.cli.main import main\n"
            "def broken(profile, args):\n"
            "    raise ValueError('a bug in the renderer')\n"
            "report.emit = broken\n"
            f"sys.exit(main(['report', {str(report)!r}]))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().endswith("ValueError: a bug in the renderer")
    assert "torch-nsight: error:" not in result.stderr


@pytest.mark.parametrize("command", [
    ["sweep", "examples/models.py:LlamaBlock", "--shapes", "1x64x1024"],
    ["profile", "--", sys.executable, "-c", "pass"],
])
@pytest.mark.slow
def test_a_missing_ncu_is_advised_in_command_line_terms(command: list[str],
                                                        tmp_path: Path) -> None:
    import shutil

    from torch_nsight.collect.shared.ncu import DEFAULT_NCU

    if shutil.which("ncu") or Path(DEFAULT_NCU).exists():
        pytest.skip("ncu is installed here")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_NSIGHT_NCU"}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "torch_nsight", *command], cwd=root,
                          env={**env, "PYTHONPATH": str(root)}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert "--ncu PATH" in line and "sweep(" not in line and "profiler=None" not in line
