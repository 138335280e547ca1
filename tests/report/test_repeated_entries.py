"""Manifests that name one file several times (issue 45): a sweep's ``children`` or a
timeline's ``items`` listed three times used to triple every time silently; now the
directory is refused in one line naming the manifest and the repeated file. The
directories are copies of tests/data/sweep_stack and tests/data/timeline_train."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.errors import ReportError

DATA = Path(__file__).resolve().parents[1] / "data"


def _copy(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(DATA / name, folder, ignore=shutil.ignore_patterns("*.tn-cache.parquet"))
    return folder


def _repeat(manifest: Path, key: str, times: int = 3) -> None:
    document = json.loads(manifest.read_text())
    document[key] = document[key] * times
    manifest.write_text(json.dumps(document))


def test_a_sweep_listing_its_child_three_times_is_refused(tmp_path: Path) -> None:
    folder = _copy("sweep_stack", tmp_path)
    once = len(torch_nsight.load(folder, cache_dir=tmp_path / "caches").kernels)
    assert once > 0
    _repeat(folder / "sweep.json", "children")
    with pytest.raises(ReportError) as raised:
        torch_nsight.load(folder, cache_dir=tmp_path / "caches")
    message = str(raised.value)
    assert message.startswith(f"{folder / 'sweep.json'} lists the same child report more "
                              "than once (sweep.ncu-rep.xz 3 times)")
    assert "\n" not in message and "record it again" in message


def test_a_sweep_naming_one_report_by_two_spellings_is_refused(tmp_path: Path) -> None:
    folder = _copy("sweep_stack", tmp_path)
    document = json.loads((folder / "sweep.json").read_text())
    child = dict(document["children"][0])
    child["report"] = f"./{child['report']}"
    document["children"].append(child)
    (folder / "sweep.json").write_text(json.dumps(document))
    with pytest.raises(ReportError, match="2 times"):
        torch_nsight.load(folder, cache_dir=tmp_path / "caches")


def test_a_timeline_listing_its_item_three_times_is_refused(tmp_path: Path) -> None:
    folder = _copy("timeline_train", tmp_path)
    _repeat(folder / "timeline.json", "items")
    with pytest.raises(ReportError, match=r"timeline.json lists the same trace more than "
                                          r"once \(trace-0.json.gz 3 times\)"):
        torch_nsight.load(folder)
