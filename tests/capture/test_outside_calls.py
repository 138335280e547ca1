"""The training loop's calls outside the model (the loss, the clipping, the GradScaler) in op
ranges of their own while a model is instrumented, their backward too (CPU, real runs)."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from capture_models import Recorder
from torch import nn

import torch_nsight
from torch_nsight.analyze.attribute import ATTRIBUTION_COLUMNS, attribute_ranges
from torch_nsight.calls_file import read_call_rows
from torch_nsight.capture import RecordingEmitter
from torch_nsight.capture.ranges import outside
from torch_nsight.naming import (
    OPTIMIZER_DIRECTION,
    backward_op_message,
    op_message,
    step_message,
    step_op_message,
)
from torch_nsight.vocabulary import outside_module

instrument_module = importlib.import_module("torch_nsight.capture.front.instrument")
VOCAB, SEQ, BATCH = 40, 6, 3


class LSTMLanguageModel(nn.Module):
    """The issue's model, small: embedding, LSTM, vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.lstm = nn.LSTM(16, 16, batch_first=True)
        self.head = nn.Linear(16, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embed(tokens))
        return self.head(hidden)


def train(model: nn.Module, steps: int = 2, loss_fn: Callable[..., Any] | None = None
          ) -> list[float]:
    """A training loop as most are written: the loss, GradScaler and clipping outside the
    model (GradScaler on the CPU: enabled, scale 2**16)."""
    generator = torch.Generator().manual_seed(1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu")
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=generator)
        logits = model(tokens[:, :-1])
        if loss_fn is None:
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        else:
            loss = loss_fn(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.fixture
def profiled(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """Ranges sent where a profiler's would go (``instrument()`` without a test emitter),
    recorded: what a run under ``torch-nsight profile`` writes."""
    recorder = Recorder()
    monkeypatch.setattr(instrument_module, "default_emitter", lambda: recorder.emitter)
    yield recorder
    for handle in recorder.handles:
        handle.remove()


def instrumented(recorder: Recorder, model: nn.Module, **options: Any) -> Any:
    handle = torch_nsight.instrument(model, enabled=True, **options)
    recorder.handles.append(handle)
    return handle


EXPECTED_STEP = [
    "LSTMLanguageModel", "  embed", "  lstm", "  head",
    op_message("cross_entropy"),
    op_message("GradScaler.scale"),
    # backward (on this thread on the CPU): the scale's mul, then the loss's own nodes, then
    # the model's
    backward_op_message("GradScaler.scale"),
    backward_op_message("cross_entropy"),
    "bwd:LSTMLanguageModel", "  bwd:head", "  bwd:lstm", "  bwd:embed",
    # the optimizer's step phase: the optimizer's range and the calls around it
    step_op_message("GradScaler.unscale_"),
    step_op_message("clip_grad_norm_"),
    step_message("AdamW"),  # GradScaler.step: the optimizer's own range, nothing around it
    step_op_message("GradScaler.update"),
]


def test_every_call_of_the_loop_gets_its_range_forward_and_backward(profiled: Recorder
                                                                    ) -> None:
    torch.manual_seed(0)
    model = LSTMLanguageModel()
    instrumented(profiled, model)
    train(model, steps=2)
    assert profiled.lines() == EXPECTED_STEP * 2


def test_the_loss_module_and_the_deprecated_clipping_call_the_named_functions(
        profiled: Recorder) -> None:
    torch.manual_seed(0)
    model = LSTMLanguageModel()
    instrumented(profiled, model)
    # nn.CrossEntropyLoss calls F.cross_entropy: the same range, outside the model
    train(model, steps=1, loss_fn=nn.CrossEntropyLoss())
    assert profiled.lines() == EXPECTED_STEP
    profiled.clear()
    with pytest.warns(FutureWarning):  # clip_grad_norm calls clip_grad_norm_: one range
        torch.nn.utils.clip_grad_norm(model.parameters(), 1.0)
    assert profiled.lines() == [step_op_message("clip_grad_norm_")]


def test_the_results_are_those_of_the_uninstrumented_loop(profiled: Recorder) -> None:
    torch.manual_seed(0)
    plain = LSTMLanguageModel()
    torch.manual_seed(0)
    ranged = LSTMLanguageModel()
    expected = train(plain, steps=3)
    instrumented(profiled, ranged)
    assert train(ranged, steps=3) == expected
    for (name, a), (_, b) in zip(plain.state_dict().items(), ranged.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_the_originals_come_back_when_the_last_instrumentation_goes(profiled: Recorder
                                                                    ) -> None:
    originals = {(owner, attribute): getattr(owner, attribute)
                 for owner, attribute in [(F, "cross_entropy"), (F, "mse_loss"),
                                          (torch.nn.utils, "clip_grad_norm_"),
                                          (torch.nn.utils.clip_grad, "clip_grad_norm_"),
                                          (torch.amp.GradScaler, "unscale_")]}
    first = instrumented(profiled, LSTMLanguageModel())
    second = instrumented(profiled, nn.Linear(4, 4))
    for (owner, attribute), original in originals.items():
        replaced = getattr(owner, attribute)
        assert replaced is not original and replaced.__wrapped__ is original
        assert replaced.__name__ == original.__name__  # what op naming and signatures see
    # one wrapper wherever one function is looked up
    assert torch.nn.utils.clip_grad_norm_ is torch.nn.utils.clip_grad.clip_grad_norm_
    first.remove()
    assert F.cross_entropy is not originals[(F, "cross_entropy")]  # the second still needs it
    second.remove()
    for (owner, attribute), original in originals.items():
        assert getattr(owner, attribute) is original
    profiled.clear()
    train(LSTMLanguageModel(), steps=1)
    assert profiled.events == []


def test_nothing_is_replaced_without_a_profiler_or_with_a_test_emitter(
        recorder: Recorder) -> None:
    original = F.cross_entropy
    handle = torch_nsight.instrument(LSTMLanguageModel(), enabled=False)
    assert not handle.active and F.cross_entropy is original
    model = LSTMLanguageModel()
    recorder.instrument(model)  # a test's own emitter sees only its model's ranges
    assert F.cross_entropy is original
    train(model, steps=1)
    assert op_message("cross_entropy") not in {m for _, _, m in recorder.events}


def test_paused_ranges_call_straight_through(profiled: Recorder) -> None:
    from torch_nsight.capture.ranges.ranged_forward import pause_ranges

    model = LSTMLanguageModel()
    instrumented(profiled, model)
    pause_ranges(True)
    try:
        train(model, steps=1)
    finally:
        pause_ranges(False)
    assert profiled.events == []


def test_a_compiled_model_computing_its_loss_runs_as_without_the_ranges(profiled: Recorder
                                                                         ) -> None:
    """Dynamo takes the wrapper for PyTorch's own function (its rules go by the qualified
    name, ``torch.nn.functional.cross_entropy``) and puts it in the graph: AOTAutograd's
    tracing calls it with fake tensors, and it calls straight through; the compiled loss
    and gradients are those of the plain model, the compiled graph has no range."""

    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 5)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(self.linear(x), y)

    torch.manual_seed(0)
    plain, model = Classifier(), Classifier()
    model.load_state_dict(plain.state_dict())
    x, y = torch.randn(4, 8), torch.randint(0, 5, (4,))
    expected = plain(x, y)
    expected.backward()
    instrumented(profiled, model)
    got = torch.compile(model, backend="aot_eager", fullgraph=True)(x, y)
    got.backward()
    assert torch.allclose(got, expected)
    assert torch.allclose(model.linear.weight.grad, plain.linear.weight.grad)
    assert not any(m.startswith(("op:", "bwd:op:")) for _, _, m in profiled.events)


def scripted_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, target, label_smoothing=0.1)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torchscript_compiles_a_function_calling_a_named_loss(profiled: Recorder) -> None:
    """TorchScript compiles the original's source against its own globals, as without the
    wrapper, and the scripted function runs PyTorch's loss, no range."""
    instrumented(profiled, LSTMLanguageModel())
    logits, target = torch.randn(4, VOCAB), torch.randint(0, VOCAB, (4,))
    scripted = torch.jit.script(scripted_loss)
    assert torch.equal(scripted(logits, target), F.cross_entropy.__wrapped__(
        logits, target, label_smoothing=0.1))
    assert profiled.events == []


def test_a_loss_inside_a_module_names_the_op_of_that_module(profiled: Recorder) -> None:
    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = LSTMLanguageModel()

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            logits = self.net(tokens[:, :-1])
            return F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))

    model = WithLoss()
    instrumented(profiled, model)
    model(torch.randint(0, VOCAB, (BATCH, SEQ + 1))).backward()
    lines = profiled.lines()
    assert lines[:6] == ["WithLoss", "  net", "    net.embed", "    net.lstm", "    net.head",
                         "  " + op_message("cross_entropy")]
    assert lines[6:8] == ["bwd:WithLoss", "  " + backward_op_message("cross_entropy")]
    # inside the module's ranges the call is the kernel's op, the module stays the module's
    fwd = dict(zip(ATTRIBUTION_COLUMNS, attribute_ranges(
        ("WithLoss", op_message("cross_entropy")), (), ()), strict=True))
    bwd = dict(zip(ATTRIBUTION_COLUMNS, attribute_ranges(
        ("bwd:WithLoss", backward_op_message("cross_entropy")), (), ()), strict=True))
    assert (fwd["module"], fwd["direction"], fwd["op"]) == ("WithLoss", "fwd", "cross_entropy")
    assert (bwd["module"], bwd["direction"], bwd["op"]) == ("WithLoss", "bwd", "cross_entropy")


def test_the_calls_table_files_the_loss_forward_and_backward_under_its_row(
        profiled: Recorder, tmp_path: Path) -> None:
    path = tmp_path / "run.calls.json"
    model = LSTMLanguageModel()
    instrumented(profiled, model, record_calls=path)
    train(model, steps=2)  # the first iteration is recorded
    profiled.handles[-1].remove()
    by_stack: dict[tuple[str, ...], set[str]] = {}
    for row in read_call_rows(path):
        by_stack.setdefault(tuple(row["range_stack"]), set()).add(row["op"])
    loss_forward = by_stack[(op_message("cross_entropy"),)]
    loss_backward = by_stack[(backward_op_message("cross_entropy"),)]
    assert loss_forward == {"_log_softmax", "nll_loss_forward"}
    assert loss_backward == {"nll_loss_backward", "_log_softmax_backward_data"}
    assert by_stack[(step_op_message("clip_grad_norm_"),)] >= {"_foreach_norm",
                                                               "_foreach_mul_"}
    assert "_amp_foreach_non_finite_check_and_unscale_" in by_stack[
        (step_op_message("GradScaler.unscale_"),)]
    for stack, module, direction in (
            ((op_message("cross_entropy"),), "cross_entropy", "fwd"),
            ((backward_op_message("cross_entropy"),), "cross_entropy", "bwd"),
            ((step_op_message("clip_grad_norm_"),), "clip_grad_norm_", OPTIMIZER_DIRECTION)):
        row = dict(zip(ATTRIBUTION_COLUMNS, attribute_ranges(stack, (), ()), strict=True))
        assert (row["module"], row["direction"]) == (outside_module(module), direction)


def test_a_failing_range_never_breaks_the_loop(monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    class OpRangesFail(RecordingEmitter):
        def push(self, message: str) -> None:
            if message.startswith(("op:", "step:op:")):
                raise RuntimeError("no range today")
            super().push(message)

    emitter = OpRangesFail()
    monkeypatch.setattr(instrument_module, "default_emitter", lambda: emitter)
    torch.manual_seed(0)
    plain = LSTMLanguageModel()
    torch.manual_seed(0)
    model = LSTMLanguageModel()
    expected = train(plain, steps=2)
    handle = torch_nsight.instrument(model, enabled=True)
    try:
        with caplog.at_level(logging.WARNING, logger="torch_nsight.capture.ranges.outside"):
            assert train(model, steps=2) == expected
    finally:
        handle.remove()
        failed = outside._WATCH.failed
        outside._WATCH.failed = False
    assert failed and "are off for this process" in caplog.text
    assert not any(m.startswith(("op:", "bwd:op:", "step:op:")) for _, _, m in emitter.events)
