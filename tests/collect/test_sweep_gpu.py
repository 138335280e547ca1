"""On a GPU with ncu: sweeps of the Llama-style block checked end to end.

    PYTHONPATH=$PWD python -m pytest -m gpu tests/collect/test_sweep_gpu.py -v
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu  # skipped without CUDA or ncu (tests/conftest.py)
PROJECTIONS = ["self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
               "mlp.down_proj"]
DURATION_ONLY = ["gpu__time_duration.sum"]  # one replay pass per kernel: quick
GEMM_NAMES = r"gemm|nvjet|cutlass|xmma"  # cuBLAS / cuBLASLt / CUTLASS matrix-multiply kernels


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))


def tokens_per_s(row, shape) -> float:
    return shape[0] * shape[1] / (row["duration_ns"] * 1e-9)


def test_llama_block_two_shapes_end_to_end(tmp_path: Path) -> None:
    import torch_nsight
    from examples.models import LlamaBlock

    shapes = [(1, 256, 1024), (2, 512, 1024)]
    profile = torch_nsight.sweep({"sdpa": LlamaBlock}, shapes, dtype="bf16", backward=True,
                                 runs=2, metric_set="lean", output_dir=tmp_path / "out",
                                 derive={"tokens_per_s": tokens_per_s})
    kernels = profile.kernels
    assert profile.failures == [], profile.failures
    assert set(kernels["shape"]) == {"1x256x1024", "2x512x1024"}
    assert set(kernels["variant"]) == {"sdpa"}
    assert set(kernels["run"]) == {0, 1}
    per_run = kernels.groupby(["shape", "run"]).size()
    assert per_run.groupby(level="shape").nunique().eq(1).all(), per_run  # runs agree
    # backward=True: only the loss gradient, made outside the model, has no module range;
    # the child puts it in the op range "op:loss"
    unattributed = kernels["module"] == "(unattributed)"
    assert (kernels.loc[unattributed, "op"] == "loss").all(), \
        kernels.loc[unattributed, ["kernel", "op", "direction"]]
    gemm = kernels["kernel"].str.contains(GEMM_NAMES, case=False, regex=True)
    assert gemm.any() and not (gemm & unattributed).any(), kernels.loc[gemm & unattributed]
    for direction in ("fwd", "bwd"):
        modules = set(kernels.loc[kernels["direction"] == direction, "module"])
        assert set(PROJECTIONS) <= modules, (direction, sorted(modules))
    # up_proj is gate_proj's twin (same weight shape, same input): profiled once, copied
    verdict = profile.replication["sdpa|2x512x1024"]
    replicas = [r for g in verdict["groups"] for r in g["replicas"]]
    assert "mlp.up_proj" in replicas, verdict
    up_proj = kernels[kernels["module"] == "mlp.up_proj"]
    # --nvtx-exclude torch_nsight@replica left its kernels out: every row is a copy
    assert not up_proj.empty and (up_proj["replicated_from"] == "mlp.gate_proj").all()
    copied = kernels[kernels["replicated_from"].notna()]
    assert all(
        any(m == r or m.startswith(r + ".") for r in replicas) for m in copied["module"])
    assert (kernels["tokens_per_s"] > 0).all()
    out = tmp_path / "out"
    assert (out / "sweep.ncu-rep").is_file() and (out / "job.json").is_file()
    assert (out / "profile.parquet").is_file() or (out / "kernels.csv").is_file()


def test_replication_keeps_every_kernel_of_a_stack(tmp_path: Path) -> None:
    import torch_nsight
    from examples.models import LlamaBlock

    def stack() -> torch.nn.Module:
        return torch.nn.Sequential(*[LlamaBlock(hidden=256, heads=4, intermediate=512)
                                     for _ in range(4)])

    common = dict(dtype="bf16", backward=True, metric_set=DURATION_ONLY, quiet=True)
    full = torch_nsight.sweep(stack, [(2, 128, 256)], replicate=False, **common)
    fast = torch_nsight.sweep(stack, [(2, 128, 256)], replicate=True, **common)
    verdict = fast.replication["|2x128x256"]
    assert verdict["status"] == "replicated", verdict
    outer = verdict["groups"][0]
    # block 0 gets no input gradient, so blocks 1-3 are the twins
    assert (outer["representative"], outer["replicas"]) == ("1", ["2", "3"]), verdict
    measured = fast.kernels["replicated_from"].isna().sum()
    assert measured < len(full.kernels)
    count = Counter(zip(full.kernels["module"], full.kernels["direction"], strict=True))
    assert Counter(zip(fast.kernels["module"], fast.kernels["direction"], strict=True)) == count
    layer3 = fast.kernels[fast.kernels["module"].str.startswith("3.")]
    assert layer3["replicated_from"].notna().all() and (layer3["direction"] == "bwd").any()


def test_dry_run_on_the_gpu_checks_the_job() -> None:
    import torch_nsight
    from examples.models import GPT2Small

    profile = torch_nsight.sweep(lambda: GPT2Small(n_layer=2), {"tiny": (1, 32)},
                                 make_inputs=lambda s: torch.randint(0, 50257, s),
                                 profiler=None, quiet=True)
    (result,) = profile.results
    assert result["status"] == "ok" and result["outputs"] == "(1, 32, 50257) float32"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_devices_spread_shapes_over_two_gpus(tmp_path: Path) -> None:
    import torch_nsight
    from examples.models import LlamaBlock

    shapes = [(1, 128, 1024), (1, 256, 1024), (1, 512, 1024), (1, 1024, 1024)]
    profile = torch_nsight.sweep(LlamaBlock, shapes, dtype="bf16", metric_set=DURATION_ONLY,
                                 devices=[0, 1], output_dir=tmp_path / "out", quiet=True)
    kernels = profile.kernels
    assert profile.failures == []
    assert set(kernels["shape"]) == {"x".join(map(str, s)) for s in shapes}
    reports = sorted((tmp_path / "out").glob("*.ncu-rep"))
    assert len(reports) == 2, reports  # one ncu process, one report, per GPU
    per_source = kernels.groupby("source")["shape"].unique()
    assert len(per_source) == 2 and all(len(s) == 2 for s in per_source), per_source


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_local_executor_over_two_gpus_gives_the_one_gpu_rows(tmp_path: Path) -> None:
    import concurrent.futures as cf

    import torch_nsight
    from examples.models import LlamaBlock

    shapes = [(1, 128, 1024), (1, 256, 1024), (1, 512, 1024)]
    one = torch_nsight.sweep(LlamaBlock, shapes, dtype="bf16", metric_set=DURATION_ONLY,
                             output_dir=tmp_path / "one", quiet=True)
    with cf.ProcessPoolExecutor(2) as pool:
        spread = torch_nsight.sweep(LlamaBlock, shapes, dtype="bf16",
                                    metric_set=DURATION_ONLY, devices=[0, 1], executor=pool,
                                    output_dir=tmp_path / "two", quiet=True)
    assert spread.failures == []
    assert len(sorted((tmp_path / "two").glob("*.ncu-rep"))) == 3  # one job per shape

    def rows(profile: torch_nsight.Profile) -> list[tuple]:
        k = profile.kernels
        return sorted(zip(k["shape"], k["module_path"].fillna(""), k["direction"].fillna(""),
                          k["kernel"], strict=True))

    assert rows(spread) == rows(one)
    assert spread.kernels["source"].nunique() == 3
