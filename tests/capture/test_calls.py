"""The calls table: aten ops recorded per range, with shapes, FLOPs and bytes (CPU)."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

from examples.models import LlamaBlock
from torch_nsight.calls_file import read_call_rows as read_calls
from torch_nsight.capture import RecordingEmitter, instrument
from torch_nsight.capture.calls.recorder import CALLS_KIND, CallRecorder
from torch_nsight.errors import ReportError

BATCH = 5


def make_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 20), nn.ReLU(), nn.Linear(20, 7, bias=False))


def run_iteration(model: nn.Module, inputs: torch.Tensor) -> None:
    model(inputs).sum().backward()


def record_one_iteration(model: nn.Module, inputs: torch.Tensor, **options: Any
                         ) -> list[dict[str, Any]]:
    recorder = CallRecorder(RecordingEmitter())
    with instrument(model, enabled=True, emitter=recorder, **options), recorder.recording():
        run_iteration(model, inputs)
    return recorder.rows()


def rows_where(rows: list[dict[str, Any]], op: str, innermost: str) -> list[dict[str, Any]]:
    return [row for row in rows if row["op"] == op and row["range_stack"]
            and row["range_stack"][-1] == innermost]


def test_forward_gemm_rows_have_the_layers_shapes_and_flops() -> None:
    model = make_mlp()
    rows = record_one_iteration(model, torch.randn(BATCH, model[0].in_features))
    first, last = model[0], model[2]

    (addmm,) = rows_where(rows, "addmm", "0")
    assert addmm["range_stack"] == ("Sequential", "0")
    assert addmm["input_shapes"] == ((first.out_features,), (BATCH, first.in_features),
                                     (first.in_features, first.out_features))
    assert addmm["output_shapes"] == ((BATCH, first.out_features),)
    assert addmm["input_dtypes"] == ("float32",) * 3
    assert addmm["output_dtypes"] == ("float32",)
    assert addmm["flops"] == 2 * BATCH * first.in_features * first.out_features
    assert addmm["count"] == 1

    (mm,) = rows_where(rows, "mm", "2")  # no bias: mm
    assert mm["input_shapes"] == ((BATCH, last.in_features), (last.in_features, last.out_features))
    assert mm["flops"] == 2 * BATCH * last.in_features * last.out_features
    itemsize = torch.finfo(torch.float32).bits // 8
    assert mm["bytes"] == itemsize * (BATCH * last.in_features
                                      + last.in_features * last.out_features
                                      + BATCH * last.out_features)


def test_backward_rows_hold_the_transposed_gemms() -> None:
    model = make_mlp()
    rows = record_one_iteration(model, torch.randn(BATCH, model[0].in_features))
    last, first = model[2], model[0]
    k_in, k_out = last.in_features, last.out_features

    gemms = rows_where(rows, "mm", "bwd:2")
    assert all(row["range_stack"][0] == "bwd:Sequential" for row in gemms)
    by_output = {row["output_shapes"]: row for row in gemms}
    # input gradient: grad_out (B, out) @ W (out, in)
    grad_input = by_output.pop(((BATCH, k_in),))
    assert grad_input["input_shapes"] == ((BATCH, k_out), (k_out, k_in))
    # weight gradient: a GEMM contracting over the batch, in whichever layout autograd picks
    ((shape, grad_weight),) = by_output.items()
    assert sorted(shape[0]) == sorted((k_in, k_out))
    (left, right) = grad_weight["input_shapes"]
    assert left[1] == right[0] == BATCH
    for row in (grad_input, grad_weight):
        assert row["flops"] == 2 * BATCH * k_in * k_out

    # the first layer's input needs no gradient: its backward is the weight GEMM alone,
    # and its bias gradient a sum over the batch
    (weight_gemm,) = rows_where(rows, "mm", "bwd:0")
    assert weight_gemm["flops"] == 2 * BATCH * first.in_features * first.out_features
    (bias_sum,) = rows_where(rows, "sum", "bwd:0")
    assert bias_sum["output_shapes"] in (((first.out_features,),), ((1, first.out_features),))


def test_llama_block_projection_rows_match_its_config() -> None:
    model = LlamaBlock(hidden=32, heads=4, intermediate=48)
    batch, seq = 2, 6
    rows = record_one_iteration(model, torch.randn(batch, seq, model.hidden), ops=True)
    qkv = model.self_attn.qkv_proj
    tokens = batch * seq

    (forward,) = rows_where(rows, "mm", "self_attn.qkv_proj")
    assert forward["range_stack"] == ("LlamaBlock", "self_attn", "self_attn.qkv_proj")
    assert forward["input_shapes"] == ((tokens, qkv.in_features),
                                       (qkv.in_features, qkv.out_features))
    assert forward["flops"] == 2 * tokens * qkv.in_features * qkv.out_features

    backward = rows_where(rows, "mm", "bwd:self_attn.qkv_proj")
    assert backward and all(row["range_stack"][:2] == ("bwd:LlamaBlock", "bwd:self_attn")
                            for row in backward)
    assert [row["flops"] for row in backward] == [forward["flops"]] * len(backward)
    assert any(row["output_shapes"] == ((tokens, qkv.in_features),) for row in backward)

    silu = [row for row in rows if row["range_stack"][-1:] == ("op:silu",)]
    assert [row["op"] for row in silu] == ["silu"]
    assert silu[0]["flops"] is None  # no formula for elementwise ops


class TransposeCopy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous().view(-1).expand(3, -1).detach() * 2


def test_views_are_skipped_and_copies_kept() -> None:
    model = TransposeCopy()
    rows = record_one_iteration_no_grad(model, torch.randn(4, 3))
    ops = [row["op"] for row in rows]
    assert ops == ["clone", "mul"]
    (clone,) = [row for row in rows if row["op"] == "clone"]
    assert clone["input_shapes"] == ((3, 4),) and clone["bytes"] == 2 * 12 * 4
    (mul,) = [row for row in rows if row["op"] == "mul"]
    # the expanded input has a stride-0 dimension: its 12 distinct elements count once
    assert mul["input_shapes"] == ((3, 12),)
    assert mul["bytes"] == (12 + 36) * 4


def record_one_iteration_no_grad(model: nn.Module, inputs: torch.Tensor
                                 ) -> list[dict[str, Any]]:
    recorder = CallRecorder(RecordingEmitter())
    with instrument(model, enabled=True, emitter=recorder), recorder.recording(), \
            torch.no_grad():
        model(inputs)
    return recorder.rows()


def test_forward_without_gradients_files_ops_under_their_modules() -> None:
    # the decode path does not put module ranges on the RangeStack: the recorder's own
    # stack of open messages is what names them
    model = make_mlp()
    rows = record_one_iteration_no_grad(model, torch.randn(BATCH, model[0].in_features))
    assert [(row["range_stack"], row["op"]) for row in rows] == [
        (("Sequential", "0"), "addmm"), (("Sequential", "1"), "relu"),
        (("Sequential", "2"), "mm")]


def test_first_iteration_records_exactly_one_iteration() -> None:
    model = make_mlp()
    inputs = torch.randn(BATCH, model[0].in_features)
    expected = record_one_iteration(model, inputs)
    model.zero_grad(set_to_none=True)  # as fresh: no gradient accumulation

    recorder = CallRecorder(RecordingEmitter(), first_iteration=True)
    with instrument(model, enabled=True, emitter=recorder):
        assert not recorder.is_recording
        for _ in range(3):
            run_iteration(model, inputs)
        assert not recorder.is_recording
        assert _get_current_dispatch_mode() is None
    assert recorder.rows() == expected
    assert {row["count"] for row in rows_where(recorder.rows(), "addmm", "0")} == {1}


def test_first_iteration_stops_at_close() -> None:
    model = make_mlp()
    recorder = CallRecorder(RecordingEmitter(), first_iteration=True)
    with instrument(model, enabled=True, emitter=recorder):
        run_iteration(model, torch.randn(BATCH, model[0].in_features))
        assert recorder.is_recording
        recorder.close()
        recorder.close()
        assert not recorder.is_recording
        assert _get_current_dispatch_mode() is None
        rows = recorder.rows()
        run_iteration(model, torch.randn(BATCH, model[0].in_features))
    assert recorder.rows() == rows
    assert rows_where(rows, "addmm", "0")


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_first_iteration_mode_under_another_mode_leaves_later(
        caplog: pytest.LogCaptureFixture) -> None:
    model = make_mlp()
    inputs = torch.randn(BATCH, model[0].in_features)
    recorder = CallRecorder(RecordingEmitter(), first_iteration=True)
    with instrument(model, enabled=True, emitter=recorder):
        run_iteration(model, inputs)
        rows = recorder.rows()
        with caplog.at_level(logging.WARNING, logger="torch_nsight.capture.calls.recorder"), \
                PassThrough():
            run_iteration(model, inputs)  # the recorder's mode is under PassThrough
        assert "still active" in caplog.text
        assert _get_current_dispatch_mode() is not None
        run_iteration(model, inputs)  # taken off at the first range pushed
        assert _get_current_dispatch_mode() is None
    assert recorder.rows() == rows


def record_events(model: nn.Module, inputs: torch.Tensor,
                  wrap: Callable[[RecordingEmitter], Any]) -> list[tuple[int, str, str]]:
    inner = RecordingEmitter()
    with instrument(model, enabled=True, emitter=wrap(inner), ops=True):
        for _ in range(2):
            run_iteration(model, inputs)
    return inner.events


@pytest.mark.parametrize("first_iteration", [False, True])
def test_inner_emitter_sees_the_same_ranges(first_iteration: bool) -> None:
    model = LlamaBlock(hidden=16, heads=2, intermediate=24)
    inputs = torch.randn(2, 3, model.hidden)
    plain = record_events(model, inputs, lambda inner: inner)

    with contextlib.ExitStack() as windows:

        def wrap(inner: RecordingEmitter) -> CallRecorder:
            recorder = CallRecorder(inner, first_iteration=first_iteration)
            if not first_iteration:
                windows.enter_context(recorder.recording())
            return recorder

        wrapped = record_events(model, inputs, wrap)
    assert wrapped == plain
    assert any(message.startswith("bwd:") for _, _, message in plain)


def test_bind_wraps_the_inner_emitters_bound_calls() -> None:
    calls: list[tuple[str, str]] = []

    class Bindable:
        def bind(self, message: str) -> tuple[Callable[[], None], Callable[[], None]]:
            calls.append(("bind", message))
            return (lambda: calls.append(("push", message)),
                    lambda: calls.append(("pop", message)))

        def push(self, message: str) -> None:
            raise AssertionError("the bound push should be used")

        def pop(self) -> None:
            raise AssertionError("the bound pop should be used")

    recorder = CallRecorder(Bindable())
    push, pop = recorder.bind("layers.0")
    push()
    with recorder.recording():
        torch.ones(2) + 1
    pop()
    assert calls == [("bind", "layers.0"), ("push", "layers.0"), ("pop", "layers.0")]
    assert [(row["range_stack"], row["op"]) for row in recorder.rows()] == [
        (("layers.0",), "ones"), (("layers.0",), "add")]


def test_ranges_are_kept_per_thread() -> None:
    recorder = CallRecorder(RecordingEmitter())
    seen: list[tuple[str, ...]] = []
    recorder.push("main")

    def other() -> None:
        recorder.push("bwd:other")
        seen.append(tuple(recorder._local.stack))
        recorder.pop()

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    assert seen == [("bwd:other",)]
    assert recorder._local.stack == ["main"]
    recorder.pop()


def test_recording_errors_do_not_reach_the_model(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: Any) -> None:
        raise ValueError("broken on purpose")

    model = make_mlp()
    inputs = torch.randn(BATCH, model[0].in_features)
    expected = model(inputs)
    recorder = CallRecorder(RecordingEmitter())
    monkeypatch.setattr(recorder, "_record", broken)
    with caplog.at_level(logging.WARNING, logger="torch_nsight.capture.calls.recorder"), \
            instrument(model, enabled=True, emitter=recorder), recorder.recording():
        got = model(inputs)
    torch.testing.assert_close(got, expected)
    assert recorder.rows() == []
    assert sum("broken on purpose" in r.getMessage() for r in caplog.records) == 1


def test_recording_does_not_nest() -> None:
    recorder = CallRecorder(RecordingEmitter())
    with recorder.recording(), pytest.raises(RuntimeError, match="recording already"), \
            recorder.recording():
        pass
    assert _get_current_dispatch_mode() is None


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    model = make_mlp()
    recorder = CallRecorder(RecordingEmitter())
    with instrument(model, enabled=True, emitter=recorder), recorder.recording():
        run_iteration(model, torch.randn(BATCH, model[0].in_features))
    path = recorder.write(tmp_path / "calls.json")
    document = json.loads(path.read_text())
    assert document["kind"] == CALLS_KIND and document["format"] == 1
    assert document["torch"] == torch.__version__
    assert read_calls(path) == recorder.rows()
    assert len(recorder.rows()) > 5


@pytest.mark.parametrize("content, match", [
    ("not json", "not JSON"),
    ('{"format": 1, "kind": "something.else", "rows": []}', "not a torch_nsight calls file"),
    ('[1, 2]', "not a torch_nsight calls file"),
    (f'{{"format": 99, "kind": "{CALLS_KIND}", "rows": []}}', "format 99"),
    (f'{{"format": 1, "kind": "{CALLS_KIND}", "rows": [{{"op": "mm"}}]}}', "lacks"),
])
def test_read_rejects_other_files(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "calls.json"
    path.write_text(content)
    with pytest.raises(ReportError, match=match):
        read_calls(path)


def test_inner_must_be_an_emitter() -> None:
    with pytest.raises(TypeError, match="push"):
        CallRecorder(object())  # type: ignore[arg-type]


@pytest.mark.gpu
def test_backward_ops_on_autograds_device_thread_are_recorded() -> None:
    model = make_mlp().cuda()
    inputs = torch.randn(BATCH, model[0].in_features, device="cuda")
    inner = RecordingEmitter()
    recorder = CallRecorder(inner, first_iteration=True)
    with instrument(model, enabled=True, emitter=recorder):
        for _ in range(2):
            run_iteration(model, inputs)
    backward_threads = {tid for tid, kind, message in inner.events
                        if kind == "push" and message.startswith("bwd:")}
    assert threading.get_ident() not in backward_threads  # autograd's CUDA device thread
    gemms = rows_where(recorder.rows(), "mm", "bwd:2")
    assert len(gemms) == 2 and {row["count"] for row in gemms} == {1}


@pytest.mark.parametrize("groups", [1, 4, 32])
def test_a_convolutions_backward_counts_what_its_forward_does(groups: int) -> None:
    """Each gradient of a convolution does the forward's multiply-adds once more (its input
    gradient up to the borders), so the backward's FLOPs are at most twice the forward's
    whatever the groups: torch's own formula counts a grouped (depthwise) weight gradient
    ``groups`` times over, which put ConvNeXt's backward far above its roof."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(32, 32, 7, padding=3, groups=groups))
    rows = record_one_iteration(model, torch.randn(2, 32, 14, 14, requires_grad=True))
    (forward,) = [r for r in rows_where(rows, "convolution", "0")]
    (backward,) = [r for r in rows_where(rows, "convolution_backward", "bwd:0")]
    assert forward["flops"] == 2 * 2 * 14 * 14 * 32 * (32 // groups) * 7 * 7
    assert 1.5 * forward["flops"] < backward["flops"] <= 2 * forward["flops"]


def test_ops_outside_every_range_get_their_own_range_when_asked() -> None:
    """Under Nsight Compute (``name_outside``), a cast and a reduction the training loop
    writes as tensor methods, outside the model, and their backward, each get an op range
    whose calls are filed under it; inside the model nothing changes, and without the
    option no range is added."""
    def loop(name_outside: bool) -> tuple[list[str], list[dict[str, Any]]]:
        model = make_mlp()
        emitter = RecordingEmitter()
        recorder = CallRecorder(emitter, name_outside=name_outside)
        with instrument(model, enabled=True, emitter=recorder), recorder.recording():
            model(torch.randn(BATCH, model[0].in_features)).double().square().sum().backward()
        return [m for _, kind, m in emitter.events if kind == "push"], recorder.rows()

    plain_pushes, plain_rows = loop(False)
    pushes, rows = loop(True)
    assert not any(p.startswith(("op:", "bwd:op:")) for p in plain_pushes)
    assert [p for p in pushes if not p.startswith(("op:", "bwd:op:"))] == plain_pushes
    assert {"op:_to_copy", "op:pow", "op:sum", "bwd:op:mul", "bwd:op:_to_copy"} <= set(pushes)
    # the calls join their range: the cast's row is under op:_to_copy, not the empty stack
    (cast,) = [r for r in rows if r["op"] == "_to_copy" and r["range_stack"]
               and r["range_stack"][0] == "op:_to_copy"]
    assert cast["output_dtypes"] == ("float64",)
    assert not [r for r in rows if r["range_stack"] == ()]
    assert [r for r in plain_rows if r["range_stack"] == () and r["op"] == "_to_copy"]
