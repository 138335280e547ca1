"""Malformed fields of real recorded files (issue 33): each reader refuses them with a
ReportError naming the file and the field, or leaves the invalid events out with one
counted warning; never a traceback, never a time that is not a measurement.

Every case damages a copy of a recorded fixture: the CUDA-graph trace
(tests/data/graph_captured_timeline, 12 kernels), the format-1 saved profile
(tests/data/profile_format1.parquet) and the GEMM sweep (tests/data/findings_gemm).
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import torch_nsight
from torch_nsight.errors import ReportError

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "graph_captured_timeline" / "trace.json.gz"
SAVED = DATA / "profile_format1.parquet"
SWEEP = DATA / "findings_gemm"


def _trace() -> dict[str, Any]:
    with gzip.open(TRACE, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _kernels(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in document["traceEvents"] if e.get("cat") == "kernel"]


KERNELS = len(_kernels(_trace()))


def _write_trace(tmp_path: Path, change: Callable[[dict[str, Any]], Any]) -> Path:
    document = copy.deepcopy(_trace())
    change(document)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    return path


def _set_all(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        for event in _kernels(document):
            event[key] = value
    return change


def _assert_measured(profile: torch_nsight.Profile) -> None:
    durations = profile.kernels["duration_ns"]
    assert durations.map(math.isfinite).all() and (durations >= 0).all()


@pytest.mark.parametrize(("case", "key", "value", "why"), [
    ("ts as text", "ts", "12", "invalid start times"),
    ("dur as text", "dur", "abc", "invalid durations"),
    ("dur negative", "dur", -5, "invalid durations"),
    ("args as text", "args", "x", "args that are not an object"),
])
def test_every_kernel_event_malformed_leaves_them_all_out_in_one_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, key: str, value: Any,
        why: str) -> None:
    path = _write_trace(tmp_path, _set_all(key, value))
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        profile = torch_nsight.load(path)  # its memsets remain
    assert (profile.kernels["kind"] == "kernel").sum() == 0
    _assert_measured(profile)
    (line,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert f"{KERNELS} kernel events with {why} left out" in line and str(path.name) in line


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, None, [1]])
def test_one_kernel_with_an_invalid_duration_is_left_out_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, value: Any) -> None:
    path = _write_trace(tmp_path, lambda d: _kernels(d)[0].__setitem__("dur", value))
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        profile = torch_nsight.load(path)
    assert (profile.kernels["kind"] == "kernel").sum() == KERNELS - 1
    _assert_measured(profile)
    assert "1 kernel events with invalid durations left out" in caplog.text


@pytest.mark.parametrize("change", [
    lambda d: d["deviceProperties"][0].__setitem__("id", "x"),
    lambda d: d.__setitem__("deviceProperties", {"id": 0}),
    _set_all("tid", [1]),
    _set_all("name", 5),
], ids=["device id as text", "deviceProperties an object", "tid a list", "name a number"])
def test_odd_field_types_of_a_trace_read_without_a_traceback(
        tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    _assert_measured(torch_nsight.load(_write_trace(tmp_path, change)))


@pytest.mark.parametrize("key", ["grid", "block", "stream", "device", "correlation",
                                 "registers per thread"])
def test_args_fields_of_the_wrong_type_are_not_read(tmp_path: Path, key: str) -> None:
    def change(document: dict[str, Any]) -> None:
        for event in _kernels(document):
            event["args"][key] = ["a", 1, 1] if key in ("grid", "block") else "s"
    profile = torch_nsight.load(_write_trace(tmp_path, change))
    assert (profile.kernels["kind"] == "kernel").sum() == KERNELS
    _assert_measured(profile)


@pytest.mark.parametrize("name", ["trace.json", "sweep.json"])
def test_deeply_nested_json_is_refused_in_one_error(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "sweep"
    if name == "sweep.json":
        shutil.copytree(SWEEP, folder)
    else:
        folder.mkdir()
    (folder / name).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ReportError, match=f"{name}.*nested too deeply"):
        torch_nsight.load(folder if name == "sweep.json" else folder / name)


def _save_changed(tmp_path: Path, change: Callable[[Any], Any]) -> Path:
    import pyarrow.parquet as pq

    path = tmp_path / "profile.parquet"
    pq.write_table(change(pq.read_table(SAVED)), path)
    return path


def _with_header(table: Any, header: bytes) -> Any:
    return table.replace_schema_metadata({**table.schema.metadata,
                                          b"torch_nsight.profile": header})


def _with_column(table: Any, name: str, values: list[Any]) -> Any:
    import pyarrow as pa

    return table.set_column(table.schema.get_field_index(name), name, pa.array(values))


@pytest.mark.parametrize(("case", "change", "match"), [
    ("header cut", lambda t: _with_header(t, t.schema.metadata[b"torch_nsight.profile"][:50]),
     "torch_nsight.profile metadata.* not JSON"),
    ("huge format number", lambda t: _with_header(t, b'{"format": 1e999, "meta": {}}'),
     "'format' is not a format number"),
    ("format as text", lambda t: _with_header(t, b'{"format": "2", "meta": {}}'),
     "'format' holds text"),
    ("meta of the wrong types", lambda t: _with_header(t, b'{"format": 2, "meta": '
                                                          b'{"sources": [1, 2]}}'),
     "'meta' field does not hold"),
    ("duration_ns as text", lambda t: _with_column(t, "duration_ns", ["x"] * t.num_rows),
     "column 'duration_ns' holds values that are not numbers"),
    ("duration_ns missing", lambda t: t.drop(["duration_ns"]),
     "lacks the column 'duration_ns'"),
    ("range stack a number", lambda t: _with_column(t, "nvtx_stack", [5] * t.num_rows),
     "column 'range_stack' holds values that are not lists"),
])
def test_a_damaged_saved_profile_is_refused_naming_the_file_and_field(
        tmp_path: Path, case: str, change: Callable[[Any], Any], match: str) -> None:
    path = _save_changed(tmp_path, change)
    with pytest.raises(ReportError, match=match) as raised:
        torch_nsight.load(path)
    assert str(path) in str(raised.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -5.0])
def test_invalid_saved_durations_are_left_out_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, value: float) -> None:
    import pyarrow.parquet as pq

    rows = pq.read_table(SAVED).num_rows
    path = _save_changed(tmp_path, lambda t: _with_column(
        t, "duration_ns", [value, value] + t.column("duration_ns").to_pylist()[2:]))
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        profile = torch_nsight.load(path)
    assert len(profile.kernels) == rows - 2
    _assert_measured(profile)
    assert "2 kernels with" in caplog.text and "left out" in caplog.text


@pytest.mark.parametrize(("change", "field"), [
    (lambda m: {**m, "children": ["a", "b"]}, "children[0]"),
    (lambda m: {**m, "children": {"a": 1}}, "children"),
    (lambda m: {**m, "calls": [{"op": 5, "flops": "x", "count": "y", "range_stack": 3}]},
     "calls[0].range_stack"),
    (lambda m: {**m, "calls": [{"range_stack": [], "flops": float("nan")}]}, "calls[0].flops"),
    (lambda m: {**m, "record": "x"}, "record"),
    (lambda m: {**m, "record": {**m["record"], "options": [1]}}, "record.options"),
    (lambda m: {**m, "replication": [{"representative": 5}]}, "replication[0].representative"),
    (lambda m: {**m, "settings": [1]}, "settings"),
    (lambda m: {**m, "format": 1e999}, "format"),
    (lambda m: {**m, "format": "1"}, "format"),
], ids=["children text", "children an object", "calls wrong types", "calls NaN flops",
        "record text", "options a list", "representative a number", "settings a list",
        "huge format", "format as text"])
def test_a_damaged_sweep_manifest_is_refused_naming_the_field(
        tmp_path: Path, change: Callable[[dict[str, Any]], Any], field: str) -> None:
    folder = tmp_path / "sweep"
    shutil.copytree(SWEEP, folder)
    manifest = json.loads((folder / "sweep.json").read_text())
    (folder / "sweep.json").write_text(json.dumps(change(manifest)))
    with pytest.raises(ReportError, match="sweep.json") as raised:
        torch_nsight.load(folder)
    assert f"'{field}'" in str(raised.value) or "format" in str(raised.value)


def test_a_damaged_reports_warning_repeats_when_read_from_its_cache(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import lzma

    raw = lzma.decompress((DATA / "hand_s128.ncu-rep.xz").read_bytes())
    path = tmp_path / "run.ncu-rep"
    path.write_bytes(raw[:-1000])  # its last kernel record cut short
    said = []
    for _ in range(2):  # the report, then its cache
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="torch_nsight"):
            kernels = len(torch_nsight.load(path, cache_dir=tmp_path / "caches").kernels)
        said.append([r.getMessage() for r in caplog.records if "damaged" in r.getMessage()])
    assert len(list((tmp_path / "caches").iterdir())) == 1
    assert said[0] == said[1] == [
        f"run.ncu-rep is damaged (cut short?): 1 of its {kernels + 1} kernel records are "
        "incomplete and left out"]


def test_a_full_temporary_folder_is_one_error_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    from torch_nsight.report import reader

    def full(source: Any, target: Any, *args: Any) -> None:
        target.write(b"\0" * 1000)  # what fitted before the disk filled up
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setattr(reader, "expand_into", full)
    with pytest.raises(ReportError, match="cannot decompress .*hand_s128.ncu-rep.xz into .*"
                                          "No space left .* free there.*set TMPDIR"):
        torch_nsight.load(DATA / "hand_s128.ncu-rep.xz", cache=False)
    assert list(tmp_path.iterdir()) == []
