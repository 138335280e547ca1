"""A fix measured on the user's own steps (``torch-nsight profile --verify``): the numbers
that two bare runs' step times and losses give, and the rule that says whether they count.

Numbers: :func:`step_gain` (median step time before - after, with the interquartile spread
of each side) and :func:`loss_change` (the largest relative change of a step's loss). Rule:
:func:`measured_status`. Words belong to the command that prints them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["MIN_STEPS", "LOSS_TOLERANCE", "StepGain", "loss_change", "measured_status",
           "step_gain"]

#: Fewer timed steps than this on either side and a gain is not computed.
MIN_STEPS = 5
#: The largest relative change of a step's loss a fix may cause and still count.
LOSS_TOLERANCE = 0.02


@dataclass(frozen=True)
class StepGain:
    """The gain of a fix from step times (ns).

    Attributes:
        before_ns, after_ns: the median step time without and with the fix.
        gain_ns: ``before_ns - after_ns`` (negative: the fix made the step slower).
        low_ns, high_ns: the gain's range from the quartiles (Q1 before - Q3 after, Q3
            before - Q1 after): a gain whose range holds 0 is within the noise.
        steps: the timed steps on each side (before, after).
    """

    before_ns: float
    after_ns: float
    gain_ns: float
    low_ns: float
    high_ns: float
    steps: tuple[int, int]

    @property
    def spread_ns(self) -> float:
        """Half the width of the gain's range."""
        return (self.high_ns - self.low_ns) / 2

    @property
    def within_noise(self) -> bool:
        """Whether the gain's range holds 0."""
        return self.low_ns <= 0 <= self.high_ns


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def step_gain(before_ns: Sequence[float], after_ns: Sequence[float]) -> StepGain:
    """The gain from the step times of a run without and a run with the fix.

    Raises:
        ValueError: either side has no step.
    """
    if not before_ns or not after_ns:
        raise ValueError("step_gain needs step times on both sides")
    b1, b2, b3 = _quartiles(list(before_ns))
    a1, a2, a3 = _quartiles(list(after_ns))
    return StepGain(b2, a2, b2 - a2, b1 - a3, b3 - a1, (len(before_ns), len(after_ns)))


def loss_change(before: Mapping[int, float], after: Mapping[int, float]) -> float | None:
    """The largest relative change of a step's loss, over the steps both runs give a loss
    for: ``|after - before| / max(|before|, 1e-12)``; None when they share none."""
    common = sorted(set(before) & set(after))
    if not common:
        return None
    if any(math.isfinite(before[i]) != math.isfinite(after[i]) for i in common):
        return math.inf  # a fix that makes a loss NaN or infinite changed it
    return max(abs(after[i] - before[i]) / max(abs(before[i]), 1e-12) for i in common)


def measured_status(gain: StepGain | None, change: float | None, *,
                    tolerance: float = LOSS_TOLERANCE, min_steps: int = MIN_STEPS) -> str:
    """Whether a measurement counts: ``measured``, ``too_few_steps`` or ``loss_changed``
    (a run that failed, or a fix that did not apply, is told apart before this)."""
    if gain is None or min(gain.steps) < min_steps:
        return "too_few_steps"
    if change is not None and change > tolerance:
        return "loss_changed"
    return "measured"
