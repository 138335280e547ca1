"""The Profile record and load(): real recorded reports through the real reader, plus the
record's own save/read/concat behavior."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import torch_nsight.render.notebook  # noqa: F401  (registers the HTML a notebook shows)
from tests.recorded import load_recorded, read_recorded
from torch_nsight.errors import ReportError
from torch_nsight.loading import load
from torch_nsight.profile import KERNEL_COLUMNS, Profile

DATA = Path(__file__).resolve().parent / "data"
SWEEP = DATA / "llama_block_sweep.ncu-rep.xz"
FORMAT1 = DATA / "profile_format1.parquet"


@pytest.fixture(scope="module")
def sweep_report() -> Profile:
    return load_recorded(SWEEP)


def by_shape(profile: Profile, shape: str) -> Profile:
    """The rows of one shape, as a profile of their own (what a per-shape report gives)."""
    return profile.with_kernels(profile.kernels[profile.kernels["shape"] == shape]
                                .reset_index(drop=True))


def test_save_and_read_round_trip(sweep_report: Profile, tmp_path: Path) -> None:
    path = sweep_report.save(tmp_path / "p.parquet")
    again = Profile.read(path)
    assert again.meta == sweep_report.meta
    assert again.kernels["duration_ns"].tolist() == sweep_report.kernels["duration_ns"].tolist()
    assert again.kernels["range_stack"].tolist() == sweep_report.kernels["range_stack"].tolist()
    assert again.coverage == sweep_report.coverage
    assert again.shapes == sweep_report.shapes and again.gpus == sweep_report.gpus


def test_a_profile_saved_by_format_1_still_reads() -> None:
    # Saved at commit a56250f (tests/data/README.md), when meta was an untyped dict and the
    # range columns were named nvtx_*.
    old = Profile.read(FORMAT1)
    fresh = load_recorded(SWEEP)
    assert len(old.kernels) == len(fresh.kernels) == 30
    assert old.shapes == fresh.shapes == ["1x256x1024", "1x1024x1024", "1x4096x1024"]
    assert old.gpus == fresh.gpus == ["NVIDIA H200"]
    assert old.metric_sets == ["roofline"]
    assert [s.kind for s in old.meta.sources] == ["legacy"]
    assert old.kernels["range_stack"].tolist() == fresh.kernels["range_stack"].tolist()
    assert old.kernels["duration_ns"].tolist() == fresh.kernels["duration_ns"].tolist()
    assert old.hotspots(n=3)["kernel"].tolist() == fresh.hotspots(n=3)["kernel"].tolist()


def test_read_tolerates_an_older_file_with_fewer_columns(tmp_path: Path) -> None:
    table = pa.table({"module": ["Net"], "duration_ns": [5.0]})
    meta = json.dumps({"format": 0, "meta": {"gpu": "old"}}).encode()
    table = table.replace_schema_metadata({b"torch_nsight.profile": meta})
    pq.write_table(table, tmp_path / "old.parquet")
    profile = Profile.read(tmp_path / "old.parquet")
    assert set(KERNEL_COLUMNS) <= set(profile.kernels.columns)
    assert profile.kernels["headroom_ns"].isna().all()
    assert profile.meta.sources == () and profile.meta.sweeps == ()


def test_read_refuses_other_files(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    with pytest.raises(ReportError, match="not a torch_nsight profile"):
        Profile.read(tmp_path / "other.parquet")
    (tmp_path / "text.parquet").write_text("hello")
    with pytest.raises(ReportError, match="not a Parquet file"):
        Profile.read(tmp_path / "text.parquet")
    with pytest.raises(ReportError, match="does not exist"):
        Profile.read(tmp_path / "absent.parquet")
    newer = pa.table({"x": [1]}).replace_schema_metadata(
        {b"torch_nsight.profile": json.dumps({"format": 99, "meta": {}}).encode()})
    pq.write_table(newer, tmp_path / "newer.parquet")
    with pytest.raises(ReportError, match="newer torch_nsight"):
        Profile.read(tmp_path / "newer.parquet")


def test_counts_follow_the_table_after_concat(sweep_report: Profile) -> None:
    # Format 1 kept the first profile's stored counts after a concat (3 + 5 rows -> 3).
    small = by_shape(sweep_report, "1x256x1024").with_kernels(
        sweep_report.kernels.iloc[:3])
    large = by_shape(sweep_report, "1x4096x1024").with_kernels(
        sweep_report.kernels.iloc[-5:])
    joined = Profile.concat([small, large])
    assert len(joined.kernels) == 8
    assert joined.shapes == ["1x256x1024", "1x4096x1024"]
    expected = joined.kernels.loc[joined.kernels["module"] != "(unattributed)",
                                  "duration_ns"].sum() / joined.kernels["duration_ns"].sum()
    assert joined.coverage == pytest.approx(expected)
    assert sum(joined.basis_counts.values()) == 8
    with pytest.raises(ValueError):
        Profile.concat([])


def test_a_profile_is_not_changed_once_built(sweep_report: Profile) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        sweep_report.kernels = sweep_report.kernels.iloc[:1]  # type: ignore[misc]
    other = sweep_report.with_kernels(sweep_report.kernels.iloc[:1])
    assert len(sweep_report.kernels) == 30 and len(other.kernels) == 1
    assert other.meta is sweep_report.meta


def test_findings_are_computed_once_and_handed_out_as_copies(llama: Profile) -> None:
    first = llama.findings()
    assert len(first) > 0
    first.loc[:, "finding"] = "changed"  # a caller's change stays in the caller's copy
    again = llama.findings()
    assert "changed" not in set(again["finding"])
    assert again is not first and len(again) == len(first)
    assert llama.findings(fold=False) is not again
    assert llama.with_kernels(llama.kernels).findings().equals(again)


def test_repr_never_raises_on_a_table_built_by_hand() -> None:
    bare = Profile(pd.DataFrame())
    assert "0 kernels" in repr(bare) and "torch_nsight Profile" in bare._repr_html_()


def test_equality_and_repr_are_short_and_safe(sweep_report: Profile) -> None:
    assert sweep_report == sweep_report
    assert sweep_report != load_recorded(SWEEP)  # same rows, another object
    text = repr(sweep_report)
    assert len(text) < 300
    assert "NVIDIA H200" in text and "30 kernels" in text and "1x4096x1024" in text
    page = sweep_report._repr_html_()
    assert "<table>" in page and "1x4096x1024" in page and "NVIDIA H200" in page


def test_rows_keep_their_provenance(sweep_report: Profile) -> None:
    k = sweep_report.kernels
    assert set(k["gpu"]) == {"NVIDIA H200"} and set(k["metric_set"]) == {"roofline"}
    assert set(k["source"]) == {str(SWEEP.resolve())}


def test_runs_of_one_shape_are_labelled_by_file_not_averaged(tmp_path: Path, caplog) -> None:
    first, second = tmp_path / "run_a.ncu-rep.xz", tmp_path / "run_b.ncu-rep.xz"
    shutil.copy(LLAMA, first)
    shutil.copy(LLAMA, second)
    # each copy is read once by the reader; the later loads read the run's report caches
    one = load(first)
    both = load([first, second])
    # both recordings carry the sweep label 1x512: the file names tell the runs apart
    assert both.shapes == ["1x512"] and both.variants == ["run_a", "run_b"]
    tree, alone = both.modules(), one.modules()
    for variant in ("run_a", "run_b"):
        mine = tree[tree["variant"] == variant]
        assert mine["inclusive_ns"].tolist() == alone["inclusive_ns"].tolist()
    assert [s.label for s in both.meta.sources] == ["run_a", "run_b"]
    named = load([first, second], labels=["tf32", "bf16"])
    assert named.variants == ["tf32", "bf16"]
    # the same label twice averages them as runs of one thing, on purpose
    runs = load([first, second], labels=["x", "x"])
    assert runs.variants == ["x"] and len(runs.modules()) == len(alone)
    caplog.clear()
    Profile.concat([one, load(second)])
    assert "averaged as runs" in caplog.text



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


# --- the recorded Llama-style block: examples/models.py LlamaBlock(hidden=1024, heads=16,
# intermediate=2816), batch 1, seq 512, bf16, forward + backward, functional ops named ------

LLAMA = (Path(__file__).resolve().parents[1] / "torch_nsight" / "demo"
         / "llama_block_fwd_bwd.ncu-rep.xz")
TOKENS, HIDDEN, INTERMEDIATE = 512, 1024, 2816
# module -> (in_features, out_features) of its nn.Linear
LINEARS = {
    "self_attn.qkv_proj": (HIDDEN, 3 * HIDDEN),
    "self_attn.o_proj": (HIDDEN, HIDDEN),
    "mlp.gate_proj": (HIDDEN, INTERMEDIATE),
    "mlp.up_proj": (HIDDEN, INTERMEDIATE),
    "mlp.down_proj": (INTERMEDIATE, HIDDEN),
}


@pytest.fixture(scope="module")
def llama() -> Profile:
    return load_recorded(LLAMA)


def rows(profile: Profile, module: str, direction: str) -> pd.DataFrame:
    k = profile.kernels
    return k[(k["module"] == module) & (k["direction"] == direction)]


@pytest.mark.parametrize("module", sorted(LINEARS))
def test_forward_gemm_flops_are_2mnk(llama: Profile, module: str) -> None:
    fan_in, fan_out = LINEARS[module]
    gemm = rows(llama, module, "fwd")
    assert len(gemm) == 1
    assert gemm["precision"].tolist() == ["tensor_bf16"]
    assert gemm["flops"].iloc[0] == pytest.approx(2 * TOKENS * fan_in * fan_out, rel=1e-4)


@pytest.mark.parametrize("module", sorted(LINEARS))
def test_backward_gemms_are_two_of_2mnk_up_to_tile_padding(llama: Profile, module: str) -> None:
    fan_in, fan_out = LINEARS[module]
    gemms = rows(llama, module, "bwd")
    expected = 2 * TOKENS * fan_in * fan_out
    assert len(gemms) == 2  # grad of the input and grad of the weight
    assert (gemms["tensor_bf16_flops"] >= expected).all()
    assert (gemms["tensor_bf16_flops"] <= 1.05 * expected).all()


def test_peaks_come_from_the_report_at_each_kernels_clock(llama: Profile) -> None:
    import ncu_report

    from torch_nsight.report import reader

    gemm = rows(llama, "self_attn.qkv_proj", "fwd").iloc[0]
    with reader.local_report(LLAMA) as local:
        action = ncu_report.load_report(str(local)).range_by_idx(
            int(gemm["range_index"])).action_by_idx(int(gemm["kernel_index"]))

        def value(name: str) -> float:
            return action.metric_by_name(name).as_double()

        dense = value("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum"
                      ".peak_sustained")
        assert gemm["peak_flops_per_s"] == pytest.approx(
            dense * value("sm__cycles_elapsed.avg.per_second"))
        assert gemm["peak_bytes_per_s"] == pytest.approx(
            value("dram__bytes.sum.peak_sustained")
            * value("dram__cycles_elapsed.avg.per_second"))
    # a roofline ceiling is a lower bound on time
    assert (llama.kernels["pct_of_roof"] <= 100.0).all()
    assert (llama.kernels["headroom_ns"] >= 0.0).all()


def test_bound_agrees_with_nsight_computes_rule(llama: Profile) -> None:
    from torch_nsight.analyze import sol_title
    from torch_nsight.analyze.classify import TITLE_BOUND

    k = llama.kernels
    assert (k["basis"] == "ncu_rule").all()
    for row in k.itertuples(index=False):
        expected = TITLE_BOUND[row.sol_bottleneck]
        if expected is not None:
            assert row.bound == expected
        # the reason states the rule's evidence: the small grid, else the SOL percentages
        assert row.reason.startswith("small grid" if row.sol_bottleneck == "Small Grid"
                                     else "SOL ")
        # without the stored rule, our re-application of it reaches the same title
        assert sol_title(row.sm_pct, row.mem_pct, row.waves) == row.sol_bottleneck


def test_every_kernel_kept_and_coverage_stated(llama: Profile) -> None:
    k = llama.kernels
    # as ncu's log of the recording counts them (tests/data/README.md): 12 forward, 5 for
    # the loss outside the model, 23 backward
    assert len(k) == 40
    assert (k["direction"] == "fwd").sum() == 12 and (k["direction"] == "bwd").sum() == 23
    outside = k["module"] == "(unattributed)"
    assert outside.sum() == 5
    expected = k.loc[~outside, "duration_ns"].sum() / k["duration_ns"].sum()
    assert llama.coverage == pytest.approx(expected)
    assert llama.shapes == [f"1x{TOKENS}"]  # from the measure label range


def test_module_tree_adds_up(llama: Profile) -> None:
    tree = llama.modules()
    k = llama.kernels
    assert tree.loc[tree["depth"] == 0, "inclusive_ns"].sum() == pytest.approx(
        k["duration_ns"].sum())
    for node in tree.itertuples(index=False):
        children = tree[(tree["direction"] == node.direction)
                        & (tree["depth"] == node.depth + 1)
                        & tree["module_path"].str.startswith(node.module_path + "/")]
        assert node.inclusive_ns == pytest.approx(node.exclusive_ns
                                                  + children["inclusive_ns"].sum())
    attn = tree[(tree["module_path"] == "LlamaBlock/self_attn") & (tree["direction"] == "fwd")]
    assert attn["kernels"].tolist() == [len(k[(k["direction"] == "fwd")
                                              & k["module_path"].str.startswith(
                                                  "LlamaBlock/self_attn")])]
    assert set(tree["depth"]) == {0, 1, 2}
    assert (llama.modules(depth=0)["depth"] == 0).all()


def test_hotspots_rank_real_kernels(llama: Profile) -> None:
    top = llama.hotspots(n=3)
    assert top["headroom_ns"].is_monotonic_decreasing
    assert top["headroom_ns"].iloc[0] == pytest.approx(
        llama.kernels.groupby(["module_path", "direction", "op", "kernel"], dropna=False)
        ["headroom_ns"].sum().max())
    assert top["next_step"].str.len().gt(0).all()
    by_time = llama.hotspots(n=3, order="time", level="module")
    assert by_time["exclusive_ns"].is_monotonic_decreasing


def test_reports_of_one_model_line_up_module_by_module(tmp_path: Path) -> None:
    # the same recorded shape read twice, as two runs: per-run times equal a single read's
    copy = tmp_path / "again.ncu-rep.xz"
    copy.write_bytes(LLAMA.read_bytes())
    single = load_recorded(LLAMA).modules()
    double = load([LLAMA, copy], labels=["run", "run"], cache=False)
    assert len(double.kernels) == 2 * len(load_recorded(LLAMA).kernels)
    lined = double.modules()
    assert lined["module_path"].tolist() == single["module_path"].tolist()
    assert lined["inclusive_ns"].tolist() == pytest.approx(single["inclusive_ns"].tolist())


def test_real_profile_survives_save_and_read(llama: Profile, tmp_path: Path) -> None:
    again = Profile.read(llama.save(tmp_path / "llama.parquet"))
    pd.testing.assert_frame_equal(llama.kernels, again.kernels, check_dtype=False)
    assert again.meta == llama.meta


def test_op_ranges_name_functional_ops_inside_their_module(llama: Profile) -> None:
    k = llama.kernels
    fwd = k[k["direction"] == "fwd"]
    ops = dict(zip(fwd["op"], fwd["module"], strict=False))
    assert ops["silu"] == "mlp" and ops["mul"] == "mlp"
    assert ops["scaled_dot_product_attention"] == "self_attn"
    attention = fwd[fwd["op"] == "scaled_dot_product_attention"]
    assert attention["precision"].tolist() == ["tensor_bf16"]
    # the sweep's label range is parsed into columns, not left as context
    assert k["context"].isna().all() and (k["run"] == 0).all()


def test_reports_lacking_metrics_fall_back_and_say_so() -> None:
    # the real table, with columns blanked as a report made with fewer metrics would have them
    from torch_nsight.analyze import analyze
    from torch_nsight.analyze.roofline import TENSOR_COLUMNS

    raw, _ = read_recorded(LLAMA)
    no_rule = analyze(raw.assign(sol_bottleneck=None))
    assert (no_rule["basis"] == "sol_pct").all()
    # the SpeedOfLight section also collected the fast tier's busy counters: they decide
    estimated = analyze(raw.assign(sol_bottleneck=None, sm_pct=float("nan"),
                                   mem_pct=float("nan")))
    assert (estimated["basis"] == "sol_estimate").all()
    busy = dict.fromkeys(["sm_issue_pct", "tensor_pipe_pct", "dram_busy_pct", "l1_lsu_pct"],
                         float("nan"))
    no_sol = analyze(raw.assign(sol_bottleneck=None, sm_pct=float("nan"),
                                mem_pct=float("nan"), **busy))
    assert (no_sol["basis"] == "roofline").all()
    far = no_sol["pct_of_roof"] < 60
    assert (no_sol.loc[far, "bound"] == "latency").all()
    assert (no_sol.loc[~far, "bound"] == no_sol.loc[~far, "roofline_side"]).all()
    no_tensor = analyze(raw.assign(sol_bottleneck=None, sm_pct=float("nan"),
                                   mem_pct=float("nan"), **busy, **dict.fromkeys(TENSOR_COLUMNS,
                                                                         float("nan"))))
    assert not no_tensor["flops_complete"].any()
    assert no_tensor["pct_of_roof"].isna().all()
    assert (no_tensor["basis"] == "none").all() and no_tensor["bound"].isna().all()


def test_module_tree_keeps_the_sweeps_shape_order(sweep_report: Profile) -> None:
    # as strings 1x1024x1024 would sort before 1x256x1024
    assert list(pd.unique(sweep_report.modules()["shape"])) == [
        "1x256x1024", "1x1024x1024", "1x4096x1024"]


def test_loading_many_sources_shows_a_bar_on_a_terminal(tmp_path: Path, monkeypatch) -> None:
    import io

    import tqdm.auto

    stream = io.StringIO()
    real = tqdm.auto.tqdm
    monkeypatch.setattr(tqdm.auto, "tqdm",
                        lambda items, **kw: real(items, **{**kw, "file": stream,
                                                           "disable": False,
                                                           "mininterval": 0}))  # every step
    copies = [shutil.copy(SWEEP, tmp_path / f"run{i}.ncu-rep.xz") for i in range(4)]
    profile = load(copies, cache=False)
    assert "torch_nsight load" in stream.getvalue() and "4/4" in stream.getvalue()
    assert profile.variants == ["run0", "run1", "run2", "run3"]


def test_a_notebook_shows_folded_hotspots_and_findings() -> None:
    page = load(DATA / "hf_gpt2_fast")._repr_html_()
    assert "Top kernel sites (repeated blocks folded)" in page
    assert "transformer.h.{0-11}.mlp.act ×12" in page
    assert "Findings: what to change" in page and "Pad the output features from 50257 to 50304" in page
    assert "nan" not in page
    assert " ±" in load(DATA / "runs" / "gpt2_runs10")._repr_html_()  # runs: the interval


def test_frames_for_a_person_put_what_they_read_first() -> None:
    import torch_nsight.demo

    demo = load(Path(torch_nsight.demo.__file__).parent / torch_nsight.demo.RECORDED_REPORT)
    top = demo.hotspots()
    # the README's comment: module, direction, op (where named), kernel, duration_ns, ...,
    # after the labels, which are there (empty) even for one shape and no variants
    assert list(top.columns[:11]) == ["variant", "shape", "module", "direction", "op",
                                      "kernel", "duration_ns", "ci95_ns", "bound", "reason",
                                      "headroom_ns"]
    full = demo.hotspot_table()
    assert set(full.columns) <= set(top.columns) and len(top) == len(full)
    pd.testing.assert_series_equal(top["duration_ns"], full["duration_ns"])
    found = demo.findings()
    assert list(found.columns[2:7]) == ["module", "direction", "finding", "est_gain_ns", "fix"]
    assert list(demo.modules().columns[2:6]) == ["module", "direction", "inclusive_ns",
                                                 "exclusive_ns"]


def test_a_profile_from_the_front_door_shows_html_in_a_notebook() -> None:
    import subprocess
    import sys

    # a fresh interpreter: torch_nsight.load brings the notebook's renderer with it, and the
    # Profile record itself never imports the render stage
    code = ("import sys, torch_nsight\n"
            "assert 'torch_nsight.render.notebook' not in sys.modules\n"
            f"p = torch_nsight.load({str(DATA / 'hand_s128.ncu-rep.xz')!r}, cache=False)\n"
            "assert 'Top kernel sites' in p._repr_html_()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
