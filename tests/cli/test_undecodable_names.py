"""File names that are not UTF-8 (issue 45): a report, a folder of reports, a PyTorch trace,
a saved profile and every output named with a byte that no UTF-8 text holds (``\\xff``;
Python keeps it as a lone surrogate, which pyarrow, a Parquet column and a UTF-8 terminal
refuse) were once a UnicodeEncodeError traceback. They are read and written under their
own names; the ``source`` column and everything printed show the byte as ``\\xff``, the
way ``ls -b`` does. The inputs are the real recordings of tests/data, copied under the
hostile name."""

from __future__ import annotations

import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from torch_nsight.environment import CACHE_DIR_ENV
from torch_nsight.files import path_text
from torch_nsight.report.cache import CACHE_SUFFIX

from .conftest import run_main

DATA = Path(__file__).resolve().parents[1] / "data"
REPORT = DATA / "hand_s128.ncu-rep.xz"
TRACE = DATA / "timeline_train" / "trace-0.json.gz"
ROOT = Path(__file__).resolve().parents[2]
_SAME = ["kernel", "module_path", "duration_ns"]


def _named(folder: Path, name: bytes) -> Path:
    """``folder`` / ``name``, a name that is not UTF-8 (skipped where the file system takes
    no such name)."""
    path = folder / os.fsdecode(name)
    try:
        path.touch()
        path.unlink()
    except (OSError, UnicodeError) as err:
        pytest.skip(f"this file system takes no name that is not UTF-8: {err}")
    return path


def _copied(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    return target


def _strict(*texts: str) -> None:
    """What was printed is text a strict UTF-8 stream takes: no raw surrogate left."""
    for text in texts:
        text.encode("utf-8")
        assert "Traceback" not in text, text


def _same_rows(profile: torch_nsight.Profile, expected: torch_nsight.Profile) -> None:
    """The same kernels, modules and times (a cache gives text columns as object)."""
    pd.testing.assert_frame_equal(profile.kernels[_SAME].reset_index(drop=True),
                                  expected.kernels[_SAME].reset_index(drop=True),
                                  check_dtype=False)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> torch_nsight.Profile:
    """The recorded report read under its own name: what the hostile names must give."""
    return torch_nsight.load(_copied(REPORT, tmp_path_factory.mktemp("plain") / REPORT.name),
                             cache=False)


@pytest.mark.parametrize("where", ["name", "folder", "uncompressed"])
def test_a_report_named_in_bytes_is_read_and_cached_beside_it(
        where: str, plain: torch_nsight.Profile, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)  # the cache beside the report
    if where == "name":
        report = _copied(REPORT, _named(tmp_path, b"r\xfe.ncu-rep.xz"))
    elif where == "folder":
        report = _copied(REPORT, _named(tmp_path, b"d\xfe") / REPORT.name)
    else:  # Nsight's reader opens the file itself, by a name it must encode
        report = _named(tmp_path, b"r\xfe.ncu-rep")
        report.write_bytes(lzma.decompress(REPORT.read_bytes()))
    opened = report.parent if where == "folder" else report
    first = torch_nsight.load(opened)
    assert report.with_name(report.name + CACHE_SUFFIX).is_file()
    again = torch_nsight.load(opened)  # through the cache
    for profile in (first, again):
        _same_rows(profile, plain)
        assert set(profile.kernels["source"]) == {path_text(report.resolve())}
        assert "\\xfe" in profile.kernels["source"].iloc[0]


def test_a_report_named_in_bytes_is_cached_in_the_cache_folder(
        plain: torch_nsight.Profile, tmp_path: Path) -> None:
    report = _copied(REPORT, _named(tmp_path, b"r\xfe.ncu-rep.xz"))
    caches = tmp_path / "caches"
    for _ in range(2):  # written, then read
        profile = torch_nsight.load(report, cache_dir=caches)
        _same_rows(profile, plain)
    (cache,) = caches.iterdir()
    assert cache.name.startswith(report.name) and cache.name.endswith(CACHE_SUFFIX)


def test_a_trace_named_in_bytes_is_read_saved_and_read_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    expected = torch_nsight.load(_copied(TRACE, tmp_path / "plain.json.gz"))
    trace = _copied(TRACE, _named(tmp_path, b"plain\xff.json.gz"))
    profile = torch_nsight.load(trace)
    _same_rows(profile, expected)
    assert set(profile.kernels["source"]) == {path_text(trace.resolve())}
    saved = profile.save(_named(tmp_path, b"saved\xff.parquet"))
    back = torch_nsight.Profile.read(saved)
    _same_rows(back, expected)
    assert list(back.kernels["source"]) == list(profile.kernels["source"])
    for argv in (["report", str(trace)], ["report", str(saved)], ["findings", str(trace)]):
        status, out, err = run_main(argv, tmp_path, monkeypatch, capsys)
        assert status == 0, err
        _strict(out, err)


def test_outputs_named_in_bytes_are_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    report = _copied(REPORT, tmp_path / REPORT.name)
    outputs = {option: _named(tmp_path, b"o\xff." + suffix.encode())
               for option, suffix in (("--csv", "csv"), ("--json", "json"),
                                      ("--parquet", "parquet"))}
    argv = ["report", str(report)] + [w for o, p in outputs.items() for w in (o, str(p))]
    status, out, err = run_main(argv, tmp_path, monkeypatch, capsys)
    assert status == 0, err
    _strict(out, err)
    for path in outputs.values():
        assert path.stat().st_size > 0
        assert f"wrote {path_text(path)}" in out + err
    with outputs["--parquet"].open("rb") as file:
        assert len(pd.read_csv(outputs["--csv"])) == len(pd.read_parquet(file)) > 0


@pytest.mark.slow
def test_a_strict_utf8_terminal_gets_the_name_escaped(tmp_path: Path) -> None:
    """A desktop's UTF-8 locale writes standard output strictly (the C.UTF-8 of a container
    lets a lone surrogate through): ``wrote ...`` once failed there after the table."""
    report = _copied(REPORT, _named(tmp_path, b"r\xfe.ncu-rep.xz"))
    csv = _named(tmp_path, b"o\xff.csv")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torch_nsight", "report", str(report),
                           "--csv", str(csv)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, errors="strict", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert f"wrote {path_text(csv)}" in done.stdout and csv.is_file()
