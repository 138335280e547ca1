"""What a result folder may make the reader do: paths from a manifest stay inside it, and
the caches it writes follow the umask."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.errors import ReportError

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A copy of a real sweep directory, and a real report outside it ("the victim")."""
    sweep = tmp_path / "sweep"
    shutil.copytree(DATA / "sweep_stack", sweep)
    victim = tmp_path / "victim"
    victim.mkdir()
    shutil.copy(sweep / "sweep.ncu-rep.xz", victim / "x.ncu-rep.xz")
    (sweep / "sweep.ncu-rep.xz").unlink()
    return sweep


@pytest.mark.parametrize("pointer", ["../victim/x.ncu-rep.xz", "{victim}/x.ncu-rep.xz"])
def test_a_manifest_cannot_send_the_reader_outside_its_folder(planted: Path, pointer: str,
                                                              tmp_path: Path) -> None:
    manifest = json.loads((planted / "sweep.json").read_text())
    manifest["children"][0]["report"] = pointer.format(victim=tmp_path / "victim")
    (planted / "sweep.json").write_text(json.dumps(manifest))
    with pytest.raises(ReportError, match="outside"):
        torch_nsight.load(planted)
    assert sorted(p.name for p in (tmp_path / "victim").iterdir()) == ["x.ncu-rep.xz"]


@pytest.fixture
def umask_027() -> Iterator[None]:
    previous = os.umask(0o027)
    yield
    os.umask(previous)


def test_report_caches_follow_the_umask(tmp_path: Path, umask_027: None) -> None:
    report = tmp_path / "run.ncu-rep.xz"
    shutil.copy(DATA / "profile_steps.ncu-rep.xz", report)
    torch_nsight.load(report, cache_dir=tmp_path / "caches")
    caches = list((tmp_path / "caches").iterdir())
    assert len(caches) == 1
    assert stat.S_IMODE(caches[0].stat().st_mode) == 0o640  # 0666 under umask 027


def test_dir_lists_the_lazily_imported_names() -> None:
    assert {"load", "sweep", "instrument", "timeline", "step", "Profile"} <= set(
        dir(torch_nsight))


def test_an_unrelated_json_beside_the_reports_is_skipped(tmp_path: Path) -> None:
    shutil.copy(DATA / "profile_steps.ncu-rep.xz", tmp_path / "run.ncu-rep.xz")
    (tmp_path / "config.json").write_text(json.dumps({"lr": 1e-4, "layers": 12}))
    profile = torch_nsight.load(tmp_path, cache=False)
    expected = load_recorded(DATA / "profile_steps.ncu-rep.xz")
    assert len(profile.kernels) == len(expected.kernels)


def _move_out(path: Path, elsewhere: Path) -> None:
    """Move ``path`` to ``elsewhere`` and leave a link to it in its place."""
    shutil.move(path, elsewhere)
    path.symlink_to(elsewhere)


def test_an_xz_fallback_linked_outside_the_folder_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_NSIGHT_CACHE_DIR")  # a cache would go beside the report
    sweep = tmp_path / "sweep"
    shutil.copytree(DATA / "sweep_stack", sweep)
    victim = tmp_path / "victim"
    victim.mkdir()
    _move_out(sweep / "sweep.ncu-rep.xz", victim / "x.ncu-rep.xz")
    with pytest.raises(ReportError, match="sweep.json leads outside .*sweep.ncu-rep.xz"):
        torch_nsight.load(sweep)
    assert sorted(p.name for p in victim.iterdir()) == ["x.ncu-rep.xz"]
    assert sorted(p.name for p in sweep.iterdir()) == sorted(
        p.name for p in (DATA / "sweep_stack").iterdir())


@pytest.mark.parametrize(("fixture", "moved", "match"), [
    ("sweep_focused", "timeline", "timeline leads outside"),  # a focused sweep's timeline
    ("timeline_decode", "trace-0.json.gz", "timeline.json leads outside"),  # a trace
])
def test_a_folder_a_manifest_leads_to_linked_outside_is_refused(
        tmp_path: Path, fixture: str, moved: str, match: str) -> None:
    folder = tmp_path / "read"
    shutil.copytree(DATA / fixture, folder)
    _move_out(folder / moved, tmp_path / f"elsewhere-{moved}")
    with pytest.raises(ReportError, match=match):
        torch_nsight.load(folder)


def test_a_calls_file_linked_outside_the_reports_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(DATA / "hand_s128.ncu-rep.xz", folder / "hand_s128.ncu-rep.xz")
    shutil.copy(DATA / "hand_s128.calls.json", tmp_path / "elsewhere.calls.json")
    (folder / "hand_s128.calls.json").symlink_to(tmp_path / "elsewhere.calls.json")
    with pytest.raises(ReportError, match="calls file beside .* leads outside"):
        torch_nsight.load(folder / "hand_s128.ncu-rep.xz")


def test_a_linked_reports_cache_goes_in_the_folder_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_NSIGHT_CACHE_DIR")
    (tmp_path / "target").mkdir()
    (tmp_path / "read").mkdir()
    shutil.copy(DATA / "profile_steps.ncu-rep.xz", tmp_path / "target" / "run.ncu-rep.xz")
    link = tmp_path / "read" / "run.ncu-rep.xz"
    link.symlink_to(tmp_path / "target" / "run.ncu-rep.xz")
    torch_nsight.load(link)
    assert [p.name for p in (tmp_path / "target").iterdir()] == ["run.ncu-rep.xz"]
    assert len(list((tmp_path / "read").iterdir())) == 2  # the link and its cache
