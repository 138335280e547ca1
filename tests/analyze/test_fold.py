"""Repeated blocks folded into one row, on a real Hugging Face GPT-2 sweep (12 identical
layers, tests/data/hf_gpt2_fast)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze.fold import folded_name, format_indices, index_template

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def gpt2() -> torch_nsight.Profile:
    return load_recorded(DATA / "hf_gpt2_fast")


@pytest.fixture(scope="module")
def gpt2_findings(gpt2: torch_nsight.Profile) -> dict[bool, pd.DataFrame]:
    """``gpt2.findings(fold=...)`` for both values, computed once for the tests that only
    read them (seconds each)."""
    return {fold: gpt2.findings(fold=fold) for fold in (True, False)}


@pytest.mark.parametrize("values, text", [([0, 1, 2, 3, 4, 5, 6, 7], "0-7"), ([3], "3"),
                                           ([5, 0, 1, 2, 3], "0-3,5"), ([1, 3, 4], "1,3-4")])
def test_indices_read_as_ranges(values: list[int], text: str) -> None:
    assert format_indices(values) == text


def test_names_fold_on_every_index() -> None:
    assert index_template("model.layers.3.self_attn") == ("model.layers.{}.self_attn", (3,))
    assert index_template("lm_head") == ("lm_head", ())
    template, _ = index_template("layers.2.experts.5")
    assert folded_name(template, [(0, 5), (1, 5), (2, 5)]) == "layers.{0-2}.experts.5"


def _unindexed(names: pd.Series) -> list[str]:
    return [index_template(n)[0] for n in names]


def test_top_hotspots_hold_no_two_rows_that_differ_only_by_a_layer(
        gpt2: torch_nsight.Profile) -> None:
    top = gpt2.hotspots(n=10, order="time")
    keys = list(zip(_unindexed(top["module"]), top["direction"], top["kernel"], strict=True))
    assert len(set(keys)) == len(keys)
    raw = gpt2.hotspots(n=10, order="time", fold=False)
    assert len(set(zip(_unindexed(raw["module"]), raw["kernel"], strict=True))) < 10
    # a folded row is the sum of the rows it stands for
    every = gpt2.hotspots(n=10_000, order="time", fold=False)
    for _, row in top[top["blocks"] > 1].iterrows():
        template = index_template(row["module"].replace("{0-11}", "0"))[0]
        members = every[(pd.Series(_unindexed(every["module"]), index=every.index) == template)
                        & (every["kernel"] == row["kernel"])
                        & (every["direction"] == row["direction"])]
        assert len(members) == row["blocks"] == 12
        assert row["duration_ns"] == pytest.approx(members["duration_ns"].sum())
        assert row["launches"] == pytest.approx(members["launches"].sum())


def test_a_finding_repeated_per_layer_is_one_row_with_the_gain_of_all(
        gpt2_findings: dict[bool, pd.DataFrame]) -> None:
    folded = gpt2_findings[True]
    raw = gpt2_findings[False]
    chains = raw[raw["finding"] == "elementwise_chain"]
    assert len(chains) == 12
    row = folded[folded["finding"] == "elementwise_chain"].iloc[0]
    assert row["module"] == "transformer.h.{0-11}.mlp.act" and row["blocks"] == 12
    assert row["est_gain_ns"] == pytest.approx(chains["est_gain_ns"].sum())
    top = folded.head(5)
    assert len(set(zip(_unindexed(top["module"]), top["finding"], strict=True))) == len(top)
    assert folded["est_gain_ns"].is_monotonic_decreasing


def test_the_module_tree_folds_each_repeated_block_and_its_children() -> None:
    import numpy as np

    profile = torch_nsight.load(DATA / "runs" / "gpt2_runs10")
    plain, folded = profile.modules(), profile.modules(fold=True)
    templates = [(d, r["depth"], index_template(r["module"])[0])
                 for d, (_, r) in zip(folded["direction"], folded.iterrows(), strict=True)]
    assert len(templates) == len(set(templates))  # no two rows differ only by an index
    blocks = folded[folded["module"] == "transformer.h.{0-11}"].iloc[0]
    members = plain[plain["module"].str.fullmatch(r"transformer\.h\.\d+")]
    assert blocks["blocks"] == 12 and len(members) == 12
    assert blocks["inclusive_ns"] == pytest.approx(members["inclusive_ns"].sum())
    assert blocks["kernels"] == members["kernels"].sum()
    # the spread of the twelve blocks' time, run by run
    kernels = profile.kernels
    inside = kernels[kernels["module_path"].str.contains(r"/transformer\.h\.\d+(?:/|$)")]
    per_run = inside.groupby("run")["duration_ns"].sum().to_numpy()
    assert blocks["std_ns"] == pytest.approx(np.std(per_run, ddof=1))
    # in model order: the folded blocks where block 0 was, before ln_f
    order = folded["module"].tolist()
    assert order.index("transformer.h.{0-11}") < order.index("transformer.ln_f")
    assert order.index("transformer.h.{0-11}.attn") < order.index("transformer.ln_f")


def test_the_top_module_of_a_shape_or_kernel_counts_repeated_blocks_together() -> None:
    profile = torch_nsight.load(DATA / "runs" / "gpt2_runs10")
    kernels = profile.kernels
    shape = profile.by_shape().iloc[0]
    assert shape["top_module"] == "transformer.h.{0-11}.mlp.act ×12"
    acts = kernels["module"].str.fullmatch(r"transformer\.h\.\d+\.mlp\.act")
    share = 100 * kernels.loc[acts, "duration_ns"].sum() / kernels["duration_ns"].sum()
    assert shape["top_module_pct"] == pytest.approx(share)
    by_kernel = profile.by_kernel().set_index("kernel")
    assert by_kernel.loc["CatArrayBatchedCopy", "top_module"] == "transformer.h.{0-11}.attn ×12"


def test_a_folded_finding_says_its_evidence_is_one_blocks(
        gpt2_findings: dict[bool, pd.DataFrame]) -> None:
    folded = gpt2_findings[True].set_index("module")
    act = folded.loc["transformer.h.{0-11}.mlp.act"]
    assert act["evidence"].startswith("In each of the 12 blocks (the gain is theirs together): ")
    one = gpt2_findings[False]
    assert one.loc[one["module"] == "transformer.h.0.mlp.act", "evidence"].iloc[0] \
        == act["evidence"].split(": ", 1)[1]


def test_only_blocks_that_launched_the_same_kernels_fold(gpt2: torch_nsight.Profile) -> None:
    # SmallConvNet: BatchNorm (stem.1) and ReLU (stem.2) both launch a
    # vectorized_elementwise_kernel; they are not one block repeated
    profile = load_recorded(DATA / "convnet_fwd.ncu-rep.xz")
    folded = profile.hotspots(n=100)
    assert not folded["module"].str.contains("{", regex=False).any()
    for name in ("stem.1", "stem.2", "stage1.1", "stage1.2"):
        assert (folded["module"] == name).any()
    # the twelve GPT-2 blocks launch the same kernels on the same grids: one row each
    rows = gpt2.hotspots(n=100)
    assert (rows["module"] == "transformer.h.{0-11}.attn").any()
    assert rows.loc[rows["module"] == "transformer.h.{0-11}.attn", "blocks"].eq(12).all()


def test_the_first_block_that_skips_work_folds_apart() -> None:
    # sweep_stack: block 0's input_layernorm computes no input gradient (its input needs
    # none), so its backward launches two kernels fewer than blocks 1-3
    profile = load_recorded(DATA / "sweep_stack")
    tree = profile.modules(fold=True)
    names = set(tree.loc[tree["direction"] == "bwd", "module"])
    assert "0.input_layernorm" in names and "{1-3}.input_layernorm" in names
    # the rest of the blocks are alike, but a child stays under the block it is in
    assert {"0.mlp", "{1-3}.mlp"} <= names and "{0-3}.mlp" not in names
    # a flat table has no nesting: there the four blocks' MLPs are one row
    assert "{0-3}.mlp" in set(profile.hotspot_table(fold=True)["module"])


def test_a_conv_a_batch_norm_and_a_relu_never_share_a_row() -> None:
    """SmallConvNet's ``stem`` is a Sequential of a Conv2d, a BatchNorm2d and a ReLU:
    ``stem.0``, ``stem.1`` and ``stem.2`` read as one block repeated three times, which
    they are not. Recorded with Nsight Compute's rules (findings_rules), its findings once
    folded into ``stem.{0-2} ×3``; the kernel table's top module of the NCHW conversion
    kernels (launched by ``stem.0``, ``stage1.0`` and ``stage2.0`` alone) read
    ``stem.{0-2} ×3`` too."""
    profile = load_recorded(DATA / "findings_rules")
    for fold in (True, False):
        found = profile.finding_table(fold=fold)
        assert not found["module"].str.contains("stem.{", regex=False).any(), fold
    by_kernel = profile.by_kernel().set_index("kernel")
    assert by_kernel.loc["nchwToNhwcKernel", "top_module"] == "stem.0"
    assert not by_kernel["top_module"].str.contains("{", regex=False).any()
    k = profile.kernels
    launched = k.loc[k["kernel"] == "nchwToNhwcKernel", "module"]
    assert set(launched) == {"stem.0", "stage1.0", "stage2.0"}


def test_a_folded_tree_nests_each_row_under_the_block_it_folded_with() -> None:
    """resnet50's ``layer1.0`` (its downsample) does not fold with ``layer1.{1-2}``, but the
    three blocks' BatchNorms launch the same kernels: they once folded into ``layer1.{0-2}.bn1
    ×3`` under ``layer1.0``, whose children then added up to twice its time. In the folded
    tree every row's children and own time add up to its total."""
    from torch_nsight.vocabulary import path_parent

    profile = load_recorded(DATA / "latency" / "resnet50.ncu-rep.xz")
    tree = profile.modules(depth=3, fold=True)
    assert {"layer1.0.bn1", "layer1.{1-2}.bn1"} <= set(tree["module"])
    parents = tree["module_path"].map(lambda p: path_parent(p) if isinstance(p, str) else None)
    children = tree.groupby([tree["direction"], parents])["inclusive_ns"].sum()
    checked = 0
    for _, row in tree[tree["depth"] < 3].iterrows():
        below = children.get((row["direction"], row["module_path"]))
        if below is None:
            continue
        assert below + row["exclusive_ns"] == pytest.approx(row["inclusive_ns"], rel=1e-9), (
            row["module"])
        checked += 1
    assert checked > 10
