"""The trace reader's two paths agree: msgspec's typed records (the fast path) and
``json`` (the reference path, which takes whatever a file holds), on every recorded trace
in tests/data and on traces with unusual values."""

from __future__ import annotations

import gc
import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from torch_nsight.errors import ReportError
from torch_nsight.report import trace_events
from torch_nsight.report.trace import parse_trace
from torch_nsight.report.trace_events import read_trace

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDED = sorted(DATA.rglob("*.json.gz"))


def test_every_recorded_trace_is_found() -> None:
    assert len(RECORDED) >= 8


@pytest.mark.parametrize("path", RECORDED, ids=[str(p.relative_to(DATA)) for p in RECORDED])
def test_the_fast_and_reference_paths_give_the_same_tables(path: Path) -> None:
    assert trace_events._decode_fast(gzip.decompress(path.read_bytes())) is not None
    fast, reference = read_trace(path), read_trace(path, fast=False)
    assert fast == reference
    for before, after in zip(parse_trace(reference, "t")[:2], parse_trace(fast, "t")[:2],
                             strict=True):
        pd.testing.assert_frame_equal(before, after, check_exact=True)


def _trace(events: list[Any]) -> dict[str, Any]:
    call = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1,
            "ts": 10.0, "dur": 2.0, "args": {"correlation": 7, "cbid": 211}}
    kernel = {"ph": "X", "cat": "kernel", "name": "void k<1>(int)", "tid": 9, "ts": 13.5,
              "dur": 4.25, "args": {"correlation": 7, "device": 0, "stream": 7,
                                    "grid": [4, 1, 1], "block": [128, 1, 1],
                                    "registers per thread": 32, "shared memory": 0}}
    return {"deviceProperties": [{"id": 0, "name": "GPU"}],
            "traceEvents": [call, kernel, *events]}


@pytest.mark.parametrize(("extra", "typed"), [
    ([], True),
    ([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 1, "ts": 9, "dur": 5}], True),
    ([{"ph": "X", "cat": "cpu_op", "name": 5, "tid": True, "ts": 9.0, "dur": 1.0}], False),
    ([{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 1.0, "args": [1]}], False),
    ([{"ph": "X", "cat": "kernel", "name": "k", "ts": "1", "dur": 1.0}], False),
    ([{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 1.0,
       "args": {"grid": [1.0, 2, 3], "stream": "s", "correlation": 7.0}}], False),
    ([3, None, "text", [1, 2]], False),
], ids=["well formed", "ints as times", "odd name and tid", "args a list", "time as text",
        "args of odd types", "items that are no objects"])
def test_unusual_values_read_as_the_reference_reads_them(tmp_path: Path, extra: list[Any],
                                                          typed: bool) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_trace(extra)))
    fast = read_trace(path)
    assert fast == read_trace(path, fast=False)
    # the fast path takes the usual types; the reference path reads the rest
    assert (trace_events._decode_fast(path.read_bytes()) is not None) is typed
    assert fast.activities[0].name == "void k<1>(int)"
    assert fast.activities[0].grid == (4, 1, 1) and fast.activities[0].registers == 32


def test_json_extensions_are_read_by_the_reference_path(tmp_path: Path) -> None:
    document = _trace([])
    document["traceEvents"][1]["dur"] = float("nan")
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(document).encode()))  # NaN, not JSON
    assert read_trace(path).activities == []  # the kernel left out, as before


def test_a_file_that_is_not_utf8_is_refused_even_where_no_field_is_read(
        tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    text = json.dumps(_trace([{"ph": "i", "note": "@@"}])).encode()
    path.write_bytes(text.replace(b"@@", b"\xff\xfe"))
    with pytest.raises(ReportError, match="not a readable Chrome trace"):
        read_trace(path)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_left_as_it_was(tmp_path: Path, enabled: bool) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_trace([])))
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        read_trace(path)
        assert gc.isenabled() is enabled
        with pytest.raises(ReportError):
            read_trace(tmp_path / "missing.json")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_the_reference_path_fills_every_args_field() -> None:
    assert dict(trace_events._ARGS_KEYS)["registers"] == "registers per thread"
    assert len(trace_events._ARGS_KEYS) == 7
