"""The measured iteration as the child runs it (in-process, on the CPU): its ranges and the
aten ops inside them, with and without replication of identical siblings."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_nsight.analyze.attribute import ATTRIBUTION_COLUMNS, attribute_ranges
from torch_nsight.capture import RecordingEmitter
from torch_nsight.capture.ranges import emitter as emitters
from torch_nsight.capture.replicas import replica as replicate
from torch_nsight.collect.child.iteration import LOSS_MESSAGE
from torch_nsight.collect.child.worker import JobRunner
from torch_nsight.collect.shared.job import Assignment, Job
from torch_nsight.naming import MEASURE_MESSAGE
from torch_nsight.vocabulary import UNATTRIBUTED, in_module_range, outside_module

ROOT = Path(__file__).resolve().parents[2]
Event = tuple[int, str, str]  # (thread, push/pop/start/end/op, message or op name)


class _Ops(TorchDispatchMode):
    def __init__(self, events: list[Event]) -> None:
        super().__init__()
        self.events = events

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        self.events.append((threading.get_ident(), "op", str(func)))
        return func(*args, **(kwargs or {}))


def llama_stack() -> torch.nn.Module:
    from examples.models import LlamaBlock

    torch.manual_seed(0)
    return torch.nn.Sequential(*[LlamaBlock(hidden=32, heads=4, intermediate=64)
                                 for _ in range(4)])


def measured_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
                    replicate_siblings: bool) -> tuple[list[Event], dict[str, Any]]:
    """Run the child's job for the 4-block stack (backward on) and return the events of its
    measured iteration, and its result item."""
    import nvtx

    monkeypatch.syspath_prepend(str(ROOT))
    events: list[Event] = []
    recorder = RecordingEmitter()
    recorder.events = events  # type: ignore[assignment]  # pushes and pops in one list
    monkeypatch.setattr(emitters, "NvtxEmitter", lambda: recorder)
    started: dict[int, str] = {}
    counter = iter(range(10**6))

    def start_range(message: str, domain: str | None = None) -> int:
        handle = next(counter)
        started[handle] = message
        events.append((threading.get_ident(), "start", message))
        return handle

    def end_range(handle: int) -> None:
        events.append((threading.get_ident(), "end", started.pop(handle)))

    monkeypatch.setattr(nvtx, "start_range", start_range)
    monkeypatch.setattr(nvtx, "end_range", end_range)
    name = "on" if replicate_siblings else "off"
    job = Job(variants={"": llama_stack}, shapes=[("2x8x32", (2, 8, 32))], backward=True,
              warmup=1, runs=1, replicate=replicate_siblings)
    assignment = Assignment([0], str(tmp_path / f"{name}.status"),
                            str(tmp_path / f"{name}.json"))
    runner = JobRunner(assignment, job)
    with _Ops(events):
        runner.run()
    (item,) = runner.items
    assert item["status"] == "ok", item
    first = events.index((threading.get_ident(), "start", MEASURE_MESSAGE))
    last = events.index((threading.get_ident(), "end", MEASURE_MESSAGE))
    assert not started  # every start/end range ended
    return events[first + 1 : last], item


def test_replication_leaves_the_measured_ranges_as_they_were(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, _ = measured_events(tmp_path, monkeypatch, replicate_siblings=False)
    marked, item = measured_events(tmp_path, monkeypatch, replicate_siblings=True)
    replicas = [r for g in item["replication"]["groups"] for r in g["replicas"]]
    assert {"2", "3", "0.mlp.up_proj", "1.mlp.up_proj"} <= set(replicas), item["replication"]

    def without_replica_ranges(events: list[Event]) -> list[Event]:
        return [e for e in events if e[2] != replicate.REPLICA_MESSAGE]

    # The same ranges, opened and closed around the same ops, as without replication.
    assert without_replica_ranges(marked) == without_replica_ranges(plain)
    # Each replica's own ranges (forward and backward) are wrapped in a replica range.
    opened = [marked[i + 1] for i, e in enumerate(marked)
              if e[1:] == ("start", replicate.REPLICA_MESSAGE)]
    closing = [marked[i - 1] for i, e in enumerate(marked)
               if e[1:] == ("end", replicate.REPLICA_MESSAGE)]
    expected = sorted(m for r in replicas for m in (r, f"bwd:{r}"))
    assert sorted(e[2] for e in opened) == expected and {e[1] for e in opened} == {"push"}
    assert sorted(e[2] for e in closing) == expected and {e[1] for e in closing} == {"pop"}


def test_every_op_of_a_measured_iteration_has_a_module_or_the_loss_range(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events, _ = measured_events(tmp_path, monkeypatch, replicate_siblings=True)
    stacks: dict[int, list[str]] = {}
    seen: dict[tuple[str, ...], tuple[Any, ...]] = {}
    for thread, kind, message in events:
        stack = stacks.setdefault(thread, [])
        if kind == "push":
            stack.append(message)
        elif kind == "pop":
            assert stack.pop() == message
        elif kind == "op":
            seen.setdefault(tuple(stack), attribute_ranges(tuple(stack), (), ()))
    columns = {key: dict(zip(ATTRIBUTION_COLUMNS, values, strict=True))
               for key, values in seen.items()}
    outside = {key: c for key, c in columns.items() if not in_module_range(c["module"])}
    # the loss gradient, made outside the model, is the only thing outside a module range,
    # and its row is named after its op range
    assert list(outside) == [(LOSS_MESSAGE,)]
    assert outside[(LOSS_MESSAGE,)]["op"] == "loss"
    assert outside[(LOSS_MESSAGE,)]["module"] == outside_module("loss") != UNATTRIBUTED
    assert any(stack and stack[-1].startswith("bwd:") for stack in columns)
