"""A convolution's scalar arguments in the calls table (``args``, then ``op_args``): what a
call rebuilt on fresh tensors needs that its shapes do not say (``findings --benchmark``'s
channels-last switch, :mod:`torch_nsight.collect.benchmark_layout`). Recorded here on the
CPU from real ``nn.Conv2d`` calls."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import torch_nsight
from torch_nsight.calls_file import read_call_rows
from torch_nsight.collect.benchmark_layout import _conv_args, layout_calls
from torch_nsight.report.calls_table import calls_frame


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    torch.manual_seed(0)
    # the same input and output shapes, told apart only by their dilation and padding
    model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8),
                          nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8),
                          nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=4),
                          nn.BatchNorm2d(16))
    path = tmp_path_factory.mktemp("conv_args") / "run.calls.json"
    handle = torch_nsight.instrument(model, record_calls=path, enabled=True)
    try:
        model(torch.randn(2, 8, 16, 16)).sum().backward()
    finally:
        handle.remove()
    return read_call_rows(path)


def test_each_convolution_keeps_its_stride_padding_dilation_and_groups(rows: list[dict]) -> None:
    convs = [row for row in rows if row["op"] == "convolution"]
    assert len(convs) == 3  # two of them alike in every shape and dtype
    given = [json.loads(row["args"]) for row in convs]
    assert [(g["dilation"], g["padding"], g["stride"], g["groups"]) for g in given] == [
        ([1, 1], [1, 1], [1, 1], 8), ([2, 2], [2, 2], [1, 1], 8), ([1, 1], [1, 1], [2, 2], 4)]
    assert all(g["transposed"] is False for g in given)
    assert not any("args" in row for row in rows if row["op"] != "convolution")


def test_a_rebuilt_call_takes_the_recorded_arguments(rows: list[dict]) -> None:
    calls = layout_calls(calls_frame(rows, "test").assign(module_path="m"), None, None)
    convs = calls[calls["kind"].eq("conv")]
    assert convs["op_args"].notna().all()
    rebuilt = [_conv_args(call)[2] for _, call in convs.iterrows()]
    assert [r["dilation"] for r in rebuilt] == [(1, 1), (2, 2), (1, 1)]
    assert [r["groups"] for r in rebuilt] == [8, 8, 4]
    for (_, call), kwargs in zip(convs.iterrows(), rebuilt, strict=True):
        x, w, _ = _conv_args(call)
        out = torch.nn.functional.conv2d(torch.randn(x), torch.randn(w), **kwargs)
        assert tuple(out.shape) == tuple(call["output_shapes"][0])


def test_two_calls_alike_but_for_their_arguments_are_timed_apart(rows: list[dict]) -> None:
    """The dilated convolution and the plain one have the same shapes: each is timed with
    its own arguments, once (a stand-in timer records what it was given)."""
    import pandas as pd

    from torch_nsight.collect.benchmark_layout import benchmark_channels_last

    calls = calls_frame(rows, "test").assign(module_path="m")
    given: list[dict] = []

    def timed(call: object, timer: object) -> tuple[float, float]:
        given.append(_conv_args(call)[2] if call["kind"] == "conv" else {})  # type: ignore[index]
        return 2.0, 1.0

    found = pd.DataFrame({"variant": [None], "shape": [None], "module_path": ["m"],
                          "fix_code": ["channels_last"], "cause": [None],
                          "est_gain_ns": [0.0], "gain_basis": ["removed"]})
    out = benchmark_channels_last(found, calls, timer=None, timed=timed)
    dilations = sorted(args["dilation"] for args in given if args)
    assert dilations == [(1, 1), (1, 1), (2, 2)]  # the three convolutions, each once
    assert out.loc[0, "est_gain_ns"] == pytest.approx(len(given))  # (2 - 1) a call
