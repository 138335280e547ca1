"""``torch-nsight compare`` reads as an answer: the verdict first, then only the changed
modules, folded, the largest change first and regressions before everything else, within
120 columns and 40 lines for two recordings of one model.

Expected rows come from ``compare_profiles`` and ``changed_rows`` on the recorded pairs."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.analyze import compare_profiles
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
    changed = changed_rows(rows)
    largest = largest_change(changed)
    if largest is not None:
        assert f"largest: {largest['module']}" in lines[0]
    table = lines[lines.index("") + 2:]  # after the blank line and the header
    shown = changed.head(20)
    for line, (_, row) in zip(table, shown.iterrows(), strict=False):
        assert str(row["verdict"]) in line
    if len(changed) > 20:
        assert lines[-1].startswith(f"20 of {len(changed)} changed rows shown")


def test_regressions_come_first_then_by_size() -> None:
    base = torch_nsight.load(DATA / "hand_s128.ncu-rep.xz").kernels
    cur = torch_nsight.load(DATA / "hand_s512.ncu-rep.xz").kernels
    rows = compare_profiles(base, cur)
    changed = changed_rows(rows)
    regressed = changed["verdict"] == "regressed"
    assert regressed.any() and (~regressed).any()
    first_other = int((~regressed).to_numpy().argmax())
    assert regressed.iloc[:first_other].all() and not regressed.iloc[first_other:].any()
    for part in (changed[regressed], changed[~regressed]):
        sizes = part[CHANGE_COLUMN].to_list()
        assert sizes == sorted(sizes, reverse=True)
    assert set(changed["verdict"]) <= {"regressed", "improved", "only in baseline",
                                       "only in current", "fused"}


def test_folded_blocks_add_up() -> None:
    base = torch_nsight.load(DATA / "profile_fast/vit_profile.ncu-rep.xz").kernels
    cur = torch_nsight.load(DATA / "compile/vit_train.ncu-rep.xz").kernels
    rows = compare_profiles(base, cur)
    changed = changed_rows(rows)
    folded = changed[(changed["module"] == "blocks.{0-11}.attn")
                     & (changed["direction"] == "bwd")].iloc[0]
    blocks = rows[rows["module"].str.fullmatch(r"blocks\.\d+\.attn")
                  & (rows["direction"] == "bwd")]
    assert folded["blocks"] == len(blocks) == 12
    assert folded["baseline_ns"] == pytest.approx(blocks["baseline_ns"].sum())
    assert folded["current_ns"] == pytest.approx(blocks["current_ns"].sum())
    assert folded["change_pct"] == pytest.approx(
        100 * (blocks["current_ns"].sum() / blocks["baseline_ns"].sum() - 1))


def test_the_largest_change_is_the_module_that_carries_it() -> None:
    base = torch_nsight.load(DATA / "runs/gpt2_runs_a").kernels
    cur = torch_nsight.load(DATA / "runs/gpt2_runs_unpadded").kernels
    largest = largest_change(changed_rows(compare_profiles(base, cur)))
    assert largest is not None and largest["module"] == "lm_head"  # not GPT2LMHeadModel


def test_top_and_all(capsys: pytest.CaptureFixture[str]) -> None:
    pair = [str(DATA / p) for p in PAIRS[1]]
    rows = compare_profiles(*(torch_nsight.load(p).kernels for p in pair))
    changed = changed_rows(rows)
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
