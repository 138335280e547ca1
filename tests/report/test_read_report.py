"""The tidy table of a real report holds what ncu_report itself says about every kernel."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import ncu_report
import pandas as pd
import pytest

from torch_nsight import naming
from torch_nsight.errors import ReportError
from torch_nsight.metrics import METRICS
from torch_nsight.report import (
    RAW_COLUMNS,
    SCHEMA_VERSION,
    cache_path,
    ncu_import,
    read_report,
    reader,
)
from torch_nsight.report import cache as report_cache
from torch_nsight.report import kernel_table as report_table

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def llama(llama_path: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    return read_report(llama_path, cache=False)


def metric(action: Any, name: str) -> float | str | None:
    value = action.metric_by_name(name)
    if value is None:
        return None
    if value.kind() == ncu_report.IMetric.ValueKind_STRING:
        return value.as_string()
    return value.as_double()


# ncu's log of the recording (tests/data/README.md): 40 kernels profiled
PROFILED_BY_NCU = 40


def test_one_row_per_profiled_kernel_in_report_order(llama, llama_actions) -> None:
    frame, meta = llama
    assert list(frame.columns) == list(RAW_COLUMNS)
    assert len(frame) == len(llama_actions) == meta["kernels"] == PROFILED_BY_NCU
    assert frame["kernel_index"].tolist() == list(range(len(llama_actions)))


def test_every_declared_metric_matches_the_reader(llama, llama_actions) -> None:
    frame, meta = llama
    assert meta["missing_metrics"] == []  # recorded with METRIC_SETS["roofline"]
    for row, action in zip(frame.itertuples(index=False), llama_actions, strict=True):
        for declared in METRICS:
            expected = metric(action, declared.name)
            got = getattr(row, declared.column)
            assert got == expected or (expected is None and math.isnan(got)), declared.name


def test_names_and_launch_shape(llama, llama_actions) -> None:
    frame, _ = llama
    for row, action in zip(frame.itertuples(index=False), llama_actions, strict=True):
        assert row.kernel_full == action.name(ncu_report.IAction.NameBase_DEMANGLED)
        assert row.kernel and "(" not in row.kernel and "<" not in row.kernel
        grid = tuple(int(metric(action, f"launch__grid_dim_{a}")) for a in "xyz")
        assert row.grid == f"({grid[0]}, {grid[1]}, {grid[2]})"
        assert row.workload == "kernel"


def test_sol_rule_title_and_nvtx_ranges(llama, llama_actions) -> None:
    frame, _ = llama
    for row, action in zip(frame.itertuples(index=False), llama_actions, strict=True):
        titles = [r["rule_message"]["title"] for r in action.rule_results_as_dicts()
                  if r["rule_identifier"] == "SOLBottleneck"]
        assert [row.sol_bottleneck] == titles
        state = action.nvtx_state()
        domains = {state.domain_by_id(i).name(): state.domain_by_id(i) for i in state.domains()}
        ours = domains[naming.DOMAIN]
        assert row.range_stack == tuple(ours.push_pop_ranges())
        assert row.range_start_end == tuple(ours.start_end_ranges())
        assert naming.MEASURE_MESSAGE in row.range_start_end


def test_report_meta(llama, llama_actions) -> None:
    _, meta = llama
    assert meta["gpu"] == metric(llama_actions[0], "device__attribute_display_name")
    assert meta["ncu_version"] and meta["ncu_version"][0:4].isdigit()
    assert meta["metric_set"] == "roofline" and meta["nvtx"] is True


def test_chunked_worker_processes_read_the_same_records(llama_copy: Path, monkeypatch) -> None:
    monkeypatch.setattr(reader, "IN_PROCESS_MAX_KERNELS", 1)
    monkeypatch.setattr(reader, "CHUNK_KERNELS", 7)
    with reader.local_report(llama_copy) as local:
        context = reader.open_context(local, llama_copy)
        assert reader.read_records(context, local, workers=2) == \
            reader.read_records(context, local, workers=0)


def test_a_worker_that_dies_costs_time_not_rows(llama_copy: Path, monkeypatch) -> None:
    # ncu 2025.3.1's own reader crashed in forked workers on the GPU machine (a segfault
    # reading a metric's unit): the parent must read those kernels itself, not wait forever
    import os

    monkeypatch.setattr(reader, "IN_PROCESS_MAX_KERNELS", 1)
    monkeypatch.setattr(reader, "CHUNK_KERNELS", 7)
    monkeypatch.setattr(reader, "_read_chunk_into", lambda *args: os._exit(139))
    with reader.local_report(llama_copy) as local:
        context = reader.open_context(local, llama_copy)
        assert reader.read_records(context, local, workers=2) == \
            reader.read_records(context, local, workers=0)


def test_second_read_comes_from_the_cache(llama_copy: Path, monkeypatch) -> None:
    first, meta = read_report(llama_copy)
    assert cache_path(llama_copy).is_file()

    def refuse(*args: object) -> None:
        raise AssertionError("the report was opened although a valid cache exists")

    monkeypatch.setattr(report_table, "read_report_file", refuse)
    second, cached_meta = read_report(llama_copy)
    assert cached_meta == meta
    pd.testing.assert_frame_equal(first, second, check_dtype=False)


def test_changed_report_invalidates_the_cache(llama_copy: Path) -> None:
    read_report(llama_copy)
    stat = llama_copy.stat()
    os.utime(llama_copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert report_cache.read_cache(llama_copy, SCHEMA_VERSION) is None
    read_report(llama_copy)
    assert report_cache.read_cache(llama_copy, SCHEMA_VERSION) is not None


def test_unwritable_location_skips_the_cache(llama_copy: Path, monkeypatch, caplog) -> None:
    monkeypatch.delenv(report_cache.CACHE_DIR_ENV)  # the default: the cache beside the report
    real_open = report_cache.os.open

    def denied(path: Any, *args: Any, **kwargs: Any) -> int:
        if Path(path).parent == llama_copy.parent:  # only the report's own folder
            raise PermissionError("read-only")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(report_cache.os, "open", denied)
    with caplog.at_level("DEBUG", logger="torch_nsight.report.cache"):
        frame, _ = read_report(llama_copy)
    assert len(frame) > 0 and not cache_path(llama_copy).exists()
    assert "not caching" in caplog.text


def test_uncompressed_report_reads_the_same(llama, llama_path: Path, tmp_path: Path) -> None:
    import lzma

    plain = tmp_path / "llama.ncu-rep"
    plain.write_bytes(lzma.decompress(llama_path.read_bytes()))
    frame, _ = read_report(plain, cache=False)
    expected = llama[0].drop(columns="source")
    pd.testing.assert_frame_equal(frame.drop(columns="source"), expected)


@pytest.mark.parametrize(("cut", "kernels"), [(1, 384), (200_000, 378)])
def test_a_report_cut_short_keeps_its_complete_kernels(tmp_path: Path, cut: int,
                                                       kernels: int) -> None:
    # a real report (HF GPT-2 forward, 385 kernel records) with its end cut off, as an ncu
    # killed while writing or an interrupted copy leaves it
    data = _gpt2_report()
    path = tmp_path / "cut.ncu-rep"
    path.write_bytes(data[:-cut])
    frame, _ = read_report(path, cache=False)
    assert len(frame) == kernels and frame["kernel"].notna().all()


@pytest.mark.parametrize("size", [600, 20_000])
def test_a_report_cut_to_its_start_is_called_damaged(tmp_path: Path, size: int) -> None:
    path = tmp_path / "cut.ncu-rep"
    path.write_bytes(_gpt2_report()[:size])
    with pytest.raises(ReportError, match="damaged Nsight Compute report"):
        read_report(path, cache=False)


def _gpt2_report() -> bytes:
    import lzma

    return lzma.decompress((DATA / "profile_fast" / "gpt2_hand.ncu-rep.xz").read_bytes())


def test_the_ncu_report_package_goes_before_nsight_computes_own_copy(tmp_path: Path) -> None:
    # ncu 2025.3.1's copy of the reader (extras/python, put on PYTHONPATH by hand) crashed the
    # process once numpy was imported (seen on the GPU machine): the package is read instead
    import subprocess
    import sys

    bundled = tmp_path / "nsight-compute" / "2025.3.1" / "extras" / "python"
    bundled.mkdir(parents=True)
    (bundled / "ncu_report.py").write_text("raise SystemExit('the bundled copy was imported')")
    code = ("import sys; from torch_nsight.report.ncu_import import import_reader; "
            "before = list(sys.path); print(import_reader().__file__); "
            "print('path kept' if sys.path == before else sys.path)")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bundled), str(root)])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    imported, kept = proc.stdout.strip().splitlines()
    assert Path(imported) == Path(ncu_report.__file__)
    assert kept == "path kept"  # the package was found, and the process's path left alone
    assert not ncu_import._bundled_with_ncu(ncu_report.__file__)
