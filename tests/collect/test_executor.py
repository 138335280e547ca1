"""Sweeps through an executor (the dry-run child, on the CPU): one job per shape, results
merged as the local run merges them, a failing job kept apart from the others."""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path
from typing import Any

import pytest

import torch_nsight

from .models import Stack, make_inputs_failing_on_4

SHAPES = [(2, 16), (4, 16), (8, 16)]


def statuses(profile) -> dict[str, str]:
    return {r["shape"]: r["status"] for r in profile.results}


@pytest.mark.slow
def test_a_process_pool_runs_one_job_per_shape_like_the_local_run(tmp_path: Path) -> None:
    # one pool run for two checks: the shapes that work merge as the local run's, and the
    # shape that fails (4x16) is kept apart from them
    local = torch_nsight.sweep(Stack(2), SHAPES, profiler=None, quiet=True,
                               make_inputs=make_inputs_failing_on_4,
                               output_dir=tmp_path / "local")
    with cf.ProcessPoolExecutor(2) as pool:
        remote = torch_nsight.sweep(Stack(2), SHAPES, profiler=None, quiet=True,
                                    make_inputs=make_inputs_failing_on_4,
                                    output_dir=tmp_path / "pool", executor=pool)
    assert statuses(remote) == statuses(local) == {"2x16": "ok", "4x16": "failed",
                                                   "8x16": "ok"}
    assert [r.get("outputs") for r in remote.results] == [r.get("outputs") for r in local.results]
    assert remote.results[0]["outputs"] == "(2, 16) float32"
    results = sorted(p.name for p in (tmp_path / "pool").glob("*.result.json"))
    assert results == [f"sweep-shape{i}.result.json" for i in range(3)]
    assert not (tmp_path / "pool" / ".jobs").exists()  # job files removed


class LosesSecondJob:
    """A real thread pool whose second job's worker is lost (its future raises)."""

    def __init__(self) -> None:
        self.pool = cf.ThreadPoolExecutor(2)
        self.count = 0

    def submit(self, fn: Any, *args: Any) -> cf.Future:
        self.count += 1
        if self.count == 2:
            lost: cf.Future = cf.Future()
            lost.set_exception(ConnectionError("worker lost"))
            return lost
        return self.pool.submit(fn, *args)


@pytest.mark.slow
def test_a_lost_worker_is_one_failed_job(tmp_path: Path) -> None:
    executor = LosesSecondJob()
    profile = torch_nsight.sweep(Stack(2), SHAPES, profiler=None, quiet=True,
                                 output_dir=tmp_path / "out", executor=executor)
    executor.pool.shutdown()
    found = statuses(profile)
    assert found["2x16"] == "ok" and found["8x16"] == "ok"
    assert found["4x16"] != "ok"
    problems = " ".join(str(p) for p in profile.meta.sweeps[0].problems)
    assert "worker lost" in problems or any("worker lost" in str(r.get("error"))
                                            for r in profile.results)


@pytest.mark.slow
def test_dask_distributed(tmp_path: Path) -> None:
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        profile = torch_nsight.sweep(Stack(2), SHAPES[:2], profiler=None, quiet=True,
                                     output_dir=tmp_path / "out",
                                     executor=client.get_executor())
    assert statuses(profile) == {"2x16": "ok", "4x16": "ok"}


def test_an_object_without_submit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="submit"):
        torch_nsight.sweep(Stack(2), SHAPES[:1], profiler=None, quiet=True,
                           output_dir=tmp_path / "out", executor=object())
