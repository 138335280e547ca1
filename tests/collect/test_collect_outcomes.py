"""What the children left: which items ended how, which reports count, what ends a sweep;
and a sweep directory read back whole (reports, replicated rows, failures)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight import formats
from torch_nsight.analyze import derive_columns
from torch_nsight.collect.parent.launch import ChildOutcome, ChildSpec
from torch_nsight.collect.parent.outcomes import judge_sweep, replication_groups
from torch_nsight.collect.parent.progress import Progress
from torch_nsight.collect.shared.ncu import NcuOutput
from torch_nsight.errors import NothingProfiledError, ReportError, ShapeFailedError
from torch_nsight.record import CollectionRecord
from torch_nsight.status import StatusReader, StatusWriter

DATA = Path(__file__).resolve().parents[1] / "data"
SWEEP_REPORT = DATA / "llama_block_sweep.ncu-rep.xz"
SWEEP_SHAPES = ("1x256x1024", "1x1024x1024", "1x4096x1024")
# tests/data/README.md: that sweep left the twins post_attention_layernorm and mlp.up_proj
# out of replay, standing in for them by input_layernorm and mlp.gate_proj.
TWINS = ({"representative": "input_layernorm", "replicas": ["post_attention_layernorm"]},
         {"representative": "mlp.gate_proj", "replicas": ["mlp.up_proj"]})


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


def test_items_children_and_problems(tmp_path: Path) -> None:
    group = [{"representative": "h.0", "replicas": ["h.1", "h.2"]}]
    outcomes = [outcome(tmp_path, "sweep-gpu0", [item("1x8", groups=group),
                                                 item("3x8", "failed")]),
                outcome(tmp_path, "sweep-gpu1", [item("2x8")], report=False,
                        lines=("==WARNING== No kernels were profiled.",))]
    items, children, problems, fatal = judge_sweep(outcomes, dry_run=False)
    assert fatal is None
    assert [i["shape"] for i in items] == ["1x8", "3x8", "2x8"]
    assert [c["report"] for c in children] == ["sweep-gpu0.ncu-rep", None]
    (problem,) = problems
    assert problem["child"] == "sweep-gpu1" and "ncu profiled no kernel" in problem["error"]
    record = CollectionRecord(shapes=("1x8", "2x8", "3x8"), items=tuple(items),
                         problems=tuple(problems))
    assert [(f["shape"], f["status"]) for f in record.failures] == [("3x8", "failed"),
                                                                     (None, "no report")]
    assert replication_groups(items) == [{**group[0], "variant": "eager", "shape": "1x8"}]


def test_nothing_profiled_anywhere(tmp_path: Path) -> None:
    outcomes = [outcome(tmp_path, "sweep", [item("1x8")], report=False,
                        lines=("==WARNING== No kernels were profiled.",))]
    *_, fatal = judge_sweep(outcomes, dry_run=False)
    assert isinstance(fatal, NothingProfiledError) and "no CUDA kernel launched" in str(fatal)


def test_every_shape_failed_and_a_dead_child(tmp_path: Path, caplog) -> None:
    outcomes = [outcome(tmp_path, "sweep", [item("1x8", "failed"), item("2x8", "failed")],
                        report=False)]
    *_, fatal = judge_sweep(outcomes, dry_run=True)
    assert isinstance(fatal, ShapeFailedError) and "1x8 (eager): CUDA out of memory" in str(fatal)
    running = item("1x8", "running")
    dead = outcome(tmp_path, "sweep", [item("2x8"), running], report=False, finished=False,
                   lines=("Segmentation fault",))
    items, _, _, fatal = judge_sweep([dead], dry_run=True)
    assert fatal is None
    (failure,) = [i for i in items if i["status"] != "ok"]
    assert failure["shape"] == "1x8" and "Segmentation fault" in failure["error"]
    # each failure is logged once
    assert caplog.text.count("Segmentation fault") == 1


def write_sweep_dir(directory: Path) -> Path:
    """A sweep directory around the recorded sweep report, as the sweep writes it."""
    directory.mkdir()
    shutil.copy(SWEEP_REPORT, directory / "sweep.ncu-rep.xz")
    items = [{"variant": None, "shape": shape, "status": "ok", "error": None,
              "child": "sweep", "replication": {"status": "replicated",
                                                "groups": [dict(g) for g in TWINS]}}
             for shape in SWEEP_SHAPES]
    items.append({"variant": None, "shape": "8x4096x1024", "status": "failed",
                  "error": "OutOfMemoryError: CUDA out of memory", "child": "sweep"})
    record = CollectionRecord(shapes=(*SWEEP_SHAPES, "8x4096x1024"), items=tuple(items),
                         options={"metric_set": "roofline"}, output_dir=str(directory))
    formats.write_json(directory / formats.SWEEP_MANIFEST, {
        "kind": formats.SWEEP_KIND, "format": formats.SWEEP_FORMAT,
        "record": record.to_dict(),
        "children": [{"name": "sweep", "report": "sweep.ncu-rep.xz"}],
        "replication": replication_groups(items), "calls": [],
        "settings": {"summary": "TF32 matmul on"}})
    return directory


def test_a_sweep_directory_loads_every_row(tmp_path: Path) -> None:
    directory = write_sweep_dir(tmp_path / "out")
    whole = torch_nsight.load(directory, cache=False)
    raw = load_recorded(SWEEP_REPORT)
    k = whole.kernels
    for shape in SWEEP_SHAPES:
        mine = k[k["shape"] == shape]
        measured = raw.kernels[raw.kernels["shape"] == shape]
        for twin in TWINS:
            copies = mine[mine["module"] == twin["replicas"][0]]
            source = measured[measured["module"] == twin["representative"]]
            assert len(copies) == len(source) > 0
            assert copies["duration_ns"].tolist() == source["duration_ns"].tolist()
            assert (copies["replicated_from"] == twin["representative"]).all()
    assert len(k) == len(raw.kernels) + whole.replicated_rows
    assert whole.replicated_rows == sum(
        len(raw.kernels[(raw.kernels["shape"] == s)
                        & raw.kernels["module"].isin([t["representative"] for t in TWINS])])
        for s in SWEEP_SHAPES)
    # roll-ups see the copies: the replica is in the module tree
    tree = whole.modules()
    assert "LlamaBlock/mlp/mlp.up_proj" in set(tree["module_path"])
    assert [(f["shape"], f["status"]) for f in whole.failures] == [("8x4096x1024", "failed")]
    assert whole.shapes == [*SWEEP_SHAPES, "8x4096x1024"]
    assert "TF32 matmul on" in whole.describe()


def test_the_raw_report_of_a_sweep_says_where_its_replicas_are(tmp_path: Path,
                                                                caplog) -> None:
    directory = write_sweep_dir(tmp_path / "out")
    for _ in range(2):  # every load says it, cached or not
        caplog.clear()
        alone = torch_nsight.load(directory / "sweep.ncu-rep.xz")
        assert alone.replicated_rows == 0
        assert "load the directory" in caplog.text and str(directory) in caplog.text
    assert any("load the directory" in note for note in alone.notes)


def test_a_folder_without_reports_says_so(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="holds no .ncu-rep report"):
        torch_nsight.load(tmp_path)


def test_derive_columns_get_the_row_and_the_shape(caplog) -> None:
    kernels = pd.DataFrame({"shape": ["4x128", "1x8"], "duration_ns": [1e6, 2e6]})
    shapes = {"4x128": (4, 128), "1x8": (1, 8)}
    out = derive_columns(kernels, {
        "tokens_per_s": lambda row, shape: shape[0] * shape[1] / (row["duration_ns"] * 1e-9),
        "broken": lambda row, shape: 1 / 0}, shapes)
    assert list(out["tokens_per_s"]) == [512_000.0, 4_000.0]
    assert out["broken"].isna().all() and "broken" in caplog.text
    assert "tokens_per_s" not in kernels


def test_status_lines_and_progress(tmp_path: Path, capsys) -> None:
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
    # off a terminal the bar stays silent (tqdm's disable=None)
    bar = Progress("shape", 4)
    bar.update(done=2, failed=1, kernels=12, current=["eager:1x8"])
    bar.close()
    assert capsys.readouterr().err == ""
    assert Progress("shape", 1, quiet=True)._bar is None


def test_progress_bar_shows_done_failed_and_kernels(monkeypatch) -> None:
    import tqdm.auto

    stream = io.StringIO()
    real = tqdm.auto.tqdm
    monkeypatch.setattr(tqdm.auto, "tqdm",
                        lambda **kw: real(**{**kw, "file": stream, "disable": False}))
    bar = Progress("shape", 4)
    bar.update(done=2, failed=1, kernels=12, current=["eager:1x8"])
    bar.close()
    text = stream.getvalue()
    assert "2/4" in text and "1 failed" in text and "12 kernels profiled" in text
