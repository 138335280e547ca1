"""Decompression bombs (issue 45): a compressed report or trace that expands past the cap
(:mod:`torch_nsight.report.expand`) is refused as it streams, in one line naming
``$TORCH_NSIGHT_MAX_EXPANDED``, with no more than the cap in memory or on disk. Hostile
input: the bombs are synthetic (a few KiB of xz or gzip holding 8 MiB), the cap is set to
1 MiB here; raising the variable lets the same file through to its reader."""

from __future__ import annotations

import base64
import gzip
import lzma
import tempfile
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from torch_nsight import formats
from torch_nsight.cli.main import main
from torch_nsight.environment import MAX_EXPANDED_ENV
from torch_nsight.errors import ReportError
from torch_nsight.loading import load
from torch_nsight.report import expand, reader
from torch_nsight.report.trace_events import read_trace

CAP = 1 << 20
EXPANDED = 8 << 20


def _stream(head: bytes, tail: bytes = b"") -> Iterator[bytes]:
    yield head
    for _ in range(EXPANDED // CAP):
        yield b" " * CAP
    yield tail


@pytest.fixture(autouse=True)
def low_cap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cap of 1 MiB, and the temporary folder where an expanded report would land."""
    monkeypatch.setenv(MAX_EXPANDED_ENV, "1M")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


@pytest.fixture
def trace_bomb(tmp_path: Path) -> Path:
    """A gzip'd PyTorch trace that expands to 8 MiB of JSON (whitespace in its events)."""
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb") as handle:
        for part in _stream(b'{"traceEvents": [', b"]}"):
            handle.write(part)
    assert path.stat().st_size < 64 << 10
    return path


@pytest.fixture
def report_bomb(tmp_path: Path) -> Path:
    """An xz'd file that starts as a report does and expands to 8 MiB."""
    path = tmp_path / "bomb.ncu-rep.xz"
    with lzma.open(path, "wb") as handle:
        for part in _stream(reader.REPORT_MAGIC):
            handle.write(part)
    assert path.stat().st_size < 64 << 10
    return path


def test_a_trace_bomb_is_refused_with_little_memory(trace_bomb: Path) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ReportError) as caught:
            read_trace(trace_bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < CAP + 3 * expand.CHUNK  # the cap and a few chunks' buffers, not 8 MiB
    message = str(caught.value)
    assert f"{trace_bomb} expands to more than 1 MiB" in message
    assert f"{MAX_EXPANDED_ENV}=4M" in message and "\n" not in message


def test_a_trace_bomb_through_load_and_the_xz_variant(trace_bomb: Path, tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=MAX_EXPANDED_ENV):
        load(trace_bomb)
    xz_bomb = tmp_path / "bomb.json.xz"
    with lzma.open(xz_bomb, "wb") as handle:
        for part in _stream(b'{"traceEvents": [', b"]}"):
            handle.write(part)
    with pytest.raises(ReportError, match=MAX_EXPANDED_ENV):
        load(xz_bomb)


def test_a_raised_cap_lets_the_trace_through(trace_bomb: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_EXPANDED_ENV, "16M")
    events = read_trace(trace_bomb)  # expands whole: an empty trace, no refusal
    assert events.activities == []


def test_a_report_bomb_is_refused_before_the_disk_fills(report_bomb: Path,
                                                        low_cap: Path) -> None:
    with pytest.raises(ReportError, match=MAX_EXPANDED_ENV) as caught, \
            reader.local_report(report_bomb):
        pytest.fail("the bomb was expanded")
    assert "expands to more than 1 MiB" in str(caught.value)
    assert list(low_cap.iterdir()) == []  # the partial file is removed


def test_a_report_bomb_through_the_command_line_is_one_line(
        report_bomb: Path, capsys: pytest.CaptureFixture[str], low_cap: Path) -> None:
    status = main(["report", str(report_bomb)])
    out, err = capsys.readouterr()
    assert status == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert "expands to more than 1 MiB" in line and MAX_EXPANDED_ENV in line
    assert list(low_cap.iterdir()) == []


def test_a_raised_cap_lets_the_report_through_to_its_reader(
        report_bomb: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_EXPANDED_ENV, "9M")
    with reader.local_report(report_bomb) as local:
        assert local.stat().st_size == EXPANDED + len(reader.REPORT_MAGIC)


def test_a_file_exactly_at_the_cap_is_read(tmp_path: Path) -> None:
    path = tmp_path / "full.json.gz"
    path.write_bytes(gzip.compress(b"x" * CAP))
    assert len(expand.read_expanded(path)) == CAP
    path.write_bytes(gzip.compress(b"x" * (CAP + 1)))
    with pytest.raises(ReportError, match="expands to more than"):
        expand.read_expanded(path)


@pytest.mark.parametrize(("text", "limit"), [("", expand.DEFAULT_LIMIT), ("4G", 4 << 30),
                                             ("800M", 800 << 20), ("2GiB", 2 << 30),
                                             ("1.5g", 3 << 29), ("123456", 123456)])
def test_the_cap_is_read_from_the_variable(text: str, limit: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_EXPANDED_ENV, text)
    assert expand.expansion_limit() == limit


@pytest.mark.parametrize("text", ["lots", "0", "-5M", "4X"])
def test_a_cap_that_is_not_a_size_is_refused(text: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_EXPANDED_ENV, text)
    with pytest.raises(ReportError, match=f"{MAX_EXPANDED_ENV}=.* is not a size"):
        expand.expansion_limit()


def test_the_default_cap_holds_real_reports() -> None:
    assert 256 << 20 < expand.DEFAULT_LIMIT < 2 << 30


def test_a_range_message_bomb_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "MESSAGE_LIMIT", CAP)
    text = b'{"kind": "' + formats.CALLS_KIND.encode() + b'"' + b" " * EXPANDED + b"}"
    message = (formats.CALLS_MESSAGE_PREFIX
               + base64.b64encode(zlib.compress(text, 9)).decode("ascii"))
    assert len(message) < 64 << 10
    with pytest.raises(formats.FormatError, match="expands past 1 MiB"):
        formats.decode_calls(message)
    monkeypatch.setattr(formats, "MESSAGE_LIMIT", 2 * EXPANDED)
    assert formats.decode_calls(message) == {"kind": formats.CALLS_KIND}
