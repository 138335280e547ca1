"""Repeated op calls of a profiled step (torch_nsight.capture.replicas.op_calls), on the CPU:
which calls a step repeats, under which module ranges, and what decides that two calls
launch the same kernels. What reading a report does with them is tested on a recording
(tests/report/test_op_replicas_report.py)."""

from __future__ import annotations

import torch
from torch import nn

from torch_nsight.capture import RecordingEmitter, instrument
from torch_nsight.capture.calls.recorder import CallRecorder
from torch_nsight.capture.replicas.op_calls import OpReplicas, call_key
from torch_nsight.naming import backward_message


class Twins(nn.Module):
    """Two branches of different classes whose Linear layers have one shape."""

    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
        self.right = nn.Sequential(nn.Linear(16, 16), nn.GELU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.right(self.left(x))


def _recorded(model: nn.Module, x: torch.Tensor) -> tuple[OpReplicas, CallRecorder]:
    recorder = CallRecorder(RecordingEmitter())
    recorder.op_replicas = OpReplicas()
    with instrument(model, enabled=True, emitter=recorder), recorder.recording():
        model(x).sum().backward()
    return recorder.op_replicas, recorder


def test_a_call_repeating_an_earlier_one_is_left_out_in_its_own_module() -> None:
    torch.manual_seed(0)
    replicas, recorder = _recorded(Twins(), torch.randn(8, 16, requires_grad=True))
    document = replicas.document()
    stacks = [tuple(s) for s in document["stacks"]]
    left_out = [stacks[place] for _, _, place in document["replicas"]]
    # the right branch's forward GEMM repeats the left one's; the backward of the left Linear
    # (its input needs a gradient too) repeats the right one's
    assert ("Twins", "right", "right.0") in left_out
    assert any(s[-1] == backward_message("left.0") for s in left_out)
    # every left-out call names an earlier call, and the call profiled before it
    for repeats, before, _ in document["replicas"]:
        assert 0 <= repeats <= before < document["calls"]
    # the ReLU and the GELU are different ops: neither is left out
    assert not any(s[-1] in ("left.1", "right.1") for s in left_out)
    # the calls table still counts every call
    rows = recorder.rows()
    assert sum(r["count"] for r in rows if r["op"] == "addmm") == 2


def test_what_decides_the_kernels_is_in_the_key() -> None:
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    add = torch.ops.aten.add.Tensor
    assert call_key(add, (a, b), {}) == call_key(add, (b, a), {})
    assert call_key(add, (a, b), {}) != call_key(add, (a.t().contiguous().t(), b), {})
    assert call_key(add, (a, b), {}) != call_key(add, (a.half(), b), {})
    assert call_key(add, (a, b), {}) != call_key(torch.ops.aten.sub.Tensor, (a, b), {})
    # a scale whose value ATen branches on keeps its value; another float does not
    pow_ = torch.ops.aten.pow.Tensor_Scalar
    assert call_key(pow_, (a, 2.0), {}) != call_key(pow_, (a, 3.0), {})
    mul = torch.ops.aten.mul.Scalar
    assert call_key(mul, (a, 0.125), {}) == call_key(mul, (a, 0.3), {})
    # kernels that depend on the data are never left out
    assert call_key(torch.ops.aten.nonzero.default, (a,), {}) is None
    assert call_key(torch.ops.aten.unique_dim.default, (a, 0), {}) is None


def test_a_step_that_raised_is_forgotten_but_keeps_its_numbers() -> None:
    model, x = Twins(), torch.randn(8, 16, requires_grad=True)
    replicas, recorder = _recorded(model, x)
    first = replicas.document()
    assert first["replicas"]
    recorder.clear()  # the step raised; ncu profiled it, its kernels carry numbers 0..calls-1
    with instrument(model, enabled=True, emitter=recorder), recorder.recording():
        model(x).sum().backward()
    again = replicas.document()
    # the next step's calls take new numbers, and repeat only its own calls
    assert again["calls"] == 2 * first["calls"]
    added = again["replicas"][len(first["replicas"]):]
    assert added
    assert all(first["calls"] <= repeats <= before for repeats, before, _ in added)
    # the calls the step that raised left out keep the rows of the calls they repeat
    assert again["replicas"][:len(first["replicas"])] == first["replicas"]


def test_conjugate_and_negative_views_are_in_the_key() -> None:
    z = torch.randn(4, 4, dtype=torch.complex64)
    out = torch.empty_like(z)
    copy, mm = torch.ops.aten.copy_.default, torch.ops.aten.mm.default
    # these ops take the lazy view as it is (their kernels conjugate or negate on the fly)
    assert z.conj().is_conj() and z.conj().imag.is_neg()
    assert call_key(copy, (out, z), {}) != call_key(copy, (out, z.conj()), {})
    assert call_key(mm, (z, z), {}) != call_key(mm, (z.conj(), z), {})
    real = torch.empty(4, 4)
    assert call_key(copy, (real, z.imag), {}) != call_key(copy, (real, z.conj().imag), {})
