"""Outputs that cannot be written whole (issue 33): a planted link, a full disk, a file-size
limit, a second writer, an --out under a file. Each ends in one line, with nothing partial
left and nothing written outside the folder named."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from torch_nsight import formats
from torch_nsight.errors import OutputBusyError, OutputWriteError
from torch_nsight.files import LOCK_NAME, atomic_output, locked_folder, rank_lock

from .conftest import run_main

ROOT = Path(__file__).resolve().parents[2]
SAVED = ROOT / "tests" / "data" / "profile_format1.parquet"


def test_write_json_never_follows_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / "job.json.tmp").symlink_to(victim)  # the fixed name it once wrote through
    (out / "job.json").symlink_to(victim)
    formats.write_json(out / "job.json", {"a": 1})
    assert victim.read_text() == "keep me"
    assert not (out / "job.json").is_symlink() and "\"a\": 1" in (out / "job.json").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["job.json", "job.json.tmp"]


def test_a_failed_write_leaves_the_target_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "table.csv"
    target.write_text("before")
    with pytest.raises(KeyboardInterrupt), atomic_output(target) as temp:
        temp.write_text("half")
        raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]
    assert target.read_text() == "before"


@pytest.mark.parametrize("name", ["t" * 240 + ".csv", "é" * 120 + ".csv",
                                  os.fsdecode(b"\xff" * 240 + b".csv")],
                         ids=["ascii", "multibyte", "not-utf8"])
def test_a_name_as_long_as_the_file_system_takes_is_written(tmp_path: Path, name: str) -> None:
    """A legal 244-byte output name (issue 45) was refused: its temporary name beside it
    added 25 bytes past the 255 a name may hold. Multi-byte names are cut on a character;
    a name that is not UTF-8 (once a UnicodeEncodeError) keeps its bytes."""
    target = tmp_path / name
    assert len(os.fsencode(name)) <= 255
    with atomic_output(target) as temp:
        assert len(os.fsencode(temp.name)) <= 255
        temp.write_text("rows")
    assert target.read_text() == "rows"
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_full_disk_is_one_line_and_leaves_no_csv(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def full(self: pd.DataFrame, path: Path, **kwargs: object) -> None:
        Path(path).write_text("source,kernel\n")  # what fitted before the disk filled up
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    status, _, err = run_main(["report", str(SAVED), "--csv", "out.csv"], tmp_path,
                              monkeypatch, capsys)
    assert status == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("torch-nsight: error: cannot write out.csv: No space left")
    assert "free there" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # a rerun is not refused


@pytest.mark.slow
def test_a_file_size_limit_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300))\n"
            "from torch_nsight.cli.main import main\n"
            f"sys.exit(main(['report', {str(SAVED)!r}, '--csv', 'out.csv']))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, check=False,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "cannot write out.csv: File too large" in line and "ulimit -f" in line
    assert list(tmp_path.iterdir()) == []


def _holder(folder: Path, name: str) -> subprocess.Popen[str]:
    """Another process holding ``folder``'s lock ``name`` until its standard input closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom torch_nsight.files import locked_folder\n"
         f"with locked_folder({str(folder)!r}, {name!r}):\n"
         "    print('held', flush=True)\n    sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_writer_of_a_folder_is_refused_naming_the_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    holder = _holder(tmp_path / "out", LOCK_NAME)
    try:
        with pytest.raises(OutputBusyError, match=f"being written by process {holder.pid}"), \
                locked_folder(tmp_path / "out"):
            pass
        (tmp_path / "model.py").write_text("def make():\n    raise AssertionError('not run')\n")
        status, _, err = run_main(["sweep", "model.py:make", "--shapes", "4x16", "--dry-run",
                                   "--out", "out"], tmp_path, monkeypatch, capsys)
        assert status == 1
        assert err.strip() == (f"torch-nsight: error: {tmp_path / 'out'} is being written by "
                               f"process {holder.pid}: wait for it to finish, or choose another "
                               "output folder")
    finally:
        holder.communicate("")
    with locked_folder(tmp_path / "out"), locked_folder(tmp_path / "out"):  # reentrant
        assert (tmp_path / "out" / LOCK_NAME).read_text().strip() == str(os.getpid())
    assert list((tmp_path / "out").iterdir()) == []  # the lock file goes with the writer


def test_the_ranks_of_one_run_write_one_folder_each_under_its_own_lock(
        tmp_path: Path) -> None:
    """profile --ranks 0,1: both ranks write report-rank<R> into one --out; rank 0 holding
    its lock leaves rank 1 free, and a second rank 0 is refused."""
    folder = tmp_path / "out"
    holder = _holder(folder, rank_lock(0))
    try:
        with locked_folder(folder, rank_lock(1)):
            pass
        with pytest.raises(OutputBusyError, match=f"process {holder.pid}"), \
                locked_folder(folder, rank_lock(0)):
            pass
    finally:
        holder.communicate("")
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("command", [["sweep", "model.py:make", "--shapes", "4x16",
                                      "--dry-run"],
                                     ["timeline", "model.py:make", "--shapes", "4x16"],
                                     ["demo"]])
@pytest.mark.parametrize("out", ["afile", "afile/sub"])
def test_an_out_that_is_or_lies_under_a_file_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        command: list[str], out: str) -> None:
    (tmp_path / "afile").write_text("a file")
    (tmp_path / "model.py").write_text("def make():\n    raise AssertionError('not run')\n")
    status, _, err = run_main([*command, "--out", out], tmp_path, monkeypatch, capsys)
    assert status == 1
    (line,) = err.strip().splitlines()
    assert line.startswith(f"torch-nsight: error: --out {out} ")
    assert "file" in line and "already holds" not in line


def test_the_library_refuses_an_output_folder_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("a file")
    with pytest.raises(OutputWriteError, match="is a file"), \
            locked_folder(tmp_path / "afile" / "sub"):
        pass


def test_a_childs_log_on_a_full_disk_is_one_warning_not_a_dead_thread(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import threading

    from torch_nsight.collect.parent.launch import ChildSpec, run_children

    died: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda hook: died.append(hook.exc_value)  # type: ignore[arg-type]
    command = [sys.executable, "-c", "for i in range(20000): print('line', i)"]
    spec = ChildSpec("sweep", command, dict(os.environ), tmp_path / "s", tmp_path / "r",
                     None, Path("/dev/full"), 1)  # every write to /dev/full: no space left
    try:
        with caplog.at_level(logging.WARNING, logger="torch_nsight"):
            (outcome,) = run_children([spec], item_timeout=60, startup_s=60,
                                      cwd=str(tmp_path))
    finally:
        threading.excepthook = previous
    assert died == [] and outcome.returncode == 0  # its output was read to the end
    (line,) = [r.getMessage() for r in caplog.records if "/dev/full" in r.getMessage()]
    assert "cannot write /dev/full: No space left" in line and "not kept" in line


@pytest.mark.parametrize("output", ["--parquet in.parquet", "--parquet ./link.parquet",
                                    "--json sweep/sweep.json"])
def test_force_never_writes_over_an_input(
        output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """(issue 45) ``--force`` once replaced the profile it read by the table it wrote."""
    import shutil

    source = tmp_path / "in.parquet"
    shutil.copy(SAVED, source)
    (tmp_path / "link.parquet").symlink_to(source)
    folder = tmp_path / "sweep"
    shutil.copytree(ROOT / "tests" / "data" / "sweep_stack", folder,
                    ignore=shutil.ignore_patterns("*.tn-cache.parquet"))
    before = {p: p.read_bytes() for p in (source, folder / "sweep.json")}
    read = "sweep" if output.startswith("--json sweep") else "in.parquet"
    status, out, err = run_main(["report", read, *output.split(), "--force"], tmp_path,
                                monkeypatch, capsys)
    assert status == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert "is an input of this command" in line and "--force never writes over" in line
    assert {p: p.read_bytes() for p in before} == before


def test_force_still_replaces_an_output_beside_the_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "table.csv").write_text("old")
    status, _, err = run_main(["report", str(SAVED), "--csv", "table.csv", "--force"],
                              tmp_path, monkeypatch, capsys)
    assert status == 0, err
    assert (tmp_path / "table.csv").read_text() != "old"
