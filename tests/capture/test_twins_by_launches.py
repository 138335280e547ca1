"""Twins are siblings of one class whose launches match, whatever their Python attributes
(:mod:`torch_nsight.capture.replicas.launches`, :func:`~torch_nsight.capture.replicas.siblings.check_siblings`),
on blocks written as torchvision and timm write them."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from twin_models import CNBlock, ConvNeXtStage, DropPath, Power, TimmStack

from torch_nsight.capture.replicas.launches import launches_nothing, signature
from torch_nsight.capture.replicas.siblings import check_siblings


def checked(model: nn.Module, x: torch.Tensor, *, train: bool) -> dict[str, Any]:
    """The verdict on one step: a training step (forward and backward; ``x`` then needs a
    gradient, as a block's input does inside a model) or an eval forward."""
    model.train(train)
    x = x.detach().requires_grad_(train)
    torch.manual_seed(0)

    def once() -> None:
        if train:
            model(x).float().sum().backward()
        else:
            with torch.no_grad():
                model(x)

    return check_siblings(model, once, backward=train, cuda=False)


def groups(verdict: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(g["representative"], g["replicas"]) for g in verdict["groups"]]


def names(parent: str, children: nn.Module, keep: Any = None) -> list[str]:
    return [f"{parent}.{n}" for n, m in children.named_children() if keep is None or keep(m)]


def shape_text(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}[{','.join(str(d) for d in t.shape)}]"


@pytest.mark.parametrize(("first_block", "train"), [(3, True), (3, False), (0, False)])
def test_convnext_blocks_that_differ_only_in_their_rate_are_twins(first_block: int,
                                                                    train: bool) -> None:
    model = ConvNeXtStage(blocks=4, first_block=first_block)
    rates = [block.stochastic_depth.p for block in model.stage]
    assert len(set(rates)) == len(rates)  # every block has its own rate
    verdict = checked(model, torch.randn(2, 3, 32, 32), train=train)
    first, *others = names("stage", model.stage)
    assert verdict["status"] == "replicated"
    assert groups(verdict)[0] == (first, others)
    # the Permute pairs inside each block do differ, but inside replicas nobody cares
    assert not any(f"{others[0]}." in line for line in verdict["mismatches"])


def test_a_block_whose_rate_is_zero_launches_less_when_training() -> None:
    model = ConvNeXtStage(blocks=4, first_block=0)
    verdict = checked(model, torch.randn(2, 3, 32, 32), train=True)
    zero = names("stage", model.stage, lambda b: b.stochastic_depth.p == 0.0)
    twins = names("stage", model.stage, lambda b: b.stochastic_depth.p > 0.0)
    assert zero == ["stage.0"] and groups(verdict)[0] == (twins[0], twins[1:])
    (line,) = [m for m in verdict["mismatches"] if f"{zero[0]} (" in m]
    assert line.startswith(f"twins run differently (launches): {zero[0]} (1 call(s), ")
    # where stage.0 adds the residual, its twins first allocate the random mask
    assert f"first difference: {zero[0]} call 1 launch " in line
    said = line.split("first difference: ")[1]
    assert said.index("Tensor.add_(") < said.index(f"; {twins[0]} launch ")
    assert said.index(f"; {twins[0]} launch ") < said.index("torch.empty(")


@pytest.mark.parametrize("train", [True, False])
def test_timm_drop_path_rates_do_not_split_twins(train: bool) -> None:
    model = TimmStack(depth=4, drop_path_rate=0.1)
    with_drop_path = names("blocks", model.blocks, lambda b: isinstance(b.drop_path2, DropPath))
    assert len({b.drop_path2.drop_prob for b in model.blocks[1:]}) == len(with_drop_path)
    verdict = checked(model, torch.randn(4, 16), train=train)
    # blocks.0 (rate 0) has an nn.Identity where the others have a DropPath: another kind
    assert groups(verdict) == [(with_drop_path[0], with_drop_path[1:])]
    assert verdict["mismatches"] == []


class Pyramid(nn.Module):
    """Two twin ConvNeXt blocks, the second run at half the resolution."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(CNBlock(dim, 1e-6, 0.0) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks[0](x).mean() + self.blocks[1](F.avg_pool2d(x, 2)).mean()


def test_twins_fed_other_shapes_are_profiled_and_the_launch_is_named() -> None:
    x = torch.randn(2, 8, 16, 16)
    verdict = checked(Pyramid(), x, train=False)
    assert verdict["groups"] == []
    (line,) = [m for m in verdict["mismatches"] if "blocks.0 (" in m]
    assert line.startswith("twins run differently (inputs, launches): ")
    said = line.split("first difference: ")[1]
    assert said.startswith("blocks.1 call 1 launch 1 of ")
    assert shape_text(F.avg_pool2d(x, 2)) in said.split("; blocks.0")[0]
    assert shape_text(x) in said.split("; blocks.0")[1]


def test_twins_that_compute_in_another_dtype_are_profiled() -> None:
    class Cast(nn.Module):
        def __init__(self, dtype: torch.dtype) -> None:
            super().__init__()
            self.fc = nn.Linear(16, 16)
            self.dtype = dtype

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.gelu(self.fc(x).to(self.dtype)).float()

    model = nn.Sequential(Cast(torch.float32), Cast(torch.bfloat16), Cast(torch.float32))
    verdict = checked(model, torch.randn(4, 16), train=True)
    assert groups(verdict) == [("0", ["2"])]
    (line,) = verdict["mismatches"]
    said = line.split("first difference: ")[1]
    assert said.startswith("1 call 1 launch 2 of ") and "Tensor.to(" in said
    assert str(torch.bfloat16) in said.split("; 0 launch")[0]
    assert str(torch.float32) in said.split("; 0 launch")[1]


def test_an_extra_launch_is_named() -> None:
    model = TimmStack(depth=4, drop_path_rate=0.1)
    model.blocks[2].drop_path2 = DropPath(0.0)  # keeps its class, launches no mask
    verdict = checked(model, torch.randn(4, 16), train=True)
    assert groups(verdict) == [("blocks.1", ["blocks.3"])]
    (line,) = verdict["mismatches"]
    said = line.split("first difference: ")[1]
    assert said.startswith("blocks.2 call 1 launch ")
    assert "Tensor.new_empty(" in said.split("; blocks.1 launch")[1]


def test_a_float_that_picks_a_kernel_splits_twins_and_others_do_not() -> None:
    # pow by 2 runs ATen's square kernel, by 2.5 or 2.7 the general one
    model = nn.Sequential(*[Power(16, e) for e in (2.0, 2.5, 2.7)])
    verdict = checked(model, torch.randn(4, 16), train=True)
    assert groups(verdict) == [("1", ["2"])]
    (line,) = verdict["mismatches"]
    assert "Tensor.pow(" in line and ", 2.0)" in line and ", float)" in line


def test_reading_metadata_launches_nothing() -> None:
    class Sized(nn.Module):
        def __init__(self, check: bool) -> None:
            super().__init__()
            self.fc = nn.Linear(16, 16)
            self.check = check

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.check and (x.size(-1) != x.shape[-1] or x.dim() != x.ndim):
                raise AssertionError
            return self.fc(x)

    model = nn.Sequential(Sized(False), Sized(True), Sized(False))
    assert groups(checked(model, torch.randn(4, 16), train=True)) == [("0", ["1", "2"])]
    assert launches_nothing(".TensorBase.size")
    assert launches_nothing(".getset_descriptor.__get__")
    assert not launches_nothing(".TensorBase.mul")


def test_signatures_keep_what_picks_a_kernel() -> None:
    assert signature(0.05) == signature(0.1) == "float"
    assert signature(0.0) != signature(0.1) and signature(2.0) != signature(2.5)
    assert signature(float("inf")) != signature(1e30)
    t = torch.randn(2, 3, 4, 5)
    last = t.to(memory_format=torch.channels_last)
    assert signature(t) != signature(last)  # strides decide the kernel
    assert signature(t) != signature(t.to(torch.bfloat16)) != signature(t.to(torch.float64))
    # a size-1 dimension's stride is arbitrary after a view and changes nothing
    assert signature(torch.randn(1, 4)) == signature(torch.randn(4, 1).t())
    assert signature(torch.bfloat16) == str(torch.bfloat16)


def test_torchvision_convnext_tiny_when_importable() -> None:
    models = pytest.importorskip("torchvision.models")
    model = models.convnext_tiny(weights=None)
    verdict = checked(model, torch.randn(2, 3, 32, 32), train=True)
    expected = []
    for stage_name, stage in model.features.named_children():
        if not all(isinstance(b, models.convnext.CNBlock) for b in stage.children()):
            continue
        twins = names(f"features.{stage_name}", stage, lambda b: b.stochastic_depth.p > 0.0)
        expected.append((twins[0], twins[1:]))
    assert [g for g in groups(verdict) if g[0].count(".") == 2] == expected
