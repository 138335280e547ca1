"""Files that are not readable reports fail with ReportError and a message saying what to do."""

from __future__ import annotations

import contextlib
import lzma
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from torch_nsight import Profile, load
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


@contextlib.contextmanager
def _released(fifo: Path) -> Iterator[None]:
    """Should a reader block on ``fifo`` (the bug), a writer opens and closes it after a
    while: the reader then sees its end and the test fails instead of hanging."""
    def release() -> None:
        with contextlib.suppress(OSError):  # no reader waiting: nothing to release
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    timer = threading.Timer(20, release)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _special(tmp_path: Path, name: str, kind: str) -> Path:
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(),
                    reason="needs FIFOs and /dev/zero")
@pytest.mark.parametrize("kind", ["fifo", "zeros"])
@pytest.mark.parametrize("name", ["run.ncu-rep", "run.ncu-rep.xz", "trace.json.gz",
                                  "saved.parquet"])
def test_a_path_that_is_not_a_regular_file_is_named_so(
        tmp_path: Path, name: str, kind: str) -> None:
    """A FIFO or a link to /dev/zero named like a source once read "does not exist" (the
    report, named by where its link leads) or could block on a FIFO: it is refused,
    unopened, by the name given."""
    path = _special(tmp_path, name, kind)
    with _released(path), pytest.raises(ReportError) as raised:
        load(path, cache=False)
    assert str(raised.value).startswith(f"{path} is not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_the_readers_of_a_report_and_a_profile_refuse_a_fifo(tmp_path: Path) -> None:
    report, saved = (_special(tmp_path, name, "fifo") for name in ("run.ncu-rep", "p.parquet"))
    with _released(report), pytest.raises(ReportError, match="is not a regular file"):
        read_report(report, cache=False)
    with _released(saved), pytest.raises(ReportError, match="is not a regular file"):
        Profile.read(saved)
