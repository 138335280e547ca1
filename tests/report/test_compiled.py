"""Compiled models read back with their modules: a real torch.compile'd ViT training step,
under Nsight Compute and under PyTorch's profiler (tests/data/compile/)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded, read_recorded
from torch_nsight import formats
from torch_nsight.naming import OPTIMIZER_DIRECTION
from torch_nsight.report.compiled_attribution import read_maps, resolve_compiled, take_carried
from torch_nsight.vocabulary import UNATTRIBUTED, in_module_range

DATA = Path(__file__).resolve().parents[1] / "data"
NCU = DATA / "compile" / "vit_train.ncu-rep.xz"
TIMELINE = DATA / "compile" / "vit_timeline"
EAGER = DATA / "profile_fast" / "vit_profile.ncu-rep.xz"
# mode="reduce-overhead": the compiled graphs replayed as CUDA graphs
REDUCE_NCU = DATA / "compile" / "reduce_overhead.ncu-rep.xz"
REDUCE_TIMELINE = DATA / "compile" / "reduce_overhead_timeline"
SOURCES = {"ncu": NCU, "timeline": TIMELINE, "reduce-overhead ncu": REDUCE_NCU,
           "reduce-overhead timeline": REDUCE_TIMELINE}


@pytest.fixture(scope="module", params=list(SOURCES))
def compiled(request: pytest.FixtureRequest) -> torch_nsight.Profile:
    return load_recorded(SOURCES[request.param])


def test_the_reduce_overhead_step_ran_as_cuda_graphs() -> None:
    from torch_nsight.report.trace_events import read_trace

    calls = read_trace(REDUCE_TIMELINE / "trace.json.gz").calls.values()
    runtime = [call.name for call in calls if call.name.startswith("cuda")]
    assert runtime.count("cudaGraphLaunch") == 4  # forward and backward graph, two steps
    kernels = load_recorded(REDUCE_TIMELINE).kernels
    assert (kernels["kernel_full"].str.startswith("triton_") & (kernels["module"] != UNATTRIBUTED)
            ).sum() > 500


def _share(kernels: pd.DataFrame, mask: pd.Series) -> float:
    return float(kernels.loc[mask, "duration_ns"].sum() / kernels["duration_ns"].sum())


def test_most_gpu_time_of_the_compiled_step_lands_in_modules(compiled: torch_nsight.Profile
                                                             ) -> None:
    k = compiled.kernels
    inductor = k["kernel_full"].str.startswith("triton_")
    assert inductor.sum() > 100  # it did run compiled
    assert compiled.coverage >= 0.95
    assert (k.loc[inductor, "module"] != UNATTRIBUTED).all()
    # forward and backward both present, backward the larger, as in the eager step
    fwd, bwd = _share(k, k["direction"] == "fwd"), _share(k, k["direction"] == "bwd")
    assert 0.2 < fwd < bwd
    # what stays outside: the loss and the optimizer, outside the model
    outside = set(k.loc[~k["module"].map(in_module_range)
                        | (k["direction"] == OPTIMIZER_DIRECTION), "kernel"])
    assert "multi_tensor_apply_kernel" in outside
    assert not any(name.startswith("triton_") for name in outside)


def test_kernels_land_in_the_modules_whose_ops_they_fused(compiled: torch_nsight.Profile
                                                          ) -> None:
    # Two independent records agree: the ops in Inductor's kernel names (from the ATen ops
    # it fused) and the module the FX metadata gave the kernel.
    k = compiled.kernels
    fused = k["fused_modules"].map(lambda m: tuple(m) if m is not None else ())
    forward = k["direction"] == "fwd"
    norm = forward & k["kernel_full"].str.contains("native_layer_norm")
    steps = k["run"].nunique()
    assert norm.sum() >= 25 * steps  # 2 norms a block, 12 blocks, and the final norm
    holds_norm = [module.split(".")[-1].startswith("norm") or
                  any(m.split(".")[-1].startswith("norm") for m in mods)
                  for module, mods in zip(k.loc[norm, "module"], fused[norm], strict=True)]
    assert all(holds_norm)
    gelu = forward & k["kernel_full"].str.contains("gelu")
    assert gelu.sum() == 12 * steps
    assert all(".mlp" in m or any(".mlp" in f for f in mods)
               for m, mods in zip(k.loc[gelu, "module"], fused[gelu], strict=True))
    # a kernel fused across modules sits in their deepest common ancestor
    assert fused.map(len).gt(1).sum() > 20
    for module, depth, mods in zip(k["module"], k["depth"], fused, strict=True):
        if mods:
            assert len(mods) > 1
            prefix = "" if depth == 0 else module + "."  # the root's own name is its class
            assert all(m.startswith(prefix) or m == module for m in mods)
            assert depth == 0 or len({m[len(prefix):].split(".")[0] for m in mods
                                      if m != module}) > 1 or module in mods


def test_every_block_gets_its_share(compiled: torch_nsight.Profile) -> None:
    k = compiled.kernels
    blocks = k["module_path"].str.extract(r"/blocks\.(\d+)(?:/|$)")[0].dropna().astype(int)
    per_block = k.loc[blocks.index].groupby(blocks)["duration_ns"].sum()
    assert list(per_block.index) == list(range(12))
    assert per_block.max() / per_block.min() < 1.5  # identical blocks, similar time


def test_compiled_against_eager_per_module() -> None:
    eager = load_recorded(EAGER).kernels
    compiled = load_recorded(NCU).kernels
    top = [f"blocks.{i}" for i in range(12)] + ["patch_embed.proj", "head"]

    def per_module(k: pd.DataFrame) -> pd.Series:
        return pd.Series({m: k.loc[k["module_path"].str.contains(
            f"/{m}(?:/|$)", regex=True), "duration_ns"].sum() for m in top})

    ratio = per_module(compiled) / per_module(eager)
    # compile fuses norms, GELU and residuals: every block faster, none gone
    assert (ratio[[f"blocks.{i}" for i in range(12)]] < 1.0).all()
    assert (ratio > 0.3).all()
    assert ratio["patch_embed.proj"] == pytest.approx(1.0, abs=0.15)  # the same conv kernels


def test_a_range_without_its_map_is_said_not_hidden() -> None:
    from torch_nsight.analyze.attribute import attribute

    frame, _ = read_recorded(NCU)
    without_maps, messages = take_carried(frame, formats.COMPILED_MAP_PREFIX)
    # the forward and the backward graph's maps, carried inside the profiled step (the
    # copies carried at their first call were outside ncu's range)
    assert len(read_maps(messages, "x")) == 2
    resolved = attribute(resolve_compiled(without_maps, read_maps(messages, "x")))
    kept = attribute(resolve_compiled(without_maps, []))
    in_range = kept["range_stack"].map(lambda s: any(m.startswith("compiled:") for m in s))
    assert in_range.sum() == (resolved["module"] != UNATTRIBUTED).sum()
    assert kept["kernel_full"][kept["kernel_full"].str.startswith("triton_")].index.isin(
        kept.index[in_range]).all()
    # unresolved: outside any module, the range named in the context, never silently lost
    assert (kept.loc[in_range, "module"] == UNATTRIBUTED).all()
    assert kept.loc[in_range, "context"].str.contains("compiled:g").all()


def test_compare_eager_with_compiled_names_what_was_fused() -> None:
    from torch_nsight.analyze.regress import compare_profiles

    eager = load_recorded(EAGER).kernels
    compiled = load_recorded(NCU).kernels
    rows = compare_profiles(eager, compiled, by="module")
    verdicts = rows.set_index(["direction", "module"])["verdict"]
    # the norms and the GELUs ran inside kernels fused across modules: not "gone"
    for i in range(12):
        for name in ("norm1", "norm2", "mlp.act"):
            assert verdicts[("fwd", f"blocks.{i}.{name}")] == "fused"
    assert "only in baseline" not in set(rows["verdict"])
    assert (rows.loc[rows["module"].str.fullmatch(r"blocks\.\d+").fillna(False), "verdict"]
            == "improved").all()


def test_findings_on_compiled_code_skip_what_inductor_fused(compiled: torch_nsight.Profile
                                                            ) -> None:
    found = compiled.findings()
    assert "elementwise_chain" not in set(found["finding"])  # Inductor fused them already
    assert not found["kernels"].astype(str).str.contains("triton_").any()
    # the convolution's layout round trip is still there to fix in the compiled step
    assert "layout_conversion" in set(found["finding"])


def test_hotspots_name_the_modules_a_kernel_fused(compiled: torch_nsight.Profile) -> None:
    top = compiled.hotspots(n=20, order="time", fold=False)
    fused = top.dropna(subset=["fused_modules"])
    assert len(fused)
    for module, modules in zip(fused["module"], fused["fused_modules"], strict=True):
        assert len(modules) > 1 and module in compiled.kernels["module"].values


def test_kernels_replayed_from_a_hand_captured_graph_are_named_not_hidden() -> None:
    profile = load_recorded(DATA / "graph_captured_timeline")
    k = profile.kernels
    replayed = k["context"].fillna("").str.contains("CUDA graph replay")
    assert replayed.sum() == 8  # per replay: two GEMMs, the GELU and a memset; 2 steps
    assert (k.loc[replayed, "module"] == UNATTRIBUTED).all()
    assert (k.loc[~replayed & (k["kind"] == "kernel"), "module"] != UNATTRIBUTED).all()
    note = " ".join(s.note or "" for s in profile.meta.sources)
    assert "8 kernels replayed from CUDA graphs" in note and "reduce-overhead" in note
