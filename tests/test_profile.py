"""The Profile record and load(): real recorded reports through the real reader, plus the
record's own save/read/concat behaviour."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from torch_nsight.errors import ReportError
from torch_nsight.profile import KERNEL_COLUMNS, Profile, load


def small_profile(shape: str = "1x8", source: str = "a.ncu-rep") -> Profile:
    kernels = pd.DataFrame({
        "variant": [None, None], "shape": [shape, shape], "run": [0, 0],
        "module": ["Net", "(unattributed)"], "module_path": ["Net", "(unattributed)"],
        "direction": ["fwd", None], "kernel": ["gemm", "copy"], "duration_ns": [30.0, 10.0],
        "source": [source, source], "nvtx_stack": [("Net",), ()],
    })
    return Profile(kernels, {"sources": [source], "shapes": [shape], "gpu": "GPU X",
                             "failures": [{"shape": "big", "error": "OOM"}]})


def test_save_and_read_round_trip(tmp_path: Path) -> None:
    profile = small_profile()
    path = profile.save(tmp_path / "p.parquet")
    again = Profile.read(path)
    assert again.meta == profile.meta
    assert again.kernels["duration_ns"].tolist() == [30.0, 10.0]
    assert again.kernels["nvtx_stack"].tolist() == [("Net",), ()]
    assert again.coverage == pytest.approx(0.75)


def test_read_tolerates_an_older_file_with_fewer_columns(tmp_path: Path) -> None:
    table = pa.table({"module": ["Net"], "duration_ns": [5.0]})
    meta = json.dumps({"format": 0, "meta": {"gpu": "old"}}).encode()
    table = table.replace_schema_metadata({b"torch_nsight.profile": meta})
    pq.write_table(table, tmp_path / "old.parquet")
    profile = Profile.read(tmp_path / "old.parquet")
    assert set(KERNEL_COLUMNS) <= set(profile.kernels.columns)
    assert profile.kernels["headroom_ns"].isna().all()
    assert profile.meta == {"gpu": "old"}


def test_read_refuses_other_files(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    with pytest.raises(ReportError, match="not a torch_nsight profile"):
        Profile.read(tmp_path / "other.parquet")
    (tmp_path / "text.parquet").write_text("hello")
    with pytest.raises(ReportError, match="not a Parquet file"):
        Profile.read(tmp_path / "text.parquet")
    with pytest.raises(ReportError, match="does not exist"):
        Profile.read(tmp_path / "absent.parquet")


def test_concat_joins_tables_and_merges_meta() -> None:
    joined = Profile.concat([small_profile("1x8", "a"), small_profile("1x16", "b")])
    assert len(joined.kernels) == 4
    assert joined.meta["shapes"] == ["1x8", "1x16"]
    assert joined.meta["sources"] == ["a", "b"]
    assert len(joined.meta["failures"]) == 2 and joined.meta["gpu"] == "GPU X"
    with pytest.raises(ValueError):
        Profile.concat([])


def test_concat_tolerates_replicated_from_in_one_table_only() -> None:
    one = small_profile()
    two = small_profile()
    two.kernels["replicated_from"] = ["Net", None]
    joined = Profile.concat([one, two])
    assert joined.kernels["replicated_from"].notna().sum() == 1


@pytest.mark.parametrize(("paths", "kwargs", "error"), [
    ([], {}, ValueError),
    (42, {}, TypeError),
    ([42], {}, TypeError),
    (["a.ncu-rep"], {"shapes": "1x8"}, TypeError),
    (["a.ncu-rep"], {"shapes": ["1x8", "1x16"]}, ValueError),
])
def test_load_validates_arguments(paths: object, kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        load(paths, **kwargs)  # type: ignore[arg-type]
