"""``profile --replicate-launches`` at the command line: what it refuses, and the hint a profile
whose repeated launches would have cost less replicated prints (on the zoo's recordings,
tests/data/zoo_families: an LSTM language model's step and Swin-T's, H100)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.cli.main import main
from torch_nsight.cli.profile_launches import replication_hint, say_replication_hint
from torch_nsight.collect.parent.launch_list import forget_launches, record_launches
from torch_nsight.environment import Steps
from torch_nsight.errors import OutputWriteError
from torch_nsight.report.launch_replicas import replicated_count

DATA = Path(__file__).resolve().parents[1] / "data"
ZOO = DATA / "zoo_families"
#: One profiled kernel and the start-up, as the fast default measured them on lstm_lm's step
#: (docs/benchmarks.md, 2026-11-28: 1,433 kernels, 66.1 s whole).
SECONDS_PER_KERNEL, START_S = 0.035, 15.0


@pytest.mark.parametrize("argv, clash", [
    ([], "--steps"), (["--steps", "3:"], "need an end"), (["--steps", "3:4", "-k", "gemm"], "-k"),
    (["--steps", "3:4", "--timeline"], "--timeline"),
    (["--steps", "3:4", "--ncu-arg=--kernel-id=::x:1"], "--ncu-arg"),
])
def test_replication_refuses_what_would_shift_ncus_numbers(
        argv: list[str], clash: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--replicate-launches", *argv, "--", "python", "x.py"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--replicate-launches" in error[0] and clash in error[0], error


def test_the_hint_names_what_replication_would_save_where_it_pays() -> None:
    lstm = torch_nsight.load(ZOO / "lstm_lm.ncu-rep.xz", cache=False).kernels
    hint = replication_hint(lstm, seconds_per_kernel=SECONDS_PER_KERNEL, start_s=START_S)
    # 1,433 launches, 343 of them kept by the plan over the recorded step's own rows
    assert hint is not None and hint.startswith("hint: 1090 of the 1433 kernels"), hint
    assert "--replicate-launches would profile about 343" in hint and "about 38 s less" in hint
    # a transformer whose launches differ too much to pay back a start-up
    swin = torch_nsight.load(ZOO / "swin_t.ncu-rep.xz", cache=False).kernels
    assert replication_hint(swin, seconds_per_kernel=SECONDS_PER_KERNEL, start_s=START_S) is None


def test_the_hint_counts_the_blocks_the_option_would_profile_one_by_one() -> None:
    """Mixtral-style MoE (tests/data/zoo_families, every launch of the step): identical blocks
    profiled once left 347 kernels to profile; --replicate-launches turns that off, and its
    plan over all 1,284 launches keeps 993: no hint, however cheap a start-up."""
    moe = torch_nsight.load(ZOO / "mixtral_moe.ncu-rep.xz", cache=False).kernels
    assert replicated_count(moe) == (347, 993)
    assert replication_hint(moe, seconds_per_kernel=SECONDS_PER_KERNEL, start_s=0.01) is None


def test_no_hint_for_a_step_that_ran_compiled_graphs() -> None:
    """A compiled ViT's step (tests/data/compile): its repeated launches would pay at a
    roofline rate, but --replicate-launches refuses compiled graphs, so no hint."""
    vit = torch_nsight.load(DATA / "compile" / "vit_train_flops.ncu-rep.xz", cache=False).kernels
    assert replicated_count(vit)[0] - replicated_count(vit)[1] > 100
    assert replication_hint(vit, seconds_per_kernel=0.3, start_s=15.0) is None


def test_the_hint_is_shown_only_where_the_option_is_taken(
        capsys: pytest.CaptureFixture[str]) -> None:
    lstm = torch_nsight.load(ZOO / "lstm_lm.ncu-rep.xz", cache=False).kernels
    record = {"phases_s": {"start": START_S, "profiling": 1433 * SECONDS_PER_KERNEL},
              "kernels_profiled": 1433}
    options = dict(replicate_launches=False, metric_set="fast", ranks=None, timeline=False,
                   stalls=False, kernel_name=None, launch_skip=None, launch_count=None,
                   ncu_arg=[])
    for steps in (None, Steps(12, None)):  # refused: no step, steps without an end
        say_replication_hint(argparse.Namespace(**options, steps=steps), lstm, record)
        assert capsys.readouterr().err == ""
    say_replication_hint(argparse.Namespace(**options, steps=Steps(12, 13)), lstm, record)
    assert capsys.readouterr().err.startswith("hint: 1090 of the 1433 kernels")


def test_an_earlier_launch_list_goes_and_nothing_else(tmp_path: Path) -> None:
    report = tmp_path / "report.ncu-rep"
    folder = tmp_path / "launches"
    folder.mkdir()
    for name in ("plan.json", "timeline.json", "trace.json.gz", "rockets.csv"):
        (folder / name).write_text("x")
    forget_launches(report)
    assert sorted(p.name for p in folder.iterdir()) == ["rockets.csv"]
    with pytest.raises(OutputWriteError, match="rockets.csv"):  # before anything runs
        record_launches(["no-such-command"], report, steps=Steps(3, 4), timeout=1.0,
                        quiet=True, environ={})
    (folder / "rockets.csv").unlink()
    forget_launches(report)
    assert not folder.exists()
