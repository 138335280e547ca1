"""The kernel table grouped by kernel name, by shape and by rank, on recorded reports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from tests.recorded import load_recorded
from torch_nsight.analyze import UNATTRIBUTED, by_kernel, by_rank, by_shape, has_ranks
from torch_nsight.profile import Profile

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def sweep() -> Profile:
    """The recorded Llama block sweep: three shapes, forward only, one run each."""
    return load_recorded(DATA / "llama_block_sweep.ncu-rep.xz")


def test_shapes_in_the_order_they_ran_with_their_totals(sweep: Profile) -> None:
    table = by_shape(sweep.kernels)
    kernels = sweep.kernels
    assert list(table["shape"]) == list(dict.fromkeys(kernels["shape"]))
    for _, row in table.iterrows():
        mine = kernels[kernels["shape"] == row["shape"]]
        assert row["launches"] == len(mine)
        assert row["duration_ns"] == pytest.approx(mine["duration_ns"].sum())
        inside = mine.loc[mine["module"] != UNATTRIBUTED, "duration_ns"].sum()
        assert row["coverage_pct"] == pytest.approx(100 * inside / mine["duration_ns"].sum())
        shares = [row[f"{b}_pct"] for b in ("memory", "compute", "latency")]
        classified = mine.loc[mine["bound"].notna(), "duration_ns"].sum()
        assert sum(shares) == pytest.approx(100 * classified / mine["duration_ns"].sum())
        top = mine.groupby("module")["duration_ns"].sum()
        assert row["top_module"] == top.idxmax()
        assert row["top_module_pct"] == pytest.approx(100 * top.max() / top.sum())


def test_a_kernel_name_gathers_every_module_that_launches_it(sweep: Profile) -> None:
    table = by_kernel(sweep.kernels)
    kernels = sweep.kernels
    assert len(table) == len(kernels.groupby(["shape", "kernel"]))
    for _, rows in table.groupby("shape", sort=False):
        assert list(rows["duration_ns"]) == sorted(rows["duration_ns"], reverse=True)
        assert rows["pct_of_total"].sum() == pytest.approx(100.0)
    busiest = table.iloc[0]
    mine = kernels[(kernels["shape"] == busiest["shape"])
                   & (kernels["kernel"] == busiest["kernel"])]
    assert busiest["launches"] == len(mine)
    assert busiest["modules"] == mine["module"].nunique()
    assert busiest["mean_ns"] == pytest.approx(mine["duration_ns"].mean())


def test_times_are_per_run(make_kernel: Callable[..., dict]) -> None:
    """Two runs of one shape: every time and count is the mean per run."""
    rows = [make_kernel("Block/mlp", 10.0 * (run + 1), kernel="gemm", run=run)
            for run in range(2)]
    table = by_kernel(pd.DataFrame(rows))
    assert table.loc[0, "launches"] == 1.0
    assert table.loc[0, "duration_ns"] == pytest.approx(15.0)
    assert by_shape(pd.DataFrame(rows)).loc[0, "duration_ns"] == pytest.approx(15.0)


def test_ranks_are_refused_without_a_rank(sweep: Profile) -> None:
    assert not has_ranks(sweep.kernels)
    with pytest.raises(ValueError, match="report-rank<R>"):
        by_rank(sweep.kernels)
