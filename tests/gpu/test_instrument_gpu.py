"""On a GPU with ncu: every kernel of an instrumented Llama-style block, forward and
backward, lies inside the NVTX range of the module that launched it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu  # skipped without CUDA or ncu (tests/conftest.py)

PROJECTIONS = ["self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
               "mlp.down_proj"]
GEMM = re.compile(r"gemm|nvjet|xmma|cutlass|sm90|sm80", re.IGNORECASE)


def innermost_ranges(report: Path) -> list[tuple[str, list[str]]]:
    import ncu_report

    ctx = ncu_report.load_report(str(report))
    rows = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            state = action.nvtx_state()
            stack: list[str] = []
            for domain_id in state.domains():
                domain = state.domain_by_id(domain_id)
                if domain.name() == "torch_nsight":
                    stack = list(domain.push_pop_ranges())
            rows.append((action.name(), stack))
    return rows


def test_every_kernel_lies_in_its_module_range(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "data"))
    from record_fixtures import find_ncu, record

    info = record("llama_block_fwd_bwd", tmp_path, find_ncu(), metric_set="duration")
    assert info["returncode"] == 0, info["log_tail"]
    kernels = innermost_ranges(tmp_path / info["report"])
    assert len(kernels) == info["kernels_profiled"] > 0

    from examples.models import LlamaBlock

    names = {name or "LlamaBlock" for name, _ in LlamaBlock().named_modules()}
    allowed = names | {f"bwd:{n}" for n in names}
    # The loss (a cast and a mean outside the model) and the seed of its gradient run between
    # the model's forward and its backward, outside every module: one contiguous run, no GEMM.
    outside = [i for i, (_, stack) in enumerate(kernels) if not stack]
    assert outside == list(range(outside[0], outside[-1] + 1)) if outside else True
    assert not any(GEMM.search(kernels[i][0]) for i in outside)
    forward = kernels[: outside[0]] if outside else kernels
    backward = kernels[outside[-1] + 1 :] if outside else []
    assert forward and backward
    for kernel, stack in forward + backward:
        module_ranges = [m for m in stack if not m.startswith("op:")]
        assert module_ranges[-1] in allowed, (kernel, stack)
    assert all(s[0] == "LlamaBlock" and not s[-1].startswith("bwd:") for _, s in forward)
    assert all(s[-1].startswith("bwd:") for _, s in backward)

    gemms_fwd = {s[-1] for k, s in forward if GEMM.search(k)}
    gemms_bwd = {s[-1] for k, s in backward if GEMM.search(k)}
    assert set(PROJECTIONS) <= gemms_fwd
    assert {f"bwd:{p}" for p in PROJECTIONS} <= gemms_bwd
