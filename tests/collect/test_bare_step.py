"""The bare step ``--verify`` judges the GPU's idle time against: its runs' steps with the fix
off, a compile switch's runs left out where the others timed enough (with the compiled
callable switched off, a step ran slower there: docs/zoo.md)."""

from __future__ import annotations

import statistics

from torch_nsight.analyze.measured import MIN_PAIRS
from torch_nsight.collect.parent.bare import BareRun
from torch_nsight.collect.parent.measure import _bare_step_ns
from torch_nsight.verify_exchange import FixSpec, StepTimes


def run(spec: FixSpec, off_ms: list[float], on_ms: float, *, error: str | None = None
        ) -> BareRun:
    """A run whose pairs of steps took ``off_ms`` without the fix and ``on_ms`` with it."""
    steps = []
    for pair, off in enumerate(off_ms):
        steps += [{"index": 2 * pair, "time_ns": off * 1e6, "status": "ok", "fix_on": False},
                  {"index": 2 * pair + 1, "time_ns": on_ms * 1e6, "status": "ok",
                   "fix_on": True}]
    times = StepTimes("cuda_events", steps, [], [])
    return BareRun((spec,), None if error else times, 0, None, 1.0, error)


COMPILE, FUSED = FixSpec("compile", ""), FixSpec("fused_optimizer")


def test_a_compile_run_is_left_out_where_the_others_timed_enough() -> None:
    fused = [21.0, 22.0, 21.5, 22.5, 21.2, 23.0]
    runs = {COMPILE.describe(): [run(COMPILE, [26.0] * 6, 15.0)],
            FUSED.describe(): [run(FUSED, fused, 20.0)]}
    assert _bare_step_ns(runs, {COMPILE.describe()}) == statistics.median(fused) * 1e6
    # the compile run counts where it is all there is
    alone = {COMPILE.describe(): runs[COMPILE.describe()]}
    assert _bare_step_ns(alone, {COMPILE.describe()}) == 26.0e6


def test_failed_runs_and_too_few_steps_give_no_bare_step() -> None:
    failed = {FUSED.describe(): [run(FUSED, [20.0] * 8, 19.0, error="a step raised")]}
    assert _bare_step_ns(failed, set()) != _bare_step_ns(failed, set())  # NaN
    few = {FUSED.describe(): [run(FUSED, [20.0] * (MIN_PAIRS - 1), 19.0)]}
    assert _bare_step_ns(few, set()) != _bare_step_ns(few, set())
