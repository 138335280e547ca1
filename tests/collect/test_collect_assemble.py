"""Merging the children's results: reports loaded, replicas expanded, failures kept."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight.profile as profile_module
from torch_nsight.collect.assemble import assemble, derive_columns
from torch_nsight.collect.launch import ChildOutcome, ChildSpec
from torch_nsight.collect.ncu import NcuOutput
from torch_nsight.collect.progress import ProgressLine, StatusReader, StatusWriter, print_summary
from torch_nsight.errors import NothingProfiledError, ShapeFailedError
from torch_nsight.profile import Profile


def outcome(tmp_path: Path, name: str, items: list[dict], *, report: bool = True,
            lines: tuple[str, ...] = (), finished: bool = True) -> ChildOutcome:
    path = tmp_path / f"{name}.ncu-rep"
    if report:
        path.write_bytes(b"report")
    spec = ChildSpec(name, ["ncu"], {}, tmp_path / "s", tmp_path / "r", path, None, len(items))
    output = NcuOutput()
    for line in lines:
        output.feed(line)
    return ChildOutcome(spec, 0, output, {"items": items, "finished": finished,
                                          "device": "cuda (fake)"})


def item(shape: str, status: str = "ok", groups: list | None = None) -> dict:
    return {"variant": "eager", "shape": shape, "status": status,
            "error": None if status == "ok" else "CUDA out of memory",
            "replication": {"status": "replicated" if groups else "none",
                            "groups": groups or [], "mismatches": []}}


def fake_load(paths, cache=True):
    (path,) = paths
    shape = {"sweep-gpu0": "1x8", "sweep-gpu1": "2x8"}[Path(path).stem]
    rows = [{"variant": "eager", "shape": shape, "run": 0, "module": m, "direction": "fwd",
             "module_path": f"Stack/{m}", "kernel": "gemm", "duration_ns": 10.0}
            for m in ("h.0", "head")]
    return Profile(pd.DataFrame(rows), {"sources": [str(path)], "failures": [],
                                        "shapes": [shape], "variants": ["eager"]})


def test_children_merge_with_replicas_and_failures(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(profile_module, "load", fake_load)
    group = [{"representative": "h.0", "replicas": ["h.1", "h.2"], "ops": 3, "time_ms": {}}]
    outcomes = [outcome(tmp_path, "sweep-gpu0", [item("1x8", groups=group), item("3x8", "failed")]),
                outcome(tmp_path, "sweep-gpu1", [item("2x8")])]
    profile = assemble(outcomes, variants=["eager"], shapes=["1x8", "2x8", "3x8"],
                       dry_run=False)
    table = profile.kernels
    assert sorted(table[table["shape"] == "1x8"]["module"]) == ["h.0", "h.1", "h.2", "head"]
    assert sorted(table[table["shape"] == "2x8"]["module"]) == ["h.0", "head"]
    assert profile.meta["replicated_rows"] == 2
    (failure,) = profile.meta["failures"]
    assert failure == {"variant": "eager", "shape": "3x8", "status": "failed",
                       "error": "CUDA out of memory", "child": "sweep-gpu0"}
    assert profile.meta["shapes"] == ["1x8", "2x8", "3x8"]
    assert len(profile.meta["reports"]) == 2 and len(profile.meta["results"]) == 3
    assert profile.meta["replication"]["eager|1x8"]["status"] == "replicated"


def test_a_child_without_report_loses_only_its_shapes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(profile_module, "load", fake_load)
    outcomes = [outcome(tmp_path, "sweep-gpu0", [item("1x8")]),
                outcome(tmp_path, "sweep-gpu1", [item("2x8")], report=False,
                        lines=("==WARNING== No kernels were profiled.",))]
    profile = assemble(outcomes, variants=["eager"], shapes=["1x8", "2x8"], dry_run=False)
    assert set(profile.kernels["shape"]) == {"1x8"}
    assert profile.meta["failures"][-1]["status"] == "no report"


def test_nothing_profiled_anywhere(tmp_path: Path) -> None:
    outcomes = [outcome(tmp_path, "sweep", [item("1x8")], report=False,
                        lines=("==WARNING== No kernels were profiled.",))]
    with pytest.raises(NothingProfiledError, match="no CUDA kernel launched"):
        assemble(outcomes, variants=["eager"], shapes=["1x8"], dry_run=False)


def test_every_shape_failed_and_a_dead_child(tmp_path: Path) -> None:
    outcomes = [outcome(tmp_path, "sweep", [item("1x8", "failed"), item("2x8", "failed")],
                        report=False)]
    with pytest.raises(ShapeFailedError, match="1x8 \\(eager\\): CUDA out of memory"):
        assemble(outcomes, variants=["eager"], shapes=["1x8", "2x8"], dry_run=True)
    running = item("1x8", "running")
    dead = outcome(tmp_path, "sweep", [item("2x8"), running], report=False, finished=False,
                   lines=("Segmentation fault",))
    profile = assemble([dead], variants=["eager"], shapes=["1x8", "2x8"], dry_run=True)
    (failure,) = profile.meta["failures"]
    assert failure["shape"] == "1x8" and "Segmentation fault" in failure["error"]


def test_derive_columns_get_the_row_and_the_shape(caplog) -> None:
    kernels = pd.DataFrame({"shape": ["4x128", "1x8"], "duration_ns": [1e6, 2e6]})
    shapes = {"4x128": (4, 128), "1x8": (1, 8)}
    out = derive_columns(kernels, {
        "tokens_per_s": lambda row, shape: shape[0] * shape[1] / (row["duration_ns"] * 1e-9),
        "broken": lambda row, shape: 1 / 0}, shapes)
    assert list(out["tokens_per_s"]) == [512_000.0, 4_000.0]
    assert out["broken"].isna().all() and "broken" in caplog.text
    assert "tokens_per_s" not in kernels


def test_status_lines_and_progress(tmp_path: Path) -> None:
    path = tmp_path / "status.jsonl"
    writer, reader = StatusWriter(path), StatusReader(path)
    assert reader.poll() == []
    writer.emit("start", pid=1)
    with open(path, "a") as handle:
        handle.write('{"event": "item_st')  # half a line: waits for the rest
    assert [e["event"] for e in reader.poll()] == ["start"]
    with open(path, "a") as handle:
        handle.write('art", "index": 0}\n')
    assert [e["event"] for e in reader.poll()] == ["item_start"]
    stream = io.StringIO()
    line = ProgressLine(4, stream=stream)
    line.current = ["eager:1x8"]
    line.refresh()
    line.kernels = 12
    line.refresh()  # same shape: no new line off a terminal
    line.done, line.current = 2, []
    line.refresh()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("torch_nsight sweep: shape 1/4 (eager:1x8)")
    assert "3/4" in lines[1] and "12 kernels profiled" in lines[1] and "left" in lines[1]
    quiet = io.StringIO()
    ProgressLine(1, quiet=True, stream=quiet).refresh(force=True)
    assert quiet.getvalue() == ""


def test_summary_prints_hotspots_per_shape(tmp_path) -> None:
    import shutil
    from pathlib import Path

    import torch_nsight

    fixture = Path(__file__).resolve().parents[1] / "data" / "llama_block_sweep.ncu-rep.xz"
    report = shutil.copy(fixture, tmp_path)
    profile = torch_nsight.load(report)
    stream = io.StringIO()
    print_summary(profile, n=3, stream=stream)
    text = stream.getvalue()
    kernels = profile.kernels
    for shape, rows in kernels.groupby("shape"):
        section = text.split(f"hotspots (shape={shape}):", 1)[1].split("hotspots (", 1)[0]
        slowest = rows.loc[rows["duration_ns"].idxmax()]
        assert str(slowest["module"]) in section.splitlines()[2], (shape, section)
