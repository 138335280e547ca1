"""``torch-nsight compare`` reads as an answer: the verdict first, then only the changed
modules, folded, the largest change first and regressions before everything else, within
120 columns and 40 lines for two recordings of one model.

Expected rows come from ``compare_profiles`` and ``changed_rows`` on the recorded pairs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from torch_nsight.analyze import compare_profiles, fold_tree, module_tree
from torch_nsight.analyze.changes import CHANGE_COLUMN, changed_rows, largest_change
from torch_nsight.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
PAIRS = [("runs/gpt2_runs_a", "runs/gpt2_runs_unpadded"),
         ("profile_fast/vit_profile.ncu-rep.xz", "compile/vit_train.ncu-rep.xz"),
         ("compile/vit_train.ncu-rep.xz", "compile/reduce_overhead.ncu-rep.xz")]


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    status = main(["compare", *argv])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_two_recordings_of_one_model_fit_a_screen(before: str, after: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = torch_nsight.load(DATA / before), torch_nsight.load(DATA / after)
    rows = compare_profiles(base.kernels, cur.kernels)
    status, lines, err = _compare(capsys, str(DATA / before), str(DATA / after))
    assert status == int((rows["verdict"] == "regressed").any())  # the CI exit code
    assert len(lines) + len(err.splitlines()) <= 40
    assert max(map(len, lines + err.splitlines())) <= 120
    regressed = int((rows["verdict"] == "regressed").sum())
    improved = int((rows["verdict"] == "improved").sum())
    assert lines[0].startswith(f"{regressed} regressed, {improved} improved of {len(rows)} "
                               "modules at 5%")
    changed = changed_rows(rows, base.kernels, cur.kernels)
    largest = largest_change(changed)
    if largest is not None:
        assert f"largest: {largest['module']}" in lines[0]
    table = lines[lines.index("") + 2:]  # after the blank line and the header
    shown = changed.head(20)
    for line, (_, row) in zip(table, shown.iterrows(), strict=False):
        assert str(row["verdict"]) in line
    if len(changed) > 20:
        assert lines[-1].startswith(f"20 of {len(changed)} changed rows shown")


def test_regressions_come_first_then_improvements_then_by_size() -> None:
    base = torch_nsight.load(DATA / "hand_s128.ncu-rep.xz").kernels
    cur = torch_nsight.load(DATA / "hand_s512.ncu-rep.xz").kernels
    rows = compare_profiles(base, cur)
    changed = changed_rows(rows, base, cur)
    regressed = changed["verdict"] == "regressed"
    assert regressed.any() and (~regressed).any()
    part = changed["verdict"].map({"regressed": 0, "improved": 1}).fillna(2)
    assert part.is_monotonic_increasing  # regressed, improved, then the rest
    for _, rows_of_part in changed.groupby(part):
        sizes = rows_of_part[CHANGE_COLUMN].to_list()
        assert sizes == sorted(sizes, reverse=True)
    assert set(changed["verdict"]) <= {"regressed", "improved", "only in baseline",
                                       "only in current", "fused"}


def test_with_nothing_regressed_the_headlines_largest_change_is_the_first_row() -> None:
    """Two MoE steps of other models (recorded): one module improved, hundreds found on one
    side only, each larger than the improvement; the one-line answer names the improvement,
    and the table starts with it, not with a module of one side."""
    base = torch_nsight.load(DATA / "zoo_families" / "mixtral_moe.ncu-rep.xz").kernels
    cur = torch_nsight.load(DATA / "zoo_families" / "qwen2_moe.ncu-rep.xz").kernels
    changed = changed_rows(compare_profiles(base, cur), base, cur)
    assert not (changed["verdict"] == "regressed").any()
    largest = largest_change(changed)
    assert largest is not None and largest["verdict"] == "improved"
    one_sided = changed[changed["verdict"].str.startswith("only in")]
    assert (one_sided[CHANGE_COLUMN] > largest[CHANGE_COLUMN]).any()  # they outweigh it
    assert changed.iloc[0]["module_path"] == largest["module_path"]


def test_folded_blocks_add_up() -> None:
    """The ViT's attention blocks fold as their blocks do: in the backward, block 0 launched
    other kernels than blocks 1-11 (so ``blocks.0`` stays apart), and its ``attn`` stays
    under it, though the twelve ``attn`` launched the same kernels."""
    base = torch_nsight.load(DATA / "profile_fast/vit_profile.ncu-rep.xz").kernels
    cur = torch_nsight.load(DATA / "compile/vit_train.ncu-rep.xz").kernels
    rows = compare_profiles(base, cur)
    changed = changed_rows(rows, base, cur)
    backward = changed[changed["direction"] == "bwd"].set_index("module")
    assert {"blocks.0", "blocks.{1-11}"} <= set(backward.index)
    folded = backward.loc["blocks.{1-11}.attn"]
    assert backward.loc["blocks.0.attn", "blocks"] == 1
    blocks = rows[rows["module"].str.fullmatch(r"blocks\.([1-9]|1[01])\.attn")
                  & (rows["direction"] == "bwd")]
    assert folded["blocks"] == len(blocks) == 11
    assert folded["baseline_ns"] == pytest.approx(blocks["baseline_ns"].sum())
    assert folded["current_ns"] == pytest.approx(blocks["current_ns"].sum())
    assert folded["change_pct"] == pytest.approx(
        100 * (blocks["current_ns"].sum() / blocks["baseline_ns"].sum() - 1))


def test_the_largest_change_is_the_module_that_carries_it() -> None:
    base = torch_nsight.load(DATA / "runs/gpt2_runs_a").kernels
    cur = torch_nsight.load(DATA / "runs/gpt2_runs_unpadded").kernels
    largest = largest_change(changed_rows(compare_profiles(base, cur), base, cur))
    assert largest is not None and largest["module"] == "lm_head"  # not GPT2LMHeadModel


def test_top_and_all(capsys: pytest.CaptureFixture[str]) -> None:
    pair = [str(DATA / p) for p in PAIRS[1]]
    sides = [torch_nsight.load(p).kernels for p in pair]
    rows = compare_profiles(*sides)
    changed = changed_rows(rows, *sides)
    _, lines, _ = _compare(capsys, *pair, "--top", "3")
    at = lines.index("") + 2
    assert lines[at + 3] == ""
    assert lines[-1].startswith(f"3 of {len(changed)} changed rows shown")
    _, lines, _ = _compare(capsys, *pair, "--all")
    at = lines.index("") + 2
    assert len(lines) - at == len(rows)  # the whole tree, one row a line
    assert max(map(len, lines)) <= 120
    with pytest.raises(SystemExit):
        main(["compare", *pair, "--top", "3", "--all"])


def test_blocks_fold_as_the_module_tree_folds_them() -> None:
    """Changed rows fold by structure, as hotspots and the module tree do: a ResNet-50
    recording against the same launches taking twice as long (every module regressed), the
    changed rows are the folded module tree's, a downsample's Conv2d and BatchNorm
    (``downsample.0``, ``downsample.1``) are two rows, and a stage's first block (with its
    downsample) is not folded with the others."""
    base = torch_nsight.load(DATA / "latency/resnet50.ncu-rep.xz").kernels
    cur = base.assign(duration_ns=2 * base["duration_ns"])
    rows = compare_profiles(base, cur)
    assert set(rows["verdict"]) == {"regressed"}
    changed = changed_rows(rows, base, cur)
    tree = fold_tree(module_tree(base, keep_runs=True), base)
    def folded(table: pd.DataFrame) -> list[tuple[str, str]]:
        return sorted(zip(table["direction"].map(str), table["module_path"].map(str),
                          strict=True))

    assert folded(changed) == folded(tree)
    modules = set(changed["module"])
    assert {"layer1.0.downsample.0", "layer1.0.downsample.1", "layer1.0",
            "layer1.{1-2}"} <= modules
    assert not any("downsample.{" in m for m in modules)
    assert changed["baseline_ns"].sum() == pytest.approx(rows["baseline_ns"].sum())
