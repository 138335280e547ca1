"""tests/data/strip_code_modules.py: fixtures without their embedded code modules read the
same through NVIDIA's reader."""

from __future__ import annotations

import importlib.util
import lzma
from pathlib import Path

import pandas as pd

import torch_nsight

DATA = Path(__file__).resolve().parents[1] / "data"


def _stripper():
    spec = importlib.util.spec_from_file_location("strip_code_modules",
                                                  DATA / "strip_code_modules.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_report_without_its_code_modules_reads_the_same(tmp_path: Path) -> None:
    raw = lzma.decompress((DATA / "convnet_fwd.ncu-rep.xz").read_bytes())
    (tmp_path / "whole.ncu-rep").write_bytes(raw)
    stripped = _stripper().strip(raw)
    assert len(stripped) < len(raw)
    (tmp_path / "stripped.ncu-rep").write_bytes(stripped)
    whole = torch_nsight.load(tmp_path / "whole.ncu-rep", cache=False).kernels
    lean = torch_nsight.load(tmp_path / "stripped.ncu-rep", cache=False).kernels
    pd.testing.assert_frame_equal(whole.drop(columns="source"), lean.drop(columns="source"))
