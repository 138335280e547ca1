"""The module tree rollup and attribution coverage (pure pandas)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest

from torch_nsight.analyze import UNATTRIBUTED, coverage, module_tree
from torch_nsight.errors import MissingMetricError
from torch_nsight.vocabulary import outside_module


def by_path(tree: pd.DataFrame) -> dict[str, pd.Series]:
    return {row["module_path"]: row for _, row in tree.iterrows()}


def test_inclusive_and_exclusive_times(block: pd.DataFrame) -> None:
    nodes = by_path(module_tree(block))
    assert nodes["Block"]["inclusive_ns"] == 90.0 and nodes["Block"]["exclusive_ns"] == 10.0
    assert nodes["Block/attn"]["inclusive_ns"] == 60.0
    assert nodes["Block/attn"]["exclusive_ns"] == 20.0
    assert nodes["Block/attn/attn.proj"]["depth"] == 2
    assert nodes["Block"]["kernels"] == 4 and nodes["Block"]["exclusive_kernels"] == 1
    assert nodes["Block/attn"]["headroom_ns"] == 20.0
    assert nodes[UNATTRIBUTED]["inclusive_ns"] == 10.0
    assert nodes["Block"]["pct_of_total"] == pytest.approx(90.0)


def test_dominant_bound_is_the_one_holding_most_time(block: pd.DataFrame) -> None:
    nodes = by_path(module_tree(block))
    assert nodes["Block"]["bound"] == "compute"  # 60 of 90 ns
    assert nodes["Block"]["bound_share"] == pytest.approx(60 / 90)
    assert nodes["Block/attn"]["bound"] == "compute"  # 40 vs 20


def test_call_tree_order_parents_first_siblings_by_first_launch(block: pd.DataFrame) -> None:
    paths = module_tree(block)["module_path"].tolist()
    assert paths == ["Block", "Block/attn", "Block/attn/attn.proj", "Block/mlp", UNATTRIBUTED]


def test_depth_folds_deeper_modules_into_their_ancestor(block: pd.DataFrame) -> None:
    nodes = by_path(module_tree(block, depth=1))
    assert "Block/attn/attn.proj" not in nodes
    assert nodes["Block/attn"]["exclusive_ns"] == 60.0
    assert module_tree(block, depth=0)["module_path"].tolist() == ["Block", UNATTRIBUTED]
    with pytest.raises(ValueError, match="depth"):
        module_tree(block, depth=-1)


def test_times_are_per_run_and_split_by_label(make_kernel: Callable[..., dict]) -> None:
    df = pd.DataFrame([make_kernel("Net", 10.0, run=0), make_kernel("Net", 30.0, run=1),
                       make_kernel("Net", 5.0, shape="big", run=0)])
    tree = module_tree(df)
    small = tree[tree["shape"] == "s"].iloc[0]
    assert small["inclusive_ns"] == 20.0 and small["kernels"] == 1.0
    assert tree[tree["shape"] == "big"].iloc[0]["inclusive_ns"] == 5.0


def test_forward_and_backward_are_separate_trees(make_kernel: Callable[..., dict]) -> None:
    df = pd.DataFrame([make_kernel("Net", 10.0), make_kernel("Net", 30.0, direction="bwd")])
    tree = module_tree(df)
    assert tree["direction"].tolist() == ["fwd", "bwd"]
    assert tree["pct_of_total"].tolist() == pytest.approx([25.0, 75.0])


def test_coverage(block: pd.DataFrame) -> None:
    assert coverage(block) == pytest.approx(0.9)


def test_replicated_rows_count_like_measured_ones(block: pd.DataFrame) -> None:
    extra = block.iloc[[1]].assign(replicated_from="Block/attn/attn.proj")
    tree = module_tree(pd.concat([block.assign(replicated_from=None), extra]))
    assert by_path(tree)["Block"]["inclusive_ns"] == 130.0


def test_empty_table() -> None:
    assert module_tree(pd.DataFrame(columns=["module", "module_path", "duration_ns"])).empty


def test_a_table_without_modules_gets_a_clear_error() -> None:
    with pytest.raises(MissingMetricError, match="module_tree needs the column.s. module"):
        module_tree(pd.DataFrame(columns=["module_path", "duration_ns"]))


def test_module_tables_list_modules_in_model_order() -> None:
    """Replicated blocks take the place of the block they copy, and the backward pass lists
    the modules in the forward's order (it ran them in reverse, measured block first)."""
    from pathlib import Path

    import torch_nsight

    data = Path(__file__).resolve().parents[1] / "data"
    gpt2 = torch_nsight.load(data / "hf_gpt2_fast").modules(depth=2)
    children = [p.rsplit("/", 1)[-1] for p in gpt2["module_path"] if p.count("/") == 2]
    blocks = [f"transformer.h.{i}" for i in range(12)]
    assert children == ["transformer.wte", "transformer.wpe", *blocks, "transformer.ln_f"]
    stack = torch_nsight.load(data / "sweep_stack").modules(depth=1)
    for direction in ("fwd", "bwd"):
        rows = stack[(stack["shape"] == "2x128x256") & (stack["direction"] == direction)]
        # the loss gradient, made after the forward outside the model, is its own row
        loss = [outside_module("loss")] if direction == "fwd" else []
        assert rows["module_path"].tolist() == ["Sequential",
                                                *(f"Sequential/{i}" for i in range(4)), *loss]
