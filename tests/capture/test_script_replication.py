"""Under ``torch-nsight profile --steps A:B``, a real script's steps drive the sibling check
and the replica marks (CPU: the NVTX calls reach no profiler, the rest runs for real)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import torch_nsight
from torch_nsight.capture.ranges.detect import NCU_VARIABLE
from torch_nsight.capture.script.step import reset_steps
from torch_nsight.environment import REPLICATE_ENV, STATUS_ENV, STEPS_ENV


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(x))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@pytest.fixture
def under_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    status = tmp_path / "report.status.jsonl"
    monkeypatch.setenv(NCU_VARIABLE, str(tmp_path))  # what ncu sets for its application
    monkeypatch.setenv(STEPS_ENV, "2:4")
    monkeypatch.setenv(REPLICATE_ENV, "1")
    monkeypatch.setenv(STATUS_ENV, str(status))
    reset_steps()
    yield status
    reset_steps()


def test_the_step_before_the_chosen_ones_checks_the_siblings_and_the_chosen_mark_them(
        under_profile: Path) -> None:
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    marked_in_step: dict[int, frozenset[str]] = {}
    with torch_nsight.instrument(model, record_calls=False) as handle:
        replication = handle.replication
        assert replication is not None
        for index in range(4):
            with torch_nsight.step():
                loss = model(torch.randn(8, 16)).sum()
                marked_in_step[index] = replication.markers.marked
                loss.backward()
                opt.step()
                opt.zero_grad()
    # blocks.0's input needs no gradient, so its backward launches less: not a twin
    assert replication.groups == [{"representative": "blocks.1",
                                   "replicas": ["blocks.2", "blocks.3"]}]
    marked = {"blocks.2", "blocks.3", "bwd:blocks.2", "bwd:blocks.3"}
    assert marked_in_step == {0: frozenset(), 1: frozenset(), 2: marked, 3: marked}
    assert replication.markers.marked == frozenset()  # cleared when each step ended
    events = [json.loads(line) for line in under_profile.read_text().splitlines()]
    assert [(e["event"], e.get("index"), e.get("status")) for e in events] == [
        ("start", None, None), ("siblings_checked", 1, None), ("item_start", 2, None),
        ("item_end", 2, "ok"), ("item_start", 3, None), ("item_end", 3, "ok")]
    # what the chosen steps did, for the run's record and the dry run
    checked, ended = events[1], events[3]
    assert (checked["groups"], checked["replicas"], checked["failed"]) == (1, 2, False)
    assert ended["replicas"] == 2 and ended["modules"] == len(handle.names)


def test_siblings_that_run_differently_are_not_replicated(under_profile: Path) -> None:
    model = Model()

    def forward(x: torch.Tensor) -> torch.Tensor:  # blocks.2 runs twice: not a twin
        for block in [*model.blocks, model.blocks[2]]:
            x = block(x)
        return model.head(x)

    with torch_nsight.instrument(model, record_calls=False) as handle:
        for _ in range(3):
            with torch_nsight.step():
                forward(torch.randn(8, 16)).sum().backward()
    assert handle.replication.groups == [{"representative": "blocks.1",
                                          "replicas": ["blocks.3"]}]


def test_a_convnext_training_step_replicates_blocks_of_other_rates(under_profile: Path) -> None:
    from twin_models import ConvNeXtStage

    model = ConvNeXtStage(blocks=4, first_block=0)  # stage.0's rate is 0: no random mask
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch_nsight.instrument(model, record_calls=False) as handle:
        for _ in range(3):
            with torch_nsight.step():
                model(torch.randn(2, 3, 32, 32)).sum().backward()
                opt.step()
                opt.zero_grad()
    masked = [f"stage.{i}" for i, b in enumerate(model.stage) if b.stochastic_depth.p > 0]
    assert handle.replication.groups == [{"representative": masked[0],
                                          "replicas": masked[1:]}]
    events = [json.loads(line) for line in under_profile.read_text().splitlines()]
    (checked,) = [e for e in events if e["event"] == "siblings_checked"]
    assert (checked["groups"], checked["replicas"]) == (1, len(masked) - 1)
    # the note says where stage.0 parts from its twins: the mask they allocate
    (line,) = [m for m in checked["mismatches"] if "stage.0 (" in m]
    assert "first difference: stage.0 call 1 launch " in line and "torch.empty(" in line


def test_without_the_request_nothing_is_marked(under_profile: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REPLICATE_ENV)
    with torch_nsight.instrument(Model(), record_calls=False) as handle:
        assert handle.replication is None
