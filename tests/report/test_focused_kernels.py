"""What a focused sweep profiles: kernel functions chosen from a recorded timeline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.report.focused_kernels import focus_set, kernel_filter
from torch_nsight.report.trace import function_name

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize(("name", "function"), [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
     "vectorized_elementwise_kernel"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, "
     "false>(int, float, float const*)", "vectorized_layer_norm_kernel"),
    ("nvjet_sm90_tst_64x64_64x13_4x1_v_bz_TNT", "nvjet_sm90_tst_64x64_64x13_4x1_v_bz_TNT"),
])
def test_function_names_are_what_ncu_shows(name: str, function: str) -> None:
    assert function_name(name) == function


def test_cutlass_kernels_are_shown_by_operator_and_filtered_by_wrapper() -> None:
    # the focused sweep's ncu report shows the lm_head GEMM as the operator, and ncu -k
    # matched it as Kernel2 (tests/data/sweep_focused: its manifest's focused_kernels)
    name = ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>"
            "(cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1::Params)")
    assert function_name(name) == "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1"
    assert function_name(name, for_filter=True) == "Kernel2"
    deep = load_recorded(DATA / "sweep_focused").kernels
    assert function_name(name) in set(deep.loc[deep["deep_profiled"] == True, "kernel"])  # noqa: E712


def test_the_focus_set_is_the_fewest_functions_carrying_the_share() -> None:
    kernels = torch_nsight.load(DATA / "timeline_train").kernels
    kernels = kernels[kernels["kind"] == "kernel"]
    names, filters, carried = focus_set(kernels, 0.9)
    totals = kernels.groupby("kernel")["duration_ns"].sum().sort_values(ascending=False)
    share = totals.cumsum() / totals.sum()
    assert carried == pytest.approx(share.iloc[len(names) - 1])
    assert carried >= 0.9 > share.iloc[len(names) - 2]  # one fewer would not reach 90%
    assert set(names) == set(totals.index[: len(names)])
    assert len(names) < len(totals)  # the point: fewer kernels under ncu
    # ncu's -k sees CUTLASS's GEMMs (lm_head here) as Kernel2, every other kernel by name
    assert set(filters) == {n for n in names if not n.startswith("cutlass_")} | {"Kernel2"}
    pattern = re.compile(kernel_filter(filters).removeprefix("regex:"))
    assert all(pattern.match(n) for n in filters)
    assert not any(pattern.match(n) for n in totals.index[len(names):])


def test_every_trace_kernel_has_a_short_function_name() -> None:
    kernels = torch_nsight.load(DATA / "timeline_train").kernels
    names = kernels.loc[kernels["kind"] == "kernel", "kernel"]
    assert not names.str.contains(r"[<(\s]").any()
    assert (kernels["kernel_full"].str.len() >= kernels["kernel"].str.len()).all()


def test_a_focused_sweep_keeps_every_kernel_and_deep_profiles_the_focus() -> None:
    # recorded on the H200: `torch-nsight sweep bench/timeline_and_focus.py:gpt2 --shapes
    # 4x512 --focus 0.9`; the unfocused sweep of the same run had 126 rows
    profile = load_recorded(DATA / "sweep_focused")
    k = profile.kernels
    assert len(k) == 126 and profile.shallow_rows == 16
    options = profile.meta.sweeps[0].options
    deep, shallow = k[k["deep_profiled"] == True], k[k["deep_profiled"] == False]  # noqa: E712
    share = deep["duration_ns"].sum() / k["duration_ns"].sum()
    assert share >= options["focus"] == 0.9
    assert shallow["kind"].eq("kernel").all()
    # no counters on the timeline's rows: FLOPs only from the calls table's analytic counts
    # (the attention's flash kernel here), never twice in a module that ncu measured
    assert set(shallow["flops_basis"].dropna()) <= {"calls"}
    assert not shallow.loc[shallow["flops"].notna(), "kernel"].str.contains("nvjet").any()
    both = k.groupby(["module_path", "direction"])["flops_basis"].agg(lambda b: set(b.dropna()))
    assert not any({"calls", "counters"} <= basis for basis in both)
    assert deep["flops"].notna().any()  # counters where ncu ran
    # the timeline's rows stand in once per kernel: none inside a replica except as copies
    assert shallow["replicated_from"].isna().sum() + shallow["replicated_from"].notna().sum() \
        == 16
    assert not set(shallow.loc[shallow["replicated_from"].isna(), "module"]) & {
        f"h.{i}" for i in range(1, 12)}
    assert profile.timeline is not None and (profile.timeline["kind"] == "step").sum() == 3
