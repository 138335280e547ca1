"""The channels-last switch's benchmark (``findings --benchmark``) on recorded NCHW steps:
which calls each channels-last row counts, and that the rows add up to the whole switch.
The timing itself needs a GPU (tests/gpu/test_verify_gpu.py); here each call is "timed" by
a function of its own shapes, so every sum below is computed from the recording."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.recorded import load_recorded
from torch_nsight.analyze import fold_findings
from torch_nsight.collect.benchmark_layout import (
    _conv_args,
    assign_calls,
    benchmark_channels_last,
    layout_calls,
    matching,
)

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDINGS = ("zoo_families/deeplab.ncu-rep.xz", "zoo_families/mobilenet_v3.ncu-rep.xz",
              "channels_last/efficientnet_nchw.ncu-rep.xz")


def by_size(call: Any, timer: Any) -> tuple[float, float]:
    """A stand-in timing: NCHW costs the input's elements, channels-last one less per call
    for batch norms, half less for other convolutions and one more for depthwise ones (so
    both signs occur)."""
    del timer
    size = float(math.prod(int(d) for d in call["input_shapes"][0]))
    depthwise = call["kind"] == "conv" and int(call["input_shapes"][1][1]) == 1
    return size, size + (1.0 if depthwise else -1.0 if call["kind"] == "batch_norm" else -0.5)


@pytest.fixture(scope="module", params=RECORDINGS)
def recorded(request: pytest.FixtureRequest) -> tuple[pd.DataFrame, pd.DataFrame]:
    profile = load_recorded(DATA / request.param)
    found = profile.finding_table(fold=False).copy()
    found["benchmarked"] = False
    found["before_ns"] = found["after_ns"] = found["untimed_calls"] = float("nan")
    return found, profile.calls


def test_the_rows_add_up_to_every_convolution_and_batch_norm_of_the_step(
        recorded: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    found, calls = recorded
    switch = found[found["fix_code"].eq("channels_last")]
    assert len(switch) > 0, "a recorded NCHW step without a channels-last finding"
    others = found[~found["fix_code"].eq("channels_last")].copy()
    out = benchmark_channels_last(found.copy(), calls, timer=None, timed=by_size)
    done = out[out["fix_code"].eq("channels_last")]
    assert done["benchmarked"].all() and done["gain_basis"].eq("measured").all()
    for (variant, shape), rows in done.groupby(["variant", "shape"], dropna=False):
        mine = layout_calls(calls, variant, shape)
        assert mine["kind"].eq("conv").any() and mine["kind"].eq("batch_norm").any()
        expected = [by_size(call, None) for _, call in mine.iterrows()]
        counts = mine["count"].astype(float).tolist()
        assert rows["before_ns"].sum() == pytest.approx(
            sum(b * c for (b, _), c in zip(expected, counts, strict=True)))
        assert rows["est_gain_ns"].sum() == pytest.approx(
            sum((b - a) * c for (b, a), c in zip(expected, counts, strict=True)))
    pd.testing.assert_frame_equal(out.loc[others.index], others)
    folded = fold_findings(out)  # a folded row's before and after are its blocks' too
    folded = folded[folded["fix_code"].eq("channels_last") & folded["before_ns"].notna()]
    assert len(folded) < len(done)
    assert (folded["before_ns"] - folded["after_ns"]).tolist() == pytest.approx(
        folded["est_gain_ns"].tolist())


def test_each_call_is_counted_once_and_by_a_row_of_its_kind(
        recorded: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    found, calls = recorded
    rows = found[found["fix_code"].eq("channels_last")]
    first = rows.iloc[0]
    mine = layout_calls(calls, first["variant"], first["shape"])
    rows = rows[matching(rows["variant"], first["variant"])
                & matching(rows["shape"], first["shape"])]
    given = assign_calls(rows, mine)
    counted = [index for indices in given.values() for index in indices]
    assert sorted(counted) == sorted(mine.index)
    kinds = rows["cause"].isin(("batch_norm", "depthwise"))
    assert kinds.any() and not kinds.all()  # rows of a kind and rows of none, both tested
    for cause in ("batch_norm", "depthwise"):  # each kind's row counts that kind's calls
        assert all(given[row] for row in rows.index[rows["cause"].eq(cause)])
    rest = rows.index[~kinds][0]  # the first row of no kind takes the calls no row covers
    for row, indices in given.items():
        cause = rows.loc[row, "cause"]
        for index in indices:
            call = mine.loc[index]
            assert row == rest or str(call["module_path"]).startswith(
                str(rows.loc[row, "module_path"]))
            if cause == "batch_norm":
                assert call["kind"] == "batch_norm"
            if cause == "depthwise":
                assert call["kind"] == "conv" and int(call["input_shapes"][1][1]) == 1


def test_stride_and_padding_read_from_the_output_give_the_recorded_output() -> None:
    calls = layout_calls(load_recorded(DATA / RECORDINGS[0]).calls, None, None)
    convs = calls[calls["kind"].eq("conv")]
    assert len(convs) > 20
    for _, call in convs.iterrows():
        x, w, kwargs = _conv_args(call)
        out = call["output_shapes"][0]
        for axis in (0, 1):
            size = (x[2 + axis] + 2 * kwargs["padding"][axis] - w[2 + axis]) \
                // kwargs["stride"][axis] + 1
            assert size == out[2 + axis], (call["module_path"], x, w, kwargs, out)
        assert x[1] == kwargs["groups"] * w[1]


def test_the_note_on_a_modelled_channels_last_gain_goes_once_it_is_timed(
        recorded: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    from torch_nsight.render.findings import LAYOUT_NOTE, layout_note

    found, calls = recorded
    assert layout_note(found) == LAYOUT_NOTE
    timed = benchmark_channels_last(found.copy(), calls, timer=None, timed=by_size)
    assert layout_note(timed) == ""


def test_a_3d_convolutions_switch_keeps_the_profiles_figure() -> None:
    """R3D-18 (``Conv3d``, 5-D tensors): its channels-last rows are ``channels_last_3d``'s
    (``fix_params["ndim"]`` 5), whose calls the benchmark does not time (it lays out 4-D
    tensors): they keep the profile's figure instead of a "measured" nothing."""
    profile = load_recorded(DATA / "zoo_families/r3d_18.ncu-rep.xz")
    found = profile.finding_table(fold=False).copy()
    found["benchmarked"] = False
    volume = found["fix_code"].eq("channels_last") & found["fix_params"].map(
        lambda params: params.get("ndim") == 5)
    assert volume.any()
    before = found.loc[volume, ["est_gain_ns", "gain_basis"]].copy()
    out = benchmark_channels_last(found, profile.calls, timer=None, timed=by_size)
    assert not out.loc[volume, "benchmarked"].any()
    pd.testing.assert_frame_equal(out.loc[volume, ["est_gain_ns", "gain_basis"]], before)
