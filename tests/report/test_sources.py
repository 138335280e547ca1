"""The source registry on real recordings (tests/data/README.md): a sweep directory, reports
recorded by hand with their calls files, and a report whose ranges came from emit_nvtx."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze import UNATTRIBUTED
from torch_nsight.errors import ReportError
from torch_nsight.report.cache import CACHE_DIR_ENV, CACHE_SUFFIX
from torch_nsight.vocabulary import in_module_range, outside_module

DATA = Path(__file__).resolve().parents[1] / "data"
SWEEP = DATA / "sweep_stack"
HAND = [DATA / "hand_s128.ncu-rep.xz", DATA / "hand_s512.ncu-rep.xz"]
EMIT = DATA / "emit_nvtx.ncu-rep.xz"
# tests/data/record_sources.py: four LlamaBlock(256, 4, 704) in a Sequential, bf16, batch 2
HIDDEN, INTERMEDIATE, BATCH = 256, 704, 2
PROJECTIONS = {"self_attn.qkv_proj": (HIDDEN, 3 * HIDDEN), "self_attn.o_proj": (HIDDEN, HIDDEN),
               "mlp.gate_proj": (HIDDEN, INTERMEDIATE), "mlp.up_proj": (HIDDEN, INTERMEDIATE),
               "mlp.down_proj": (INTERMEDIATE, HIDDEN)}
MANIFEST = json.loads((SWEEP / "sweep.json").read_text())


@pytest.fixture(scope="module")
def sweep() -> torch_nsight.Profile:
    return load_recorded(SWEEP)


@pytest.fixture(scope="module")
def raw() -> torch_nsight.Profile:
    return load_recorded(SWEEP / "sweep.ncu-rep.xz")


def seq_of(shape: str) -> int:
    return int(shape.split("x")[1])


def test_the_directory_gives_every_block_its_rows(sweep, raw) -> None:
    k = sweep.kernels
    assert sweep.shapes == ["2x128x256", "2x512x256"] and sweep.failures == []
    # every kernel is in a module range but the loss's (op:loss, outside the model: its row)
    assert UNATTRIBUTED not in set(k["module"])
    assert set(k.loc[~k["module"].map(in_module_range), "module"]) == {outside_module("loss")}
    assert len(k) == len(raw.kernels) + sweep.replicated_rows and sweep.replicated_rows > 0
    for group in MANIFEST["replication"]:
        here = k[k["shape"] == group["shape"]]
        rep = here[here["module_path"].str.contains(f"/{group['representative']}(?:/|$)",
                                                    regex=True)]
        for replica in group["replicas"]:
            copies = here[here["module_path"].str.contains(f"/{replica}(?:/|$)", regex=True)]
            assert len(copies) == len(rep) > 0, (group, replica)
            assert sorted(copies["duration_ns"]) == sorted(rep["duration_ns"])
    # each of the four blocks has the same kernels per shape and direction, measured or copied
    for _, rows in k.groupby(["shape", "direction"]):
        blocks = rows["module_path"].str.split("/").str[1]
        counts = blocks.value_counts()
        assert sorted(counts.index) == ["0", "1", "2", "3"] and counts.nunique() <= 2
    tree = sweep.modules(depth=1)
    assert {"Sequential/2", "Sequential/3"} <= set(tree["module_path"])


def test_the_raw_report_of_the_sweep_points_to_its_directory(raw, caplog) -> None:
    assert raw.replicated_rows == 0
    assert any(f"load the directory ({SWEEP.resolve()})" in n for n in raw.notes)
    torch_nsight.load(SWEEP / "sweep.ncu-rep.xz", cache=False)
    assert "load the directory" in caplog.text


@pytest.mark.parametrize("module", sorted(PROJECTIONS))
def test_the_calls_table_holds_every_projection_at_its_shape(sweep, module: str) -> None:
    fan_in, fan_out = PROJECTIONS[module]
    calls = sweep.calls
    for shape in sweep.shapes:
        rows_in = BATCH * seq_of(shape)
        for block in range(4):
            name = f"{block}.{module}"
            gemm = calls[(calls["shape"] == shape) & (calls["module"] == name)
                         & (calls["direction"] == "fwd") & calls["aten_op"].isin(["mm", "addmm"])]
            assert len(gemm) == 1, (shape, name)
            assert gemm["flops"].iloc[0] == 2 * rows_in * fan_in * fan_out
            assert gemm["input_shapes"].iloc[0][-2:] == ((rows_in, fan_in), (fan_in, fan_out))
            backward = calls[(calls["shape"] == shape) & (calls["module"] == name)
                             & (calls["direction"] == "bwd") & (calls["aten_op"] == "mm")]
            # grad of the input and of the weight; one row with count 2 when their shapes match
            flops = [f for f, n in zip(backward["flops"], backward["count"], strict=True)
                     for _ in range(n)]
            assert flops == [2 * rows_in * fan_in * fan_out] * 2


def test_each_shape_holds_only_its_own_calls(sweep) -> None:
    calls = sweep.calls
    for shape in sweep.shapes:
        others = {(BATCH, seq_of(s), HIDDEN) for s in sweep.shapes if s != shape}
        mine = calls[calls["shape"] == shape]
        assert not any(dims in others for shapes in mine["input_shapes"] for dims in shapes)


def test_calls_join_kernels_on_module_path_direction_and_shape(sweep) -> None:
    keys = ["shape", "module_path", "direction"]
    gemms = sweep.calls[sweep.calls["aten_op"].isin(["mm", "addmm"])]
    kernel_keys = set(map(tuple, sweep.kernels[keys].astype(str).to_numpy()))
    missing = [key for key in map(tuple, gemms[keys].astype(str).to_numpy())
               if key not in kernel_keys]
    assert missing == []


def test_saved_and_read_back_the_calls_table_stays(sweep, tmp_path: Path) -> None:
    again = torch_nsight.load(sweep.save(tmp_path / "p.parquet"))
    assert again.calls["input_shapes"].tolist() == sweep.calls["input_shapes"].tolist()
    assert again.calls["flops"].equals(sweep.calls["flops"])


def test_hand_recorded_reports_are_labelled_by_file_not_averaged() -> None:
    both = load_recorded(HAND)
    assert both.shapes == ["hand_s128", "hand_s512"]
    tree = both.modules()
    gate = tree[(tree["module"] == "mlp.gate_proj") & (tree["direction"] == "fwd")]
    assert gate["shape"].tolist() == ["hand_s128", "hand_s512"]
    small, large = gate["inclusive_ns"].tolist()
    alone = [load_recorded(p).modules() for p in HAND]
    for one, expected in zip(alone, (small, large), strict=True):
        row = one[(one["module"] == "mlp.gate_proj") & (one["direction"] == "fwd")]
        assert row["inclusive_ns"].tolist() == [expected]
    labelled = load_recorded(HAND, labels=["seq128", "seq512"])
    assert labelled.shapes == ["seq128", "seq512"]


def test_a_calls_file_beside_a_report_is_read_with_it() -> None:
    both = load_recorded(HAND)
    calls = both.calls
    assert set(calls["shape"]) == {"hand_s128", "hand_s512"}
    for label, seq in (("hand_s128", 128), ("hand_s512", 512)):
        gate = calls[(calls["shape"] == label) & (calls["module"] == "mlp.gate_proj")
                     & (calls["direction"] == "fwd") & calls["aten_op"].isin(["mm", "addmm"])]
        assert gate["flops"].tolist() == [2 * BATCH * seq * HIDDEN * INTERMEDIATE]
    kernels = both.kernels
    gemm = kernels[(kernels["module"] == "mlp.gate_proj") & (kernels["direction"] == "fwd")]
    assert set(gemm["shape"]) == {"hand_s128", "hand_s512"}


def test_a_calls_file_can_be_given_separately(tmp_path: Path) -> None:
    report = shutil.copy(HAND[0], tmp_path / "run.ncu-rep.xz")
    assert torch_nsight.load(report).calls is None
    given = torch_nsight.load(report, calls=DATA / "hand_s128.calls.json")
    assert len(given.calls) > 0
    with pytest.raises(ReportError, match="not a torch_nsight calls file"):
        torch_nsight.load(report, calls=SWEEP / "sweep.json")
    with pytest.raises(ValueError, match="one report recorded by hand"):
        torch_nsight.load([report, HAND[1]], calls=DATA / "hand_s128.calls.json")


def test_a_missing_child_report_is_said(tmp_path: Path, caplog) -> None:
    copy = shutil.copytree(SWEEP, tmp_path / "sweep")
    manifest = json.loads((copy / "sweep.json").read_text())
    manifest["children"].append({"name": "sweep-gpu1", "report": "sweep-gpu1.ncu-rep"})
    (copy / "sweep.json").write_text(json.dumps(manifest))
    profile = torch_nsight.load(copy, cache=False)
    assert any("sweep-gpu1" in note and "missing" in note for note in profile.notes)
    assert "sweep-gpu1" in caplog.text


def test_labels_for_a_folder_are_refused(tmp_path: Path) -> None:
    for path in HAND:
        shutil.copy(path, tmp_path / path.name)
    assert torch_nsight.load(tmp_path, cache=False).shapes == ["hand_s128", "hand_s512"]
    with pytest.raises(ValueError, match="a folder of reports"):
        torch_nsight.load(tmp_path, labels=["a"], cache=False)


def test_emit_nvtx_ranges_are_named_on_every_load(tmp_path: Path, caplog,
                                                   monkeypatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV)  # the default: the cache beside the report
    report = shutil.copy(EMIT, tmp_path / "emit.ncu-rep.xz")
    for _ in range(2):  # the second load comes from the cache and still says it
        caplog.clear()
        profile = torch_nsight.load(report)
        assert "emit_nvtx" in caplog.text and "torch_nsight.instrument()" in caplog.text
    assert (tmp_path / f"emit.ncu-rep.xz{CACHE_SUFFIX}").is_file()
    assert profile.coverage == 0.0 and set(profile.kernels["module"]) == {UNATTRIBUTED}
    assert [s.has_module_ranges for s in profile.meta.sources] == [False]


def test_the_cache_goes_where_it_is_told(tmp_path: Path, monkeypatch) -> None:
    report = shutil.copy(HAND[0], tmp_path / "run.ncu-rep.xz")
    caches = tmp_path / "caches"
    torch_nsight.load(report, cache_dir=caches)
    assert not list(tmp_path.glob(f"*{CACHE_SUFFIX}"))
    assert len(list(caches.glob(f"*{CACHE_SUFFIX}"))) == 1
    elsewhere = tmp_path / "env"
    monkeypatch.setenv(CACHE_DIR_ENV, str(elsewhere))
    torch_nsight.load(report)
    assert len(list(elsewhere.glob(f"*{CACHE_SUFFIX}"))) == 1


def test_a_cache_that_cannot_be_written_is_skipped_quietly(tmp_path: Path, caplog) -> None:
    report = shutil.copy(HAND[0], tmp_path / "run.ncu-rep.xz")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would go")
    profile = torch_nsight.load(report, cache_dir=blocked)
    assert len(profile.kernels) == 40 and "cache" not in caplog.text.lower()
    assert not list(tmp_path.rglob(f"*{CACHE_SUFFIX}"))


def test_a_report_given_twice_under_one_label_is_read_once(caplog) -> None:
    """The same file twice with the same label was one (source, run) of twice the time."""
    report = DATA / "convnet_fwd.ncu-rep.xz"
    once = torch_nsight.load(report, labels=["x"], cache=False)
    with caplog.at_level("WARNING", logger="torch_nsight"):
        twice = torch_nsight.load([report, report], labels=["x", "x"], cache=False)
    assert "given twice with the label 'x': read once" in caplog.text
    assert len(twice.kernels) == len(once.kernels)
    assert twice.modules()["inclusive_ns"].tolist() == once.modules()["inclusive_ns"].tolist()
    apart = torch_nsight.load([report, report], labels=["a", "b"], cache=False)
    assert set(apart.kernels["variant"]) == {"a", "b"}  # two labels (a sweep's: variants)
