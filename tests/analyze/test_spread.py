"""The spread of repeated runs, on real profiles recorded with runs > 1 (tests/data/runs/).

Expected values are recomputed here from the raw kernel rows with plain pandas and numpy
(per-run sums, ``np.std(ddof=1)``, Student's t), never typed in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import torch_nsight
from torch_nsight.analyze import timeline_summary
from torch_nsight.analyze.regress import compare_profiles
from torch_nsight.analyze.spread import STABLE_CI_PCT, run_times, runs_and_ranks, spread

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


@pytest.fixture(scope="module")
def runs10() -> torch_nsight.Profile:
    return torch_nsight.load(RUNS / "gpt2_runs10")


@pytest.fixture(scope="module")
def three() -> dict[str, torch_nsight.Profile]:
    return {name: torch_nsight.load(RUNS / f"gpt2_runs_{name}")
            for name in ("a", "b", "unpadded")}


def expected(per_run: np.ndarray) -> tuple[float, float, float]:
    """mean, sample standard deviation, 95% half-width, from first principles."""
    n = len(per_run)
    std = float(np.std(per_run, ddof=1))
    return float(np.mean(per_run)), std, float(stats.t.ppf(0.975, n - 1) * std / np.sqrt(n))


def per_run_sums(rows: pd.DataFrame, runs: list[int]) -> np.ndarray:
    sums = rows.groupby("run")["duration_ns"].sum()
    return np.array([float(sums.get(r, 0.0)) for r in runs])


def test_the_recorded_profiles_hold_their_runs(runs10, three) -> None:
    assert sorted(runs10.kernels["run"].unique()) == list(range(10))
    for profile in three.values():
        assert sorted(profile.kernels["run"].unique()) == [0, 1, 2]


def test_kernel_sites_carry_the_spread_of_their_runs(runs10) -> None:
    kernels = runs10.kernels
    runs = sorted(kernels["run"].unique())
    sites = runs10.hotspot_table(n=1000, order="time", fold=False)
    assert (sites["runs"] == 10).all()
    for _, site in sites.iterrows():
        mine = kernels[(kernels["module_path"] == site["module_path"])
                       & (kernels["direction"].fillna("") == (site["direction"] or ""))
                       & (kernels["kernel"] == site["kernel"])
                       & (kernels["op"].isna() if site["op"] is None
                          else kernels["op"] == site["op"])]
        mean, std, half = expected(per_run_sums(mine, runs))
        assert site["duration_ns"] == pytest.approx(mean)
        assert site["std_ns"] == pytest.approx(std)
        assert site["ci95_ns"] == pytest.approx(half)
        assert site["stable"] == (100 * half / mean <= STABLE_CI_PCT)


def test_the_module_tree_and_shape_carry_the_spread_of_the_whole_run(runs10) -> None:
    kernels = runs10.kernels
    runs = sorted(kernels["run"].unique())
    mean, std, half = expected(per_run_sums(kernels, runs))
    root = runs10.module_table().iloc[0]
    assert root["depth"] == 0 and root["inclusive_ns"] == pytest.approx(mean)
    assert (root["std_ns"], root["ci95_ns"]) == (pytest.approx(std), pytest.approx(half))
    shape = runs10.by_shape().iloc[0]
    assert (shape["runs"], shape["std_ns"]) == (10, pytest.approx(std))
    attn = runs10.module_table()
    attn = attn[attn["module_path"] == "GPT2LMHeadModel/transformer/transformer.h.5/"
                "transformer.h.5.attn"].iloc[0]
    inside = kernels[kernels["module_path"].str.startswith(
        "GPT2LMHeadModel/transformer/transformer.h.5/transformer.h.5.attn")]
    assert attn["std_ns"] == pytest.approx(expected(per_run_sums(inside, runs))[1])


def test_replicated_blocks_carry_the_spread_of_the_block_they_copy(runs10) -> None:
    modules = runs10.module_table().set_index("module")
    measured, copied = modules.loc["transformer.h.0"], modules.loc["transformer.h.7"]
    assert runs10.kernels["replicated_from"].notna().any()
    assert copied["std_ns"] == pytest.approx(measured["std_ns"])
    assert copied["inclusive_ns"] == pytest.approx(measured["inclusive_ns"])


def test_a_folded_row_holds_the_spread_of_its_blocks_summed_run_by_run(runs10) -> None:
    kernels = runs10.kernels
    runs = sorted(kernels["run"].unique())
    folded = runs10.hotspot_table(n=1000, order="time")
    act = folded[folded["module"] == "transformer.h.{0-11}.mlp.act"].iloc[0]
    assert act["blocks"] == 12
    mine = kernels[kernels["module"].str.fullmatch(r"transformer\.h\.\d+\.mlp\.act")
                   & (kernels["kernel"] == act["kernel"])]
    mean, std, half = expected(per_run_sums(mine, runs))
    assert act["duration_ns"] == pytest.approx(mean)
    assert (act["std_ns"], act["ci95_ns"]) == (pytest.approx(std), pytest.approx(half))


def test_a_run_that_lacks_a_row_counts_zero(runs10) -> None:
    kernels = runs10.kernels
    dropped = kernels[~((kernels["run"] == 3) & (kernels["module"] == "lm_head"))]
    times = run_times(dropped, ["module"]).loc["lm_head"]
    assert len(times) == 10 and times[3] == 0.0 and (np.delete(times, 3) > 0).all()


def test_one_run_has_no_spread(three) -> None:
    one = three["a"].kernels[three["a"].kernels["run"] == 0]
    table = torch_nsight.analyze.module_tree(one)
    assert (table["runs"] == 1).all()
    assert table["std_ns"].isna().all() and table["ci95_ns"].isna().all()
    assert table["stable"].isna().all()
    assert spread(pd.Series([np.array([5.0])]))["stable"].iloc[0] is None


def test_two_profiles_of_one_model_flag_no_module_at_2_percent(three) -> None:
    rows = compare_profiles(three["a"].kernels, three["b"].kernels, threshold=2.0)
    assert rows.attrs["noise_known"]
    assert not rows["verdict"].isin(["regressed", "improved"]).any()
    kernels = compare_profiles(three["a"].kernels, three["b"].kernels, threshold=2.0,
                               by="kernel")
    assert not kernels["verdict"].isin(["regressed", "improved"]).any()


def test_the_unpadded_vocabulary_flags_lm_head_and_only_its_ancestors(three) -> None:
    rows = compare_profiles(three["a"].kernels, three["unpadded"].kernels, threshold=2.0)
    flagged = rows[rows["verdict"].isin(["regressed", "improved"])]
    assert set(flagged["module_path"]) == {"GPT2LMHeadModel", "GPT2LMHeadModel/lm_head"}
    assert (flagged["verdict"] == "regressed").all()
    lm_head = flagged[flagged["module_path"] == "GPT2LMHeadModel/lm_head"].iloc[0]
    assert lm_head["change_pct"] > 100 and lm_head["p_value"] < 0.05


def test_profile_steps_are_runs(three) -> None:
    profile = torch_nsight.load(RUNS / "profile_runs.ncu-rep.xz")
    assert sorted(profile.kernels["run"].unique()) == [3, 4, 5]
    shape = profile.by_shape().iloc[0]
    mean, std, half = expected(per_run_sums(profile.kernels, [3, 4, 5]))
    assert (shape["runs"], shape["duration_ns"]) == (3, pytest.approx(mean))
    assert (shape["std_ns"], shape["ci95_ns"]) == (pytest.approx(std), pytest.approx(half))


def test_the_timeline_step_time_carries_its_spread() -> None:
    profile = torch_nsight.load(RUNS / "timeline_runs")
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    walls = (steps["end_ns"] - steps["start_ns"]).to_numpy(dtype=float)
    assert len(walls) == 20
    row = timeline_summary(profile.kernels, profile.timeline).iloc[0]
    _, std, half = expected(walls)
    assert (row["wall_std_ns"], row["wall_ci95_ns"]) == (pytest.approx(std),
                                                         pytest.approx(half))
    assert row["stable"] == (100 * half / np.mean(walls) <= STABLE_CI_PCT)


def test_text_tables_show_the_interval_only_where_there_are_runs(runs10, three) -> None:
    from torch_nsight.cli.compare import render_rows, summary_line
    from torch_nsight.render import render_table

    with_runs = render_table(runs10, "modules", depth=1)
    root = runs10.module_table(depth=1).iloc[0]
    assert f"±{root['ci95_ns'] / 1e3:,.2f}" in with_runs
    one = torch_nsight.Profile(three["a"].kernels[three["a"].kernels["run"] == 0],
                               three["a"].meta)
    assert "±" not in render_table(one, "hotspots")
    rows = compare_profiles(three["a"].kernels, three["unpadded"].kernels, threshold=2.0)
    markdown = render_rows(rows, "module", "markdown")
    lm_head = rows[rows["module_path"] == "GPT2LMHeadModel/lm_head"].iloc[0]
    assert f"±{lm_head['current_ci95_ns'] / 1e3:,.2f} (3 runs)" in markdown
    assert "noise is unknown" not in summary_line(rows, 2.0, "module")
    single = compare_profiles(one.kernels, three["unpadded"].kernels[
        three["unpadded"].kernels["run"] == 0], threshold=2.0)
    assert "noise is unknown" in summary_line(single, 2.0, "module")


def test_the_scaling_plot_carries_each_module_interval(runs10) -> None:
    from torch_nsight.render.scaling import scaling_frame

    frame = scaling_frame(runs10).set_index("module")
    kernels = runs10.kernels
    runs = sorted(kernels["run"].unique())
    inside = kernels[kernels["module_path"].str.startswith("GPT2LMHeadModel/transformer")]
    assert frame.loc["transformer", "ci95_ns"] == pytest.approx(
        expected(per_run_sums(inside, runs))[2])


def test_a_kernel_swapped_for_a_slower_one_is_a_regression_by_kernel(three) -> None:
    rows = compare_profiles(three["a"].kernels, three["unpadded"].kernels, threshold=2.0,
                            by="kernel")
    flagged = rows[rows["verdict"] == "regressed"]
    assert flagged["module_path"].tolist() == ["GPT2LMHeadModel/lm_head"]
    assert "align1" in flagged["kernel"].iloc[0]  # the kernel cuBLAS fell back to
    assert flagged["change_pct"].iloc[0] > 100 and flagged["p_value"].iloc[0] < 0.05
    assert any("ran other kernels" in note for note in rows.attrs["notes"])
    # the kernel it replaced is counted once: in the regressed row's baseline, not again
    replaced = rows[rows["verdict"] == "replaced"]
    assert replaced["module_path"].tolist() == ["GPT2LMHeadModel/lm_head"]
    assert replaced["baseline_ns"].iloc[0] == pytest.approx(flagged["baseline_ns"].iloc[0])
    assert not (rows["verdict"] == "only in baseline").any()
    same = compare_profiles(three["a"].kernels, three["b"].kernels, threshold=2.0, by="kernel")
    assert not same["verdict"].isin(["regressed", "improved"]).any()


def test_ranks_are_averaged_without_a_spread_over_them() -> None:
    """Two DDP ranks: rank 0's all-reduce waits ~90 ms for rank 1, whose own lasts 0.2 ms.
    That is their role, not noise: the row is their mean, with no interval over them."""
    ddp = torch_nsight.load(Path(__file__).resolve().parents[1] / "data" / "ddp_nccl")
    kernels = ddp.kernels
    assert runs_and_ranks(kernels) == (1, 2)
    top = ddp.hotspot_table(n=2, order="time", fold=False)
    for _, row in top.iterrows():
        mine = kernels[(kernels["module"] == row["module"]) & (kernels["kernel"] == row["kernel"])
                       & (kernels["direction"] == row["direction"])]
        per_rank = mine.groupby("rank")["duration_ns"].sum()
        assert len(per_rank) == 2 and per_rank.max() > 100 * per_rank.min()
        assert row["duration_ns"] == pytest.approx(per_rank.mean())
        assert row["runs"] == 1 and np.isnan(row["ci95_ns"]) and row["stable"] is None
    assert "±" not in ddp.describe()


def test_the_t_table_is_scipys_to_the_last_digit() -> None:
    """t_quantile reads a table for a few runs (no scipy import): each entry, and any
    number of degrees of freedom past it, is scipy's own value."""
    from scipy import special

    from torch_nsight.analyze.spread import T_975, t_quantile

    dof = np.arange(1, len(T_975) + 8)
    expected = special.stdtrit(dof, 0.975)
    assert t_quantile(dof).tolist() == expected.tolist()
    assert t_quantile(dof[: len(T_975)]).tolist() == list(T_975)
    assert t_quantile(np.array([2.0, 5.0])).tolist() == special.stdtrit([2.0, 5.0], 0.975).tolist()
