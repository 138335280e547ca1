"""The numbers and the rule of a fix measured on pairs of steps (analyze/measured.py): steps
paired as the ABBA order gives them, the gain the median of the pairs' differences with the
median's 95% interval, the loss change averaged over pairs of both orders."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest
from scipy import stats

from torch_nsight.analyze.measured import (
    MIN_PAIRS,
    LossChange,
    StepPair,
    loss_change,
    measured_status,
    median_interval,
    paired_gain,
    step_pairs,
)
from torch_nsight.verify_exchange import fix_on_at


def steps(times: list[float], first: int = 10, losses: list[float] | None = None
          ) -> list[dict[str, Any]]:
    """Timed step records as the script writes them, the fix alternating ABBA."""
    return [{"index": first + i, "time_ns": t, "status": "ok", "fix_on": fix_on_at(first + i,
             first), "loss": None if losses is None else losses[i]}
            for i, t in enumerate(times)]


def test_adjacent_steps_pair_in_both_orders() -> None:
    random.seed(0)
    times = [random.uniform(30e6, 40e6) for _ in range(16)]
    pairs = step_pairs(steps(times))
    assert len(pairs) == 8
    for k, pair in enumerate(pairs):  # off first, then on first, then off first, ...
        off, on = (times[2 * k], times[2 * k + 1]) if k % 2 == 0 else (
            times[2 * k + 1], times[2 * k])
        assert (pair.off_ns, pair.on_ns) == (off, on)


def test_a_step_that_raised_or_a_gap_or_a_missing_flag_breaks_a_pair() -> None:
    records = steps([1.0] * 8)
    records[1]["status"] = "error"  # pair 0 lost
    del records[3]  # pair 1 lost: 12 has no neighbour with the other flag
    records[-1]["fix_on"] = None  # pair 3 lost
    assert len(step_pairs(records)) == 1
    assert step_pairs(steps([1.0] * 6)[:1]) == []


def test_the_gain_is_the_median_difference_with_its_interval() -> None:
    random.seed(1)
    pairs = [StepPair(random.gauss(40e6, 2e6), random.gauss(37e6, 2e6)) for _ in range(16)]
    gain = paired_gain(pairs)
    differences = sorted(p.off_ns - p.on_ns for p in pairs)
    assert gain.gain_ns == statistics.median(differences) and gain.pairs == 16
    assert gain.before_ns == statistics.median(p.off_ns for p in pairs)
    assert gain.after_ns == statistics.median(p.on_ns for p in pairs)
    assert gain.low_ns <= gain.gain_ns <= gain.high_ns
    assert gain.spread_ns == (gain.high_ns - gain.low_ns) / 2
    with pytest.raises(ValueError, match="at least one pair"):
        paired_gain([])


@pytest.mark.parametrize("n", [1, 2, 5, 6, 8, 9, 16, 17, 40])
def test_the_median_interval_is_the_narrowest_holding_95_percent(n: int) -> None:
    values = [float(v) for v in range(n)]
    low, high = median_interval(values)
    k = int(low) + 1  # the order statistics (k, n + 1 - k)
    assert high == n - k
    binom = stats.binom(n, 0.5)
    if k > 1:
        assert 1 - 2 * binom.cdf(k - 1 - 1) >= 0.95  # holds the median with >= 95%
    if k < n // 2:  # and one step narrower would not
        assert 1 - 2 * binom.cdf(k) < 0.95


def test_a_gain_inside_the_noise_is_said_to_be() -> None:
    pairs = [StepPair(10.0 + d, 10.0) for d in (-2.0, -1.0, 0.5, 1.0, 2.0, 3.0)]
    assert paired_gain(pairs).within_noise
    assert not paired_gain([StepPair(12.0 + d, 10.0) for d in (0.0, 0.1, 0.2) * 3]
                           ).within_noise


def test_a_loss_that_falls_with_training_does_not_change_with_the_fix() -> None:
    losses = [2.0 * 0.97 ** i for i in range(16)]  # training: 3% lower every step
    change = loss_change(step_pairs(steps([1.0] * 16, losses=losses)))
    assert change is not None and change.pairs == 8
    assert abs(change.change) < 0.02 * 0.03 and not change.significant  # the ABBA cancels
    assert measured_status(paired_gain([StepPair(2.0, 1.0)] * 8), change) == "measured"


def test_a_fix_that_doubles_the_loss_changed_it() -> None:
    losses = [2.0 * 0.97 ** i for i in range(16)]
    doubled = [loss * 2 if fix_on_at(10 + i, 10) else loss for i, loss in enumerate(losses)]
    change = loss_change(step_pairs(steps([1.0] * 16, losses=doubled)))
    assert change is not None and change.significant and change.low > 0.9
    gain = paired_gain([StepPair(2.0, 1.0)] * 8)
    assert measured_status(gain, change) == "loss_changed"
    assert measured_status(gain, change, tolerance=2.0) == "measured"


def test_a_change_inside_the_losss_own_noise_is_not_a_change() -> None:
    noisy = LossChange(0.03, -0.01, 0.07, 8)
    assert not noisy.significant
    assert measured_status(paired_gain([StepPair(2.0, 1.0)] * 8), noisy) == "measured"


def test_a_loss_made_nan_changed_it_and_no_loss_is_not_compared() -> None:
    pairs = [StepPair(1.0, 1.0, 2.0, 2.0), StepPair(1.0, 1.0, 2.0, math.nan)]
    change = loss_change(pairs)
    assert change is not None and change.change == math.inf and change.significant
    assert loss_change([StepPair(1.0, 1.0)]) is None


def test_too_few_pairs_do_not_count() -> None:
    assert measured_status(paired_gain([StepPair(2.0, 1.0)] * (MIN_PAIRS - 1)), None) == (
        "too_few_steps")
    assert measured_status(paired_gain([StepPair(2.0, 1.0)] * MIN_PAIRS), None) == "measured"
    assert measured_status(None, None) == "too_few_steps"
