"""``torch-nsight profile --ranks`` on two GPUs: ``torchrun`` starts two ranks of a DDP loop
(``examples/train_ddp.py``, NCCL), each under its own ncu; each writes ``report-rank<R>``, and
the folder reads back with a ``rank`` column and one row per rank ``--by rank``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_nsight

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_each_rank_profiled_into_its_own_report(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--no-python",
         sys.executable, "-m", "torch_nsight", "profile", "--ranks", "0,1", "--steps", "2:3",
         "--out", str(out), "--", sys.executable, str(ROOT / "examples" / "train_ddp.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    reports = sorted(p.name for p in out.glob("report-rank*.ncu-rep"))
    assert reports == ["report-rank0.ncu-rep", "report-rank1.ncu-rep"], output[-3000:]
    profile = torch_nsight.load(out)
    kernels = profile.kernels
    assert set(kernels["rank"].astype(int)) == {0, 1}
    per_rank = kernels.groupby(kernels["rank"].astype(int)).size()
    assert per_rank[0] == per_rank[1] > 10  # the same block on each GPU
    assert kernels["module"].astype(str).str.contains("mlp|attn", regex=True).any()
