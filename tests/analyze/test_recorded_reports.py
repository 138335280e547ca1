"""The analysis steps on real recorded reports (tests/data/), read through ncu_report.

Expectations come from the models' layer shapes, from Nsight Compute's own SOLBottleneck
rule or from invariants, never from values copied out of the reports.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from torch_nsight.analyze import sol_title
from torch_nsight.analyze.classify import TITLE_BOUND
from torch_nsight.loading import load
from torch_nsight.profile import Profile

DATA = Path(__file__).resolve().parents[1] / "data"
CONVNET = DATA / "convnet_fwd.ncu-rep.xz"
SWEEP = DATA / "llama_block_sweep.ncu-rep.xz"
FWD_BWD = DATA.parent.parent / "torch_nsight" / "demo" / "llama_block_fwd_bwd.ncu-rep.xz"


def load_copy(report: Path, tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """Load a private copy, so that the report cache is written outside tests/data."""
    target = tmp_path_factory.mktemp(report.name.split(".")[0]) / report.name
    shutil.copyfile(report, target)
    return load(target)


@pytest.fixture(scope="module")
def convnet(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    return load_copy(CONVNET, tmp_path_factory)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    return load_copy(SWEEP, tmp_path_factory)


@pytest.fixture(scope="module")
def fwd_bwd(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    return load_copy(FWD_BWD, tmp_path_factory)


# --- SmallConvNet(width 64), fp16, eval, batch 8, 3x64x64 images, forward ------------------

BATCH, IMAGE = 8, (3, 64, 64)


@pytest.fixture(scope="module")
def conv_layers() -> dict[str, object]:
    """SmallConvNet's modules by qualified name, and each conv's output shape (CPU pass)."""
    torch = pytest.importorskip("torch")
    from examples.models import SmallConvNet

    model = SmallConvNet(width=64).eval()
    modules = dict(model.named_modules())
    # the output size of every conv, from a CPU pass on the recorded input shape
    sizes: dict[str, tuple[int, ...]] = {}
    hooks = [module.register_forward_hook(
        lambda m, args, out, name=name: sizes.__setitem__(name, tuple(out.shape)))
        for name, module in modules.items() if isinstance(module, torch.nn.Conv2d)]
    try:
        with torch.no_grad():
            model(torch.zeros(BATCH, *IMAGE))
    finally:
        for hook in hooks:
            hook.remove()
    return {"modules": modules, "conv_out": sizes}


def test_every_conv_net_kernel_belongs_to_one_of_its_modules(convnet: Profile,
                                                             conv_layers) -> None:
    modules = conv_layers["modules"]
    leaves = {name for name, m in modules.items() if name and next(m.children(), None) is None}
    root = type(modules[""]).__name__
    k = convnet.kernels
    assert len(k) == 23  # as recorded (tests/data/README.md)
    assert convnet.coverage == 1.0
    for path, module in zip(k["module_path"], k["module"], strict=True):
        parts = path.split("/")
        assert parts[0] == root
        assert all(part in modules for part in parts[1:])
        # each level is the qualified name of a child of the level above
        assert all(child.startswith(parent + ".")
                   for parent, child in zip(parts[1:], parts[2:], strict=False))
        assert module == parts[-1]
    # the containers and the root launch nothing of their own; every leaf launches something
    assert set(k["module"]) == leaves
    assert set(k["direction"]) == {"fwd"}


def analytic_conv_flops(conv: object, out_shape: tuple[int, ...]) -> int:
    n, c_out, h_out, w_out = out_shape
    kh, kw = conv.kernel_size
    return 2 * n * c_out * h_out * w_out * (conv.in_channels // conv.groups) * kh * kw


def test_conv_flops_are_the_analytic_count_plus_at_most_15_percent(convnet: Profile,
                                                                   conv_layers) -> None:
    # A conv module's kernels may include layout transforms and an implicit GEMM whose tiles
    # overhang the output; the sum of their FLOPs is at least the analytic count and within
    # 15% of it. Missing the fp16 tensor-core path (~0 FLOPs) or double counting (2x) fails.
    k = convnet.kernels
    assert len(conv_layers["conv_out"]) == 3
    for name, out_shape in conv_layers["conv_out"].items():
        expected = analytic_conv_flops(conv_layers["modules"][name], out_shape)
        flops = k.loc[k["module"] == name, "flops"]
        assert flops.notna().all()
        assert expected <= flops.sum() <= 1.15 * expected, name
    # the wider convs run on fp16 tensor cores, each GEMM counting the analytic FLOPs exactly
    for name in ("stage1.0", "stage2.0"):
        expected = analytic_conv_flops(conv_layers["modules"][name],
                                       conv_layers["conv_out"][name])
        gemm = k[(k["module"] == name) & (k["precision"] == "tensor_fp16")]
        assert gemm["tensor_fp16_flops"].tolist() == [expected]


def test_classifier_gemm_is_2_batch_in_out(convnet: Profile, conv_layers) -> None:
    fc = conv_layers["modules"]["fc"]
    expected = 2 * BATCH * fc.in_features * fc.out_features
    gemm = convnet.kernels[convnet.kernels["module"] == "fc"]
    assert gemm["precision"].tolist() == ["tensor_fp16"]
    # cuBLAS pads the 1000 outputs to its tile: at most one tile of 64 more
    assert expected <= gemm["flops"].iloc[0] <= 2 * BATCH * fc.in_features * (
        fc.out_features + 64)


# --- sweep of LlamaBlock over three shapes, bf16, forward ----------------------------------

SHAPES = ((1, 256, 1024), (1, 1024, 1024), (1, 4096, 1024))
HIDDEN, INTERMEDIATE = 1024, 2816
# module -> (N, K) of its GEMM (out_features, in_features); M is batch x seq
GEMMS = {
    "self_attn.qkv_proj": (3 * HIDDEN, HIDDEN),
    "self_attn.o_proj": (HIDDEN, HIDDEN),
    "mlp.gate_proj": (INTERMEDIATE, HIDDEN),
    "mlp.down_proj": (HIDDEN, INTERMEDIATE),
}
_TILE = re.compile(r"_(\d+)x(\d+)_\d+x\d+_")


def label(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def padded(size: int, tile: int) -> int:
    return math.ceil(size / tile) * tile


def test_sweep_shapes_line_up_module_by_module(sweep: Profile) -> None:
    k = sweep.kernels
    assert sweep.shapes == [label(s) for s in SHAPES]
    per_shape = [k[k["shape"] == label(s)] for s in SHAPES]
    counts = [part.groupby(["module_path", "direction"]).size() for part in per_shape]
    for other in counts[1:]:
        pd.testing.assert_series_equal(counts[0], other)
    assert [len(part) for part in per_shape] == [len(k) // len(SHAPES)] * len(SHAPES)
    # in launch order too
    orders = [part["module_path"].tolist() for part in per_shape]
    assert orders[0] == orders[1] == orders[2]


@pytest.mark.parametrize("module", sorted(GEMMS))
def test_sweep_gemm_flops_are_2mnk_up_to_tile_padding(sweep: Profile, module: str) -> None:
    n, k_dim = GEMMS[module]
    k = sweep.kernels
    times = []
    for shape in SHAPES:
        m = shape[0] * shape[1]
        gemm = k[(k["module"] == module) & (k["shape"] == label(shape))]
        assert len(gemm) == 1
        row = gemm.iloc[0]
        assert row["precision"] == "tensor_bf16"
        expected = 2 * m * n * k_dim
        # a cuBLAS tile (named in the kernel, e.g. ..._48x64_...) may overhang M or N
        tile = _TILE.search(row["kernel"])
        assert tile is not None, row["kernel"]
        a, b = int(tile.group(1)), int(tile.group(2))
        ceiling = 2 * k_dim * max(padded(m, a) * padded(n, b), padded(m, b) * padded(n, a))
        assert expected <= row["flops"] <= ceiling
        times.append(row["duration_ns"])
    assert times == sorted(times) and len(set(times)) == len(times)


def test_sweep_coverage_and_module_tree_per_shape(sweep: Profile) -> None:
    assert sweep.coverage == 1.0
    tree = sweep.modules()
    k = sweep.kernels
    roots = tree[tree["depth"] == 0]
    assert sorted(roots["shape"]) == sorted(label(s) for s in SHAPES)
    for row in roots.itertuples(index=False):
        assert row.inclusive_ns == pytest.approx(k.loc[k["shape"] == row.shape,
                                                       "duration_ns"].sum())
        assert row.pct_of_total == pytest.approx(100.0)


def test_sweep_hotspots_rank_by_headroom(sweep: Profile) -> None:
    top = sweep.hotspots(n=len(sweep.kernels))
    ranked = top["headroom_ns"].dropna()
    assert len(ranked) == len(top)
    assert ranked.is_monotonic_decreasing
    # every distinct kernel site is listed once, and the first holds the most headroom
    assert top["headroom_ns"].iloc[0] == pytest.approx(sweep.kernels["headroom_ns"].max())
    assert top["headroom_ns"].sum() == pytest.approx(sweep.kernels["headroom_ns"].sum())


# --- the bound verdict against Nsight Compute's SOLBottleneck rule, on every fixture -------

def rule_agreement(profile: Profile) -> tuple[int, int, int]:
    """(kernels, kernels whose stored rule title names one bound, those where ours agrees).

    ``Balanced Throughput`` and ``High Throughput`` name no single bound: not counted.
    """
    called = agree = 0
    for title, bound in zip(profile.kernels["sol_bottleneck"], profile.kernels["bound"],
                            strict=True):
        expected = TITLE_BOUND.get(title)
        if expected is not None:
            called += 1
            agree += bound == expected
    return len(profile.kernels), called, agree


@pytest.mark.parametrize("name", ["convnet", "sweep", "fwd_bwd"])
def test_bound_agrees_with_the_stored_rule_wherever_it_makes_a_call(
        name: str, request: pytest.FixtureRequest) -> None:
    profile: Profile = request.getfixturevalue(name)
    k = profile.kernels
    assert (k["basis"] == "ncu_rule").all()
    kernels, called, agree = rule_agreement(profile)
    assert kernels == len(k) and called > 0
    assert agree == called
    # and re-applied to the stored percentages, the rule reaches the same title
    titles = [sol_title(r.sm_pct, r.mem_pct, r.waves) for r in k.itertuples(index=False)]
    assert titles == k["sol_bottleneck"].tolist()


def test_sweep_largest_shape_has_every_class(sweep: Profile) -> None:
    # the verdicts at 4096 tokens, counted from the stored rule's titles
    k = sweep.kernels[sweep.kernels["shape"] == label(SHAPES[-1])]
    expected = k["sol_bottleneck"].map(TITLE_BOUND).value_counts().to_dict()
    assert k["bound"].value_counts().to_dict() == expected
    assert set(expected) == {"compute", "memory", "latency"}
