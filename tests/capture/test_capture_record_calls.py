"""instrument(model, record_calls=PATH): the calls table of the first iteration, written
beside a report so that load() reads it with the report."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torch_nsight.calls_file import read_call_rows
from torch_nsight.capture import RecordingEmitter, instrument
from torch_nsight.demo.llama import LlamaBlock

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
        model(x).mean().backward()
        assert not path.exists()  # the iteration may go on: nothing written yet
        for _ in range(2):
            model(x).mean().backward()
            assert path.exists()  # written when the next iteration started
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


@pytest.mark.slow
def test_a_script_that_never_removes_the_handle_still_gets_its_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "run.calls.json"
    script = f"""
import torch
from torch_nsight.capture import instrument
from torch_nsight.demo.llama import LlamaBlock
model = LlamaBlock({HIDDEN}, {HEADS}, {INTERMEDIATE})
instrument(model, enabled=True, record_calls={str(path)!r})
model(torch.randn({BATCH}, {SEQ}, {HIDDEN})).mean().backward()
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    rows = read_call_rows(path)
    assert any(r["range_stack"][-1:] == ("bwd:mlp.down_proj",) for r in rows)


def test_record_calls_must_be_a_path() -> None:
    import pytest

    with pytest.raises(TypeError, match="record_calls must be a file path"):
        instrument(LlamaBlock(HIDDEN, HEADS, INTERMEDIATE), enabled=True,
                   record_calls=True)  # type: ignore[arg-type]
