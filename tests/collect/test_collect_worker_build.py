"""The child builds a factory's model on the target device (no CPU initialisation first)."""

from __future__ import annotations

from pathlib import Path

import torch

from torch_nsight.collect.child.worker import JobRunner
from torch_nsight.collect.shared.job import Assignment, Job

from .models import Stack

seen: list[torch.device] = []


def recording_factory() -> torch.nn.Module:
    seen.append(torch.empty(1).device)
    return Stack(2)


def runner(tmp_path: Path, dtype: str | None = None) -> JobRunner:
    job = Job(variants={"": recording_factory}, shapes=[("2x16", (2, 16))], dtype=dtype)
    return JobRunner(Assignment([0], str(tmp_path / "s.status"), str(tmp_path / "r.json")),
                     job)


def test_a_factory_runs_under_the_target_device(tmp_path: Path) -> None:
    seen.clear()
    child = runner(tmp_path)
    assert child.device == torch.device("cpu")  # no GPU here
    model = child._build(recording_factory)
    assert seen == [torch.device("cpu")]
    # any target device: "meta" stands in for cuda on a machine without one
    child.device = torch.device("meta")
    model = child._build(recording_factory)
    assert seen[-1] == torch.device("meta")
    assert {p.device for p in model.parameters()} == {torch.device("meta")}
    assert torch.empty(1).device == torch.device("cpu")  # the default is restored after


def test_an_instance_is_moved_as_it_is(tmp_path: Path) -> None:
    child = runner(tmp_path, dtype="bfloat16")
    instance = Stack(2)
    weight = instance.h[0].fc1.weight.detach().clone()
    model = child._build(instance)
    assert model is instance
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert torch.equal(model.h[0].fc1.weight.float(), weight.to(torch.bfloat16).float())
