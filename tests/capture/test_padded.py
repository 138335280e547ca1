"""pad_linear pads a Linear once, in place: the same Parameters, zero rows that stay zero
under training, no copy of the weight per forward; refused (the module untouched) where the
padding would corrupt something (optimizer state of the old shape, a weight shared with a
module that is no embedding); a pad that fails half-way is undone."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from torch_nsight.capture.fixes import padded
from torch_nsight.capture.fixes.padded import PaddedLinear, pad_linear
from torch_nsight.capture.fixes.switches import apply_fixes
from torch_nsight.verify_exchange import FixSpec

VOCAB, DIM = 37, 24  # 37 output features: padded to 64
PAD = [FixSpec("pad_linear", "lm_head", {"multiple": 64})]


class TinyLM(nn.Module):
    """A language model's ends, as GPT-2 has them: lm_head tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.mix = nn.Linear(DIM, DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(torch.tanh(self.mix(self.wte(ids))))


class BiasedHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(DIM, DIM)
        self.lm_head = nn.Linear(DIM, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(torch.relu(self.body(x)))


def train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[Any]
          ) -> list[float]:
    losses = []
    for inputs, labels in batches:
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def batches_for(model: nn.Module, steps: int = 6) -> list[Any]:
    generator = torch.Generator().manual_seed(1)
    labels = [torch.randint(VOCAB, (2, 5), generator=generator) for _ in range(steps)]
    if isinstance(model, TinyLM):
        return [(torch.randint(VOCAB, (2, 5), generator=generator), y) for y in labels]
    return [(torch.randn(2, 5, DIM, generator=generator), y) for y in labels]


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)


@pytest.mark.parametrize("made", ["before", "after"])
@pytest.mark.parametrize("kind", [TinyLM, BiasedHead])
def test_padded_rows_stay_zero_and_training_matches(kind: type[nn.Module], made: str) -> None:
    torch.manual_seed(0)
    model = kind()
    reference = copy.deepcopy(model)
    params = list(model.parameters())
    optimizer = adamw(model) if made == "before" else None
    (outcome,) = apply_fixes(model, PAD)
    assert outcome.status == "applied", outcome.error
    optimizer = optimizer or adamw(model)
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    head = model.lm_head
    assert isinstance(head, PaddedLinear) and head.weight.shape == (64, DIM)
    if isinstance(model, TinyLM):
        assert model.lm_head.weight is model.wte.weight  # still tied
    batches = batches_for(model)
    losses = train(model, optimizer, batches)
    want = train(reference, adamw(reference), batches)
    torch.testing.assert_close(losses, want)
    assert len(set(losses)) > 1  # it trained
    for (name, param), (_, expected) in zip(head.named_parameters(),
                                            reference.lm_head.named_parameters(), strict=True):
        torch.testing.assert_close(param[:VOCAB], expected, msg=name)
        assert torch.count_nonzero(param[VOCAB:]) == 0, name  # decay keeps zero at zero


class ShapesSeen(TorchDispatchMode):
    """Every aten op run, with the shapes of what it returns."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, list[tuple[int, ...]]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (list, tuple)) else [out]
        self.ops.append((str(func), [tuple(t.shape) for t in outs
                                     if isinstance(t, torch.Tensor)]))
        return out


def test_the_forward_makes_no_padded_weight() -> None:
    model = BiasedHead()
    apply_fixes(model, PAD)
    x = torch.randn(3, DIM, requires_grad=True)
    with ShapesSeen() as seen:
        out = model.lm_head(x)
    names = [name for name, _ in seen.ops]
    assert out.shape == (3, VOCAB) and any("addmm" in name for name in names)
    assert not [n for n in names if "pad" in n or "cat" in n or "zeros" in n or "copy" in n]
    # no op of the forward returns a tensor of the weight's or the bias's padded shape
    assert not [op for op in seen.ops if {(64, DIM), (64,)} & set(op[1])]


def test_optimizer_state_of_the_old_shape_is_refused() -> None:
    model = BiasedHead()
    optimizer = adamw(model)
    train(model, optimizer, batches_for(model, steps=1))
    weight = model.lm_head.weight.detach().clone()
    (outcome,) = apply_fixes(model, PAD)
    assert outcome.status == "failed"
    assert "AdamW already holds state shaped like lm_head" in str(outcome.error)
    assert "before the first optimizer step" in str(outcome.error)
    assert type(model.lm_head) is nn.Linear and torch.equal(model.lm_head.weight, weight)
    train(model, optimizer, batches_for(model, steps=1))  # trains on as before


def test_a_weight_shared_with_another_linear_is_refused() -> None:
    model = nn.Sequential(nn.Linear(DIM, VOCAB), nn.ReLU(), nn.Linear(DIM, VOCAB))
    model[2].weight = model[0].weight
    (outcome,) = apply_fixes(model, [FixSpec("pad_linear", "2", {"multiple": 64})])
    assert outcome.status == "failed"
    assert "also 0.weight of a Linear" in str(outcome.error)
    assert model[0].weight.shape == (VOCAB, DIM) and type(model[2]) is nn.Linear


def test_dtype_device_requires_grad_and_gradients_are_kept() -> None:
    on_meta = nn.Linear(DIM, VOCAB, device="meta", dtype=torch.bfloat16)
    on_meta.bias.requires_grad_(False)
    pad_linear(on_meta, 64)
    assert on_meta.weight.device.type == "meta" and on_meta.weight.shape == (64, DIM)
    assert on_meta.weight.dtype == torch.bfloat16 and on_meta.weight.requires_grad
    assert on_meta.bias.shape == (64,) and not on_meta.bias.requires_grad
    head = nn.Linear(DIM, VOCAB, dtype=torch.float64)
    head(torch.randn(2, DIM, dtype=torch.float64)).sum().backward()
    grad = head.weight.grad.clone()  # a gradient already there is padded with zeros too
    pad_linear(head, 64)
    assert head.weight.dtype == head.weight.grad.dtype == torch.float64
    assert torch.equal(head.weight.grad[:VOCAB], grad) and not head.weight.grad[VOCAB:].any()


def test_a_pad_that_fails_half_way_is_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Sequential(nn.Linear(DIM, VOCAB), nn.Linear(DIM, VOCAB))
    before = copy.deepcopy(model.state_dict())
    resize, calls = padded._resize_rows, []

    def resize_until_out_of_memory(tensor: torch.Tensor, rows: int) -> torch.Tensor:
        calls.append(rows)
        if len(calls) == 3:  # the second Linear's weight
            raise torch.OutOfMemoryError("no room for the padded weight")
        return resize(tensor, rows)

    monkeypatch.setattr(padded, "_resize_rows", resize_until_out_of_memory)
    (outcome,) = apply_fixes(model, [FixSpec("pad_linear", "*", {"multiple": 64})])
    assert outcome.status == "failed" and "no room" in str(outcome.error)
    assert [type(m) for m in model] == [nn.Linear, nn.Linear]
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


class _Doubled(nn.Linear):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.Linear's name
        return 2 * super().forward(input)


def test_a_linear_with_a_forward_of_its_own_is_refused() -> None:
    model = nn.Sequential(_Doubled(DIM, VOCAB))
    x = torch.randn(3, DIM)
    before = model(x)
    (outcome,) = apply_fixes(model, [FixSpec("pad_linear", "0", {"multiple": 64})])
    assert outcome.status == "failed" and "forward of its own" in str(outcome.error)
    assert torch.equal(model(x), before) and model[0].weight.shape == (VOCAB, DIM)
