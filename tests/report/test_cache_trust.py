"""A report's cache is used only while it holds what was written for that report (issue
45): a cache with the right key but another column list, or numbers edited after it was
written, is read again from the report and rewritten; a report whose content changed with
its size and time kept is read again; Parquet that declares more than the cap on expanding
is refused before its columns are read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from torch_nsight.cli.main import main
from torch_nsight.errors import ReportError
from torch_nsight.report import SCHEMA_VERSION, cache_path, read_report
from torch_nsight.report import cache as report_cache
from torch_nsight.report.expand import check_parquet_size
from torch_nsight.report.saved import read_profile

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def report(tmp_path: Path) -> Path:
    path = tmp_path / "hand.ncu-rep.xz"
    shutil.copy(DATA / "hand_s128.ncu-rep.xz", path)
    return path


def _rewrite(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Rewrite the cache ``path`` with ``change`` applied to its table, its metadata (the
    key, the digests) kept as they were."""
    arrow = pq.read_table(path)
    metadata = arrow.schema.metadata
    changed = pa.Table.from_pandas(change(arrow.to_pandas()), preserve_index=False)
    pq.write_table(changed.replace_schema_metadata(metadata), path)


@pytest.mark.parametrize("change", [
    pytest.param(lambda f: f.drop(columns=["grid"]), id="a column gone"),
    pytest.param(lambda f: f.rename(columns={"kernel": "name"}), id="a column renamed"),
    pytest.param(lambda f: f.assign(duration_ns=f["duration_ns"] * 0.5), id="numbers edited"),
    pytest.param(lambda f: f.iloc[:1], id="rows cut"),
])
def test_a_cache_changed_after_it_was_written_is_read_again(report: Path, change) -> None:  # type: ignore[no-untyped-def]
    first, meta = read_report(report)
    cache = cache_path(report)
    _rewrite(cache, change)
    assert report_cache.read_cache(report, SCHEMA_VERSION,
                                   columns=list(first.columns)) is None
    second, again = read_report(report)  # from the report, the cache rewritten
    pd.testing.assert_frame_equal(first, second, check_dtype=False)
    assert again == meta
    assert report_cache.read_cache(report, SCHEMA_VERSION,
                                   columns=list(first.columns)) is not None


def test_a_report_changed_with_its_size_and_time_kept_is_read_again(report: Path,
                                                                    tmp_path: Path) -> None:
    read_report(report)
    stat = report.stat()
    other = DATA / "hand_s512.ncu-rep.xz"
    data = other.read_bytes()[:stat.st_size].ljust(stat.st_size, b"\0")
    report.write_bytes(data)
    os.utime(report, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert report.stat().st_size == stat.st_size
    assert report_cache.read_cache(report, SCHEMA_VERSION) is None


def test_a_valid_cache_is_used(report: Path) -> None:
    first, _ = read_report(report)
    cached = report_cache.read_cache(report, SCHEMA_VERSION, columns=list(first.columns))
    assert cached is not None
    pd.testing.assert_frame_equal(first, cached[0], check_dtype=False)


def test_parquet_expanding_past_the_cap_is_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"zeros": pa.array([0] * 2_000_000, pa.int64())}), path,
                   compression="zstd")
    assert path.stat().st_size < 100_000  # 16 MB of zeros, compressed
    monkeypatch.setenv("TORCH_NSIGHT_MAX_EXPANDED", "1M")
    with pytest.raises(ReportError, match=r"bomb.parquet expands to more than 1 MiB.*"
                                          r"TORCH_NSIGHT_MAX_EXPANDED"):
        check_parquet_size(path)
    with pytest.raises(ReportError, match="expands to more than"):
        read_profile(path)


def _repeat_through_a_dictionary(source: Path, path: Path, column: str, size: int) -> None:
    """Write ``source`` to ``path`` with every value of ``column`` one string of ``size``
    bytes: Parquet stores it once, in the column's dictionary page."""
    table = pq.read_table(source)
    entry = pa.array(["x" * size] * table.num_rows, table.schema.field(column).type)
    table = table.set_column(table.schema.get_field_index(column), column, entry)
    pq.write_table(table, path, compression="zstd", use_dictionary=True)


def test_a_profile_repeating_a_string_through_its_dictionary_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    saved = DATA / "profile_format1.parquet"
    path = tmp_path / "names.parquet"
    _repeat_through_a_dictionary(saved, path, "kernel", 256 << 10)  # 30 rows: 7.5 MiB
    assert path.stat().st_size < 64 << 10
    chunk = pq.read_metadata(path).row_group(0).column(
        pq.read_schema(path).get_field_index("kernel"))
    assert chunk.has_dictionary_page and chunk.total_uncompressed_size < 1 << 20
    monkeypatch.setenv("TORCH_NSIGHT_MAX_EXPANDED", "1M")
    check_parquet_size(saved)  # the recorded profile itself passes
    with pytest.raises(ReportError, match=r"names.parquet expands to more than 1 MiB"):
        check_parquet_size(path)
    with pytest.raises(ReportError, match="expands to more than"):
        read_profile(path)
    assert main(["report", str(path)]) == 1
    out, err = capsys.readouterr()
    (line,) = err.strip().splitlines()
    assert out == "" and "expands to more than 1 MiB" in line
    monkeypatch.setenv("TORCH_NSIGHT_MAX_EXPANDED", "8M")
    check_parquet_size(path)  # 7.5 MiB of names and the other columns fit


def test_a_cache_repeating_a_string_through_its_dictionary_is_read_again(
        report: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, _ = read_report(report)
    path = cache_path(report)
    metadata = pq.read_schema(path).metadata
    _repeat_through_a_dictionary(path, path, "kernel", 1 << 20)
    pq.write_table(pq.read_table(path).replace_schema_metadata(metadata), path,
                   compression="zstd")
    monkeypatch.setenv("TORCH_NSIGHT_MAX_EXPANDED", "16M")
    assert len(first) > 16  # more than 16 MiB of names once expanded
    with pytest.raises(ReportError, match="expands to more than 16 MiB"):
        check_parquet_size(path)
    assert report_cache.read_cache(report, SCHEMA_VERSION) is None
    again, _ = read_report(report)
    pd.testing.assert_frame_equal(first, again, check_dtype=False)


def test_a_cache_expanding_past_the_cap_is_read_again_from_its_report(
        report: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    read_report(report)
    monkeypatch.setenv("TORCH_NSIGHT_MAX_EXPANDED", "1K")
    assert report_cache.read_cache(report, SCHEMA_VERSION) is None


def _forge(report: Path, table: pd.DataFrame, meta: dict) -> None:  # type: ignore[type-arg]
    """Write a cache of ``report`` holding ``table`` and ``meta`` with its key and table
    digest made to match (what someone forging a cache beside a report would do)."""
    assert report_cache.write_cache(report, table, meta, SCHEMA_VERSION) is not None


@pytest.mark.parametrize("change", [
    pytest.param(lambda f, m: (f.assign(duration_ns=["=1+1"] * len(f)), m),
                 id="text in a number column"),
    pytest.param(lambda f, m: (f.assign(kernel=range(len(f))), m), id="numbers as names"),
    pytest.param(lambda f, m: (f.assign(range_stack=[[1.5]] * len(f)), m),
                 id="numbers in a list of names"),
    pytest.param(lambda f, m: (f, {**m, "gpu": ["H100", 1.5]}), id="a number as a GPU"),
    pytest.param(lambda f, m: (f, {**m, "kernels": "many"}), id="text as a count"),
    pytest.param(lambda f, m: (f, {k: v for k, v in m.items() if k != "nvtx"}),
                 id="a key gone"),
])
def test_a_forged_cache_of_other_types_is_read_again(report: Path, change) -> None:  # type: ignore[no-untyped-def]
    # found by the fuzz harness (tests/report/fuzz_inputs.py): a cache whose key and digest
    # match but whose types do not raised TypeError and ValueError in the analysis
    first, meta = read_report(report)
    _forge(report, *change(first.copy(), dict(meta)))
    second, again = read_report(report)
    pd.testing.assert_frame_equal(first, second, check_dtype=False)
    assert again == meta


def test_a_forged_cache_keeps_its_lists_as_tuples(report: Path) -> None:
    # Arrow reads list columns back as arrays: a cache whose metadata does not name its tuple
    # columns still gives tuples (an array's truth value raised ValueError downstream)
    first, meta = read_report(report)
    table = pa.Table.from_pandas(first, preserve_index=False).to_pandas()
    assert not isinstance(table["range_stack"].iloc[0], tuple)
    _forge(report, table, meta)
    cached = report_cache.read_cache(report, SCHEMA_VERSION, columns=list(first.columns))
    assert cached is not None
    assert all(isinstance(v, tuple) for v in cached[0]["range_stack"])
    pd.testing.assert_frame_equal(first, read_report(report)[0], check_dtype=False)
