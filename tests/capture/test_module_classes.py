"""The module class of every call (issue 43): the calls table records the class of the
innermost module each op ran in, and the findings name it and take the module's kind from
a ``torch.nn`` class.

The calls file is recorded here, on the CPU, from the same Llama-style block (same sizes,
bf16, batch 2, sequence 128) as the GPU report ``tests/data/hand_s128.ncu-rep.xz`` it is
loaded with (``tests/data/hand_recorded.py``): module paths and shapes are the report's,
the ops the CPU's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

import torch_nsight
from torch_nsight.analyze.findings.sites import kind_of_class, site_kind
from torch_nsight.calls_file import read_call_rows
from torch_nsight.demo.llama import LlamaBlock

DATA = Path(__file__).resolve().parents[1] / "data"
HIDDEN, HEADS, INTERMEDIATE, BATCH, SEQ = 256, 4, 704, 2, 128  # hand_recorded.py's


@pytest.fixture(scope="module")
def calls_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = LlamaBlock(HIDDEN, HEADS, INTERMEDIATE).to(torch.bfloat16)
    inputs = torch.randn(BATCH, SEQ, HIDDEN, dtype=torch.bfloat16)
    path = tmp_path_factory.mktemp("classes") / "run.calls.json"
    handle = torch_nsight.instrument(model, record_calls=path, enabled=True)
    try:
        model(inputs).float().sum().backward()
    finally:
        handle.remove()
    return path


def test_each_call_carries_the_class_of_its_innermost_module(calls_file: Path) -> None:
    rows = read_call_rows(calls_file)
    by_module = {}
    for row in rows:
        modules = [m.removeprefix("bwd:") for m in row["range_stack"]
                   if not m.removeprefix("bwd:").startswith(("op:", "step:"))]
        if modules:
            by_module.setdefault(modules[-1], set()).add(row["module_class"])
        else:
            assert row["module_class"] is None, row
    model = LlamaBlock(HIDDEN, HEADS, INTERMEDIATE)
    expected = {name or "LlamaBlock": f"{type(m).__module__}.{type(m).__qualname__}"
                for name, m in model.named_modules()}
    assert by_module and all(classes == {expected[name]} for name, classes in by_module.items())
    assert by_module["mlp.up_proj"] == {"torch.nn.modules.linear.Linear"}


def test_findings_name_the_class_recorded_for_their_module(calls_file: Path,
                                                            tmp_path: Path) -> None:
    report = DATA / "hand_s128.ncu-rep.xz"
    plain = torch_nsight.load(report, cache_dir=tmp_path)
    classed = torch_nsight.load(report, calls=calls_file, cache_dir=tmp_path)
    before = plain.findings(fold=False).set_index(["module_path", "direction", "finding"])
    after = classed.findings(fold=False).set_index(["module_path", "direction", "finding"])
    attention = ("LlamaBlock/self_attn", "bwd", "small_grid")
    # before: only the root's class was known (its range is named after it)
    assert pd.isna(before.loc[attention, "module_class"])
    assert after.loc[attention, "module_class"] == "LlamaAttention"
    assert set(before["module_class"].dropna()) == {"LlamaBlock"}
    # a Linear's class gives its kind, whatever its calls were
    classes = classed.calls.dropna(subset=["module_class"])
    linear = classes[classes["module_path"] == "LlamaBlock/mlp/mlp.up_proj"]
    assert set(linear["module_class"]) == {"torch.nn.modules.linear.Linear"}


@pytest.mark.parametrize(("module_class", "kind"), [
    ("torch.nn.modules.conv.Conv2d", "conv"),
    ("torch.nn.modules.conv.ConvTranspose1d", "conv"),
    ("torch.nn.modules.batchnorm.BatchNorm2d", "batch_norm"),
    ("torch.nn.modules.rnn.LSTM", "recurrent"),
    ("torch.nn.modules.loss.CrossEntropyLoss", "loss"),
    ("torch.nn.modules.container.Sequential", None),  # a container says nothing
    ("torchvision.ops.misc.Conv2dNormActivation", None),  # not torch.nn's: its ops say
])
def test_the_kind_of_a_class(module_class: str, kind: str | None) -> None:
    assert kind_of_class(module_class) == kind


def test_a_torch_class_outranks_the_ops_and_a_users_class_does_not() -> None:
    # a Conv2d whose recorded calls at this site are only a copy and an add (its bias)
    assert site_kind("fwd", "Net/conv", ["add"], [], "torch.nn.modules.conv.Conv2d") == "conv"
    assert site_kind("fwd", "Net/block", ["add"], [], "my_models.Block") == "elementwise"
