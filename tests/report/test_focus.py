"""What a focused sweep profiles: kernel functions chosen from a recorded timeline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.report.focus import focus_set, kernel_filter
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
def test_function_names_are_what_ncu_filters_on(name: str, function: str) -> None:
    assert function_name(name) == function


def test_the_focus_set_is_the_fewest_functions_carrying_the_share() -> None:
    kernels = torch_nsight.load(DATA / "timeline_train").kernels
    kernels = kernels[kernels["kind"] == "kernel"]
    names, carried = focus_set(kernels, 0.9)
    totals = kernels.groupby("kernel")["duration_ns"].sum().sort_values(ascending=False)
    share = totals.cumsum() / totals.sum()
    assert carried == pytest.approx(share.iloc[len(names) - 1])
    assert carried >= 0.9 > share.iloc[len(names) - 2]  # one fewer would not reach 90%
    assert set(names) == set(totals.index[: len(names)])
    assert len(names) < len(totals)  # the point: fewer kernels under ncu
    pattern = re.compile(kernel_filter(names).removeprefix("regex:"))
    assert all(pattern.match(n) for n in names)
    assert not any(pattern.match(n) for n in totals.index[len(names):])


def test_every_trace_kernel_has_a_short_function_name() -> None:
    kernels = torch_nsight.load(DATA / "timeline_train").kernels
    names = kernels.loc[kernels["kind"] == "kernel", "kernel"]
    assert not names.str.contains(r"[<(\s]").any()
    assert (kernels["kernel_full"].str.len() >= kernels["kernel"].str.len()).all()
