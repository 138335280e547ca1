"""What ``torch-nsight profile --dry-run`` says of the first chosen step's repeated op calls
(torch_nsight.capture.replicas.op_calls), on CPU scripts: how many would be left out, and
that a step whose calls were recorded has a calls table whether any repeats or not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import run_main

SCRIPT = """
import sys, torch, torch_nsight
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.GELU())
torch_nsight.instrument(model)
train = sys.argv[1] == "train"
with torch.set_grad_enabled(train):
    for _ in range(6):
        with torch_nsight.step():
            y = model(torch.randn(8, 16, requires_grad=train)).sum()
            if train:
                y.backward()
"""


@pytest.mark.slow
def test_a_dry_run_says_how_many_repeated_op_calls_are_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)

    def step_3(mode: str) -> str:
        status, out, err = run_main(["profile", "--dry-run", "--steps", "3", "--out",
                                     str(tmp_path / mode), "--", sys.executable, "train.py",
                                     mode], tmp_path, monkeypatch, capsys)
        assert status == 0, err
        return next(x for x in out.replace("\n#   ", " ").splitlines()
                    if x.startswith("# step 3: ok"))

    # training: the second Linear's GEMM repeats the first's, backward repeats too
    trained = step_3("train")
    assert "torch calls recorded" in trained
    assert "repeated op calls left out of profiling" in trained
    # inference: no call repeats another, and the calls table is there all the same
    inferred = step_3("infer")
    assert "torch calls recorded" in inferred
    assert "repeated op calls" not in inferred and "no calls table" not in inferred


TWO_MODELS = """
import torch, torch_nsight
from torch import nn
torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
critic = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
torch_nsight.instrument(generator)
torch_nsight.instrument(critic)
for _ in range(6):
    with torch_nsight.step():
        critic(generator(torch.randn(8, 16))).sum().backward()
"""


@pytest.mark.slow
def test_two_instrumented_models_profile_their_op_calls_one_by_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # each model's dispatch mode sees both models' ops but only its own module ranges: a
    # call of one left out under the other's numbering would land outside its module
    (tmp_path / "gan.py").write_text(TWO_MODELS)
    status, out, err = run_main(["profile", "--dry-run", "--steps", "3", "--out",
                                 str(tmp_path / "out"), "--", sys.executable, "gan.py"],
                                tmp_path, monkeypatch, capsys)
    assert status == 0, err
    line = next(x for x in out.replace("\n#   ", " ").splitlines()
                if x.startswith("# step 3: ok"))
    assert "torch calls recorded" in line and "repeated op calls" not in line
