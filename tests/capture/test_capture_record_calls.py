"""instrument(model, record_calls=PATH): the calls table of the first iteration, written
beside a report so that load() reads it with the report."""

from __future__ import annotations

from pathlib import Path

import torch

from torch_nsight.capture import RecordingEmitter, instrument
from torch_nsight.demo.llama import LlamaBlock
from torch_nsight.report.sources import read_call_rows

HIDDEN, HEADS, INTERMEDIATE, BATCH, SEQ = 32, 4, 64, 2, 8


def test_record_calls_writes_the_first_iteration(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LlamaBlock(HIDDEN, HEADS, INTERMEDIATE)
    x = torch.randn(BATCH, SEQ, HIDDEN)
    path = tmp_path / "run.calls.json"
    plain = RecordingEmitter()
    with instrument(model, enabled=True, emitter=plain):
        model(x).mean().backward()
    recorded = RecordingEmitter()
    with instrument(model, enabled=True, emitter=recorded, record_calls=path):
        for _ in range(3):
            model(x).mean().backward()
            assert not path.exists()  # written at remove()
    # the ranges are the same as without recording, iteration after iteration
    assert [e[1:] for e in recorded.events] == [e[1:] for e in plain.events] * 3
    rows = read_call_rows(path)
    gate = [r for r in rows if r["range_stack"][-1:] == ("mlp.gate_proj",)
            and r["op"] in ("mm", "addmm")]
    assert len(gate) == 1 and gate[0]["count"] == 1  # one iteration, not three
    m, k, n = BATCH * SEQ, HIDDEN, INTERMEDIATE
    assert gate[0]["flops"] == 2 * m * n * k
    assert any(r["range_stack"][-1:] == ("bwd:mlp.gate_proj",) for r in rows)


def test_no_calls_file_when_not_enabled(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_NSIGHT_INSTRUMENT", "0")
    model = LlamaBlock(HIDDEN, HEADS, INTERMEDIATE)
    with instrument(model, record_calls=tmp_path / "run.calls.json") as handle:
        model(torch.randn(BATCH, SEQ, HIDDEN))
    assert not handle.active and not (tmp_path / "run.calls.json").exists()
