"""The probe of ``profile``'s automatic launch replication, on the CPU: which layers it names,
when it looks, and that it never ends a run it cannot report on (its ending itself runs under
ncu on the GPU: tests/gpu/test_replicated_launches_gpu.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch import nn

import torch_nsight
from torch_nsight.capture.script import recurrent
from torch_nsight.environment import ScriptEnv, Steps
from torch_nsight.status import RECURRENT_EVENT, StatusWriter


@pytest.fixture(autouse=True)
def _fresh_probe() -> None:
    recurrent._PROBED.clear()


def test_a_cpu_lstm_is_no_cudnn_layer() -> None:
    model = nn.Sequential(nn.Embedding(10, 8), nn.LSTM(8, 8, batch_first=True))
    assert recurrent.recurrent_layers() == []  # nothing instrumented
    handle = torch_nsight.instrument(model, enabled=True, record_calls=False)
    try:
        assert recurrent.recurrent_layers() == []  # instrumented, on the CPU: no cuDNN
    finally:
        handle.remove()


def _events(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_probe_looks_once_a_module_is_instrumented_and_before_the_chosen_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recurrent, "recurrent_layers", lambda: ["lstm"])
    status = StatusWriter(tmp_path / "status.jsonl")
    script = ScriptEnv(steps=Steps(3, 4), status=status.path, probe_launches=True,
                       rehearsal=True)  # a rehearsal says so and goes on
    recurrent.probe(script, status, 0)  # nothing instrumented yet: it waits
    assert _events(status.path) == [] and not recurrent._PROBED
    model = nn.Linear(2, 2)  # kept: the registry holds its modules weakly
    handle = torch_nsight.instrument(model, enabled=True, record_calls=False)
    try:
        recurrent.probe(script, status, 1)
        assert [e["event"] for e in _events(status.path)] == [RECURRENT_EVENT]
        recurrent.probe(script, status, 2)  # once
        assert len(_events(status.path)) == 1
        recurrent._PROBED.clear()
        recurrent.probe(script, status, 3)  # a chosen step: too late, ncu's
        assert len(_events(status.path)) == 1 and recurrent._PROBED
    finally:
        handle.remove()


def test_the_probe_never_ends_a_run_whose_status_line_it_could_not_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recurrent, "recurrent_layers", lambda: ["lstm"])
    ended: list[int] = []
    monkeypatch.setattr(recurrent.os, "_exit", ended.append)
    unwritable = StatusWriter(tmp_path / "no-such-folder" / "status.jsonl")
    script = ScriptEnv(steps=Steps(3, 4), status=unwritable.path, probe_launches=True)
    model = nn.Linear(2, 2)  # kept: the registry holds its modules weakly
    handle = torch_nsight.instrument(model, enabled=True, record_calls=False)
    try:
        recurrent.probe(script, unwritable, 0)
        assert ended == []
        written = StatusWriter(tmp_path / "status.jsonl")
        recurrent._PROBED.clear()
        recurrent.probe(ScriptEnv(steps=Steps(3, 4), status=written.path,
                                  probe_launches=True), written, 0)
        assert ended == [recurrent.PROBE_EXIT_STATUS]  # under ncu it would end here
    finally:
        handle.remove()
