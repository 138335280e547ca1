"""tests/recorded.py: a recording read once per process gives what a fresh read gives, and
each call its own copy."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded, read_recorded
from torch_nsight.report import read_report

DATA = Path(__file__).resolve().parent / "data"
REPORT = DATA / "hand_s128.ncu-rep.xz"


def test_a_shared_read_is_a_fresh_read() -> None:
    shared, fresh = load_recorded(REPORT), torch_nsight.load(REPORT, cache=False)
    pd.testing.assert_frame_equal(shared.kernels, fresh.kernels)
    pd.testing.assert_frame_equal(shared.calls, fresh.calls)
    # every field but the time of the read
    assert dataclasses.replace(shared.meta, created=fresh.meta.created) == fresh.meta
    assert shared.timeline is fresh.timeline is None
    frame, meta = read_recorded(REPORT)
    again, again_meta = read_report(REPORT, cache=False)
    pd.testing.assert_frame_equal(frame, again)
    assert meta == again_meta


def test_what_one_test_changes_the_next_does_not_see() -> None:
    first = load_recorded(REPORT)
    kept = load_recorded(REPORT)
    first.kernels.loc[0, "duration_ns"] = -1.0
    first.kernels.at[0, "range_stack"] = ("changed",)
    first.calls.loc[:, "flops"] = -1.0
    first.meta.settings["changed"] = True
    first.findings()  # computed on the copy, kept by the copy alone
    again = load_recorded(REPORT)
    pd.testing.assert_frame_equal(again.kernels, kept.kernels)
    pd.testing.assert_frame_equal(again.calls, kept.calls)
    assert again.kernels.loc[0, "duration_ns"] > 0 and (again.calls["flops"] > 0).any()
    assert again.meta == kept.meta and "changed" not in again.meta.settings
    assert not again._computed
    raw, meta = read_recorded(REPORT)
    raw.loc[0, "duration_ns"] = -1.0
    meta["gpu"] = "changed"
    assert read_recorded(REPORT)[0].loc[0, "duration_ns"] > 0
    assert read_recorded(REPORT)[1]["gpu"] != "changed"


def test_only_the_checkouts_recordings_are_shared(tmp_path: Path) -> None:
    copy = shutil.copy(REPORT, tmp_path / REPORT.name)
    with pytest.raises(ValueError, match="only the checkout's recordings"):
        load_recorded(copy)
    with pytest.raises(ValueError, match="only the checkout's recordings"):
        read_recorded(Path("tests/data") / REPORT.name)  # relative
    with pytest.raises(ValueError, match="reads without a cache"):
        load_recorded(REPORT, cache=True)
