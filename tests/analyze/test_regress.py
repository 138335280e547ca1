"""compare_profiles on real recorded pairs: expectations derived from the loaded tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import torch_nsight
from torch_nsight.analyze import compare_profiles, kernel_hotspots, module_tree
from torch_nsight.analyze.regress import REGRESS_COLUMNS, VERDICTS

DATA = Path(__file__).resolve().parents[1] / "data"
KEYS = ["variant", "shape", "direction", "module_path"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def load(name: str, cache: Path, **kwargs: object) -> torch_nsight.Profile:
    return torch_nsight.load(DATA / name, cache_dir=cache, **kwargs)


@pytest.fixture(scope="module")
def s128(cache: Path) -> pd.DataFrame:
    return load("hand_s128.ncu-rep.xz", cache).kernels


@pytest.fixture(scope="module")
def s512(cache: Path) -> pd.DataFrame:
    return load("hand_s512.ncu-rep.xz", cache).kernels


def keyed(tree: pd.DataFrame, value: str = "inclusive_ns") -> dict[tuple, float]:
    keys = zip(*([None if pd.isna(v) else v for v in tree[k]] for k in KEYS), strict=True)
    return dict(zip(keys, tree[value], strict=True))


def test_two_shapes_of_one_block_regress(s128: pd.DataFrame, s512: pd.DataFrame) -> None:
    rows = compare_profiles(s128, s512, threshold=5.0)
    assert tuple(rows.columns) == REGRESS_COLUMNS
    before, after = keyed(module_tree(s128)), keyed(module_tree(s512))
    assert set(before) == set(after)
    assert len(rows) == len(before)
    for _, row in rows.iterrows():
        key = tuple(row[k] for k in KEYS)
        expected = 100.0 * (after[key] - before[key]) / before[key]
        assert row["baseline_ns"] == before[key] and row["current_ns"] == after[key]
        assert row["change_pct"] == pytest.approx(expected)
        want = ("regressed" if expected > 5 else "improved" if expected < -5
                else "unchanged")
        assert row["verdict"] == want, key
    # Every module of the model (forward and backward) got slower at seq 512.
    modules = rows[rows["module_path"] != "(unattributed)"]
    assert (modules["verdict"] == "regressed").all()
    assert rows.attrs["notes"] == []
    assert rows.attrs["noise_known"] is False
    # Bound and headroom of both sides come from each side's own roll-up.
    root = rows[(rows["module_path"] == "LlamaBlock") & (rows["direction"] == "fwd")].iloc[0]
    assert root["current_headroom_ns"] == pytest.approx(
        keyed(module_tree(s512), "headroom_ns")[(None, None, "fwd", "LlamaBlock")])
    assert root["baseline_bound"] in ("latency", "memory", "compute")


def test_threshold_above_every_change_calls_nothing(s128: pd.DataFrame,
                                                    s512: pd.DataFrame) -> None:
    rows = compare_profiles(s128, s512)
    biggest = rows["change_pct"].abs().max()
    calm = compare_profiles(s128, s512, threshold=float(np.ceil(biggest)))
    assert set(calm["verdict"]) == {"unchanged"}


def test_a_report_against_itself_changes_nothing(s128: pd.DataFrame) -> None:
    for by in ("module", "kernel"):
        rows = compare_profiles(s128, s128, by=by, threshold=0.0)
        assert (rows["change_pct"] == 0).all() and (rows["change_ns"] == 0).all()
        assert set(rows["verdict"]) == {"unchanged"}
        assert (rows["baseline_runs"] == 1).all() and (rows["current_runs"] == 1).all()


def test_a_report_against_a_copy_of_itself(tmp_path: Path, cache: Path,
                                           s128: pd.DataFrame) -> None:
    copy = tmp_path / "copy.ncu-rep.xz"
    shutil.copy(DATA / "hand_s128.ncu-rep.xz", copy)
    other = torch_nsight.load(copy, cache=False).kernels
    rows = compare_profiles(s128, other, by="kernel")
    assert len(rows) == len(kernel_hotspots(s128))
    assert set(rows["verdict"]) == {"unchanged"}


def test_a_sweep_directory_against_itself(cache: Path) -> None:
    kernels = load("sweep_stack", cache).kernels
    rows = compare_profiles(kernels, kernels, depth=1)
    assert set(rows["shape"]) == {"2x128x256", "2x512x256"}
    assert len(rows) == len(module_tree(kernels, 1))
    assert set(rows["verdict"]) == {"unchanged"}


def test_modules_on_one_side_are_listed(cache: Path, s128: pd.DataFrame) -> None:
    stack = load("sweep_stack", cache).kernels
    rows = compare_profiles(stack, s128)
    only_base = rows[rows["verdict"] == "only in baseline"]
    only_cur = rows[rows["verdict"] == "only in current"]
    assert len(only_base) == len(module_tree(stack))
    assert len(only_cur) == len(module_tree(s128))
    assert only_base["current_ns"].isna().all() and only_cur["baseline_ns"].isna().all()
    # The baseline's rows first, in call-tree order; then the current's.
    assert list(rows["verdict"]) == (["only in baseline"] * len(only_base)
                                     + ["only in current"] * len(only_cur))
    assert set(only_cur["module_path"]) == set(module_tree(s128)["module_path"])


def test_one_label_per_side_is_compared_across_and_said(cache: Path) -> None:
    small = torch_nsight.load(DATA / "hand_s128.ncu-rep.xz", labels=["s128"],
                              cache_dir=cache).kernels
    large = torch_nsight.load(DATA / "hand_s512.ncu-rep.xz", labels=["s512"],
                              cache_dir=cache).kernels
    rows = compare_profiles(small, large)
    assert set(rows["shape"]) == {"s128"}
    assert not rows["verdict"].str.startswith("only").any()
    assert len(rows.attrs["notes"]) == 1
    assert "s128" in rows.attrs["notes"][0] and "s512" in rows.attrs["notes"][0]


def test_different_gpus_are_noted(s128: pd.DataFrame) -> None:
    other = s128.assign(gpu="NVIDIA A100")
    notes = compare_profiles(s128, other).attrs["notes"]
    assert any("different GPUs" in n and "A100" in n for n in notes)


# --- noise: several runs per side, built from the recorded sweep's real rows ----------------

@pytest.fixture(scope="module")
def sweep_runs(cache: Path) -> pd.DataFrame:
    """The recorded sweep loaded twice, labelled r0 and r1: two runs of each shape."""
    path = DATA / "llama_block_sweep.ncu-rep.xz"
    kernels = torch_nsight.load([path, path], labels=["r0", "r1"], cache_dir=cache).kernels
    assert set(kernels["variant"]) == {"r0", "r1"}
    return kernels


def as_runs(kernels: pd.DataFrame, picks: list[tuple[str, str]]) -> pd.DataFrame:
    """One label ``S``, one run per (copy, shape) pick: the real rows of that shape."""
    parts = []
    for run, (variant, shape) in enumerate(picks):
        rows = kernels[(kernels["variant"] == variant) & (kernels["shape"] == shape)]
        parts.append(rows.assign(variant=None, shape="S", run=run))
    return pd.concat(parts, ignore_index=True)


def per_shape(kernels: pd.DataFrame, shape: str) -> dict[tuple, float]:
    rows = kernels[(kernels["variant"] == "r0") & (kernels["shape"] == shape)]
    return {k[2:]: v for k, v in keyed(module_tree(rows)).items()}


def welch(before: list[float], after: list[float]) -> float:
    """Welch's two-sided p-value written out with numpy (the t statistic and the
    Welch-Satterthwaite degrees of freedom), scipy only for the t distribution's tail."""
    from scipy import stats

    b, a = np.asarray(before), np.asarray(after)
    vb, va = b.var(ddof=1) / len(b), a.var(ddof=1) / len(a)
    t = (a.mean() - b.mean()) / np.sqrt(vb + va)
    dof = (vb + va) ** 2 / (vb ** 2 / (len(b) - 1) + va ** 2 / (len(a) - 1))
    return float(2 * stats.t.sf(abs(t), dof))


def test_overlapping_runs_are_within_noise(sweep_runs: pd.DataFrame) -> None:
    small, mid, large = "1x256x1024", "1x1024x1024", "1x4096x1024"
    baseline = as_runs(sweep_runs, [("r0", small), ("r1", mid)])
    current = as_runs(sweep_runs, [("r0", mid), ("r1", large)])
    rows = compare_profiles(baseline, current, threshold=5.0)
    t_small, t_mid, t_large = (per_shape(sweep_runs, s) for s in (small, mid, large))
    assert (rows["baseline_runs"] == 2).all() and (rows["current_runs"] == 2).all()
    for _, row in rows.iterrows():
        key = (row["direction"], row["module_path"])
        before, after = [t_small[key], t_mid[key]], [t_mid[key], t_large[key]]
        assert row["baseline_ns"] == pytest.approx(np.mean(before))
        assert row["current_ns"] == pytest.approx(np.mean(after))
        assert row["baseline_std_ns"] == pytest.approx(np.std(before, ddof=1))
        # two runs: t(0.975, 1) = 12.706 times the standard error
        assert row["baseline_ci95_ns"] == pytest.approx(
            12.7062047 * np.std(before, ddof=1) / np.sqrt(2))
        assert row["p_value"] == pytest.approx(welch(before, after))
        change = row["change_pct"]
        want = ("unchanged" if abs(change) <= 5 else "within noise" if row["p_value"] >= 0.05
                else "regressed" if change > 0 else "improved")
        assert row["verdict"] == want, key
    # Both sides share the middle shape's run: two runs that far apart are all noise.
    assert "regressed" not in set(rows["verdict"])
    assert "within noise" in set(rows["verdict"])


def test_runs_apart_are_called(sweep_runs: pd.DataFrame) -> None:
    small, large = "1x256x1024", "1x4096x1024"
    baseline = as_runs(sweep_runs, [("r0", small), ("r1", small)])
    current = as_runs(sweep_runs, [("r0", large), ("r1", large)])
    rows = compare_profiles(baseline, current, threshold=5.0)
    # identical runs on each side: no noise, every change past the threshold is called
    assert (rows["baseline_std_ns"] == 0).all() and (rows["current_std_ns"] == 0).all()
    for _, row in rows.iterrows():
        if abs(row["change_pct"]) > 5:
            assert row["verdict"] == ("regressed" if row["change_pct"] > 0 else "improved")
    assert "regressed" in set(rows["verdict"])


def test_one_run_against_several_uses_the_prediction_interval(
        sweep_runs: pd.DataFrame) -> None:
    from scipy import stats

    small, mid, large = "1x256x1024", "1x1024x1024", "1x4096x1024"
    baseline = as_runs(sweep_runs, [("r0", small), ("r1", mid)])
    current = as_runs(sweep_runs, [("r0", large)])
    rows = compare_profiles(baseline, current, threshold=5.0)
    t_small, t_mid, t_large = (per_shape(sweep_runs, s) for s in (small, mid, large))
    assert (rows["current_runs"] == 1).all() and rows["current_std_ns"].isna().all()
    for _, row in rows.iterrows():
        key = (row["direction"], row["module_path"])
        runs = np.array([t_small[key], t_mid[key]])
        t = abs(t_large[key] - runs.mean()) / (runs.std(ddof=1) * np.sqrt(1 + 1 / 2))
        assert row["p_value"] == pytest.approx(2 * stats.t.sf(t, 1))


def test_single_runs_say_the_noise_is_unknown(s128: pd.DataFrame, s512: pd.DataFrame) -> None:
    rows = compare_profiles(s128, s512)
    assert rows["p_value"].isna().all()
    assert rows.attrs["noise_known"] is False
    assert "regressed" in set(rows["verdict"])


def test_a_run_without_a_module_counts_as_zero(s128: pd.DataFrame) -> None:
    first = s128.assign(run=0)
    second = s128[s128["module_path"] != "LlamaBlock/mlp/mlp.down_proj"].assign(run=1)
    rows = compare_profiles(pd.concat([first, second], ignore_index=True), s128)
    row = rows[(rows["module_path"] == "LlamaBlock/mlp/mlp.down_proj")
               & (rows["direction"] == "fwd")].iloc[0]
    full = keyed(module_tree(s128))[(None, None, "fwd", "LlamaBlock/mlp/mlp.down_proj")]
    assert row["baseline_ns"] == pytest.approx(full / 2)
    assert row["baseline_std_ns"] == pytest.approx(np.std([0.0, full], ddof=1))
    assert row["baseline_runs"] == 2


@pytest.mark.parametrize("kwargs", [{"by": "op"}, {"threshold": -1.0},
                                    {"threshold": float("nan")}, {"depth": -1},
                                    {"threshold": True}, {"alpha": 0}, {"alpha": 1.5}])
def test_refused_arguments(s128: pd.DataFrame, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        compare_profiles(s128, s128, **kwargs)


def test_tables_only(s128: pd.DataFrame) -> None:
    with pytest.raises(TypeError, match="current"):
        compare_profiles(s128, "profile.ncu-rep")  # type: ignore[arg-type]


def test_verdicts_are_declared(s128: pd.DataFrame, s512: pd.DataFrame) -> None:
    rows = compare_profiles(s128, s512, by="kernel")
    assert set(rows["verdict"]) <= set(VERDICTS)
    # Kernels that cuBLAS swapped for another tile size: the module compared as a whole on
    # its new kernels' rows, the old ones replaced (whatever the verdict), none one-sided
    assert "replaced" in set(rows["verdict"])
    replaced = rows[rows["verdict"] == "replaced"]
    swapped = rows[rows["module_path"].isin(replaced["module_path"])
                   & (rows["verdict"] != "replaced")]
    assert len(swapped) and swapped["baseline_ns"].notna().all()
    assert not swapped["verdict"].isin(["only in baseline", "only in current"]).any()
