"""The sweep's first phase: its arguments checked and resolved into one typed SweepPlan."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from torch_nsight.collect.parent.plan import SweepPlan, plan_sweep

DEFAULTS = dict(make_inputs=None, backward=False, dtype=None, warmup=2, runs=1,
                metric_set=None, ops=False, replicate=True, derive=None, ncu=None, ncu_args=(),
                timeout=600.0, devices=None, profiler=None, quiet=True, record_calls=True,
                executor=None)


def test_a_dry_run_plan_holds_what_the_later_phases_read(tmp_path: Path) -> None:
    plan = plan_sweep({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)}, [(2, 4), (8, 4)],
                      output_dir=tmp_path / "out", **DEFAULTS)
    assert isinstance(plan, SweepPlan)
    assert plan.shape_labels == ["2x4", "8x4"] and list(plan.job.variants) == ["a", "b"]
    assert plan.metric_set.name == "fast" and plan.ncu is None and plan.metrics is None
    assert plan.keep and plan.work.is_dir() and plan.visible == [None]
    assert plan.options["metric_set"] == "fast" and plan.options["profiler"] is None
    without_calls = plan_sweep(nn.Linear(4, 4), [(2, 4)], output_dir=tmp_path / "lean",
                               **{**DEFAULTS, "record_calls": False})
    assert without_calls.metric_set.name == "lean"


@pytest.mark.parametrize(("change", "named"), [({"warmup": -1}, "warmup"),
                                               ({"timeout": 0}, "timeout"),
                                               ({"quiet": "yes"}, "quiet"),
                                               ({"devices": []}, "devices")])
def test_a_bad_argument_is_named_before_anything_is_written(tmp_path: Path, change: dict,
                                                            named: str) -> None:
    with pytest.raises((TypeError, ValueError), match=named):
        plan_sweep(nn.Linear(4, 4), [(2, 4)], output_dir=tmp_path / "out",
                   **{**DEFAULTS, **change})
    assert not (tmp_path / "out").exists()
