"""A fix measured on the user's own steps (``torch-nsight profile --verify``): the numbers
that one process's timed steps give, the fix switched off and on in turn (ABBA: off, on,
on, off, ...), and the rule that says whether they count.

Numbers: :func:`step_pairs` (adjacent timed steps, one without the fix and one with it),
:func:`paired_gain` (the median of the pairs' differences, with the 95% interval of that
median) and :func:`loss_change` (the mean relative change of the loss from a pair's step
without the fix to its step with it, with its 95% interval). Rule: :func:`measured_status`.
Words belong to the command that prints them.

Two adjacent steps run on the same machine state, so a pair's difference is the fix's
effect plus the step-to-step noise, without the drift that separates two processes (or two
regimes of one process, several steps long); the ABBA order puts the fix first in half the
pairs and second in the other half, so a drift that is linear over a few steps cancels. The
same holds for the loss, which training lowers from step to step: its change is averaged
over pairs of both orders.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CONFIDENCE", "DEFAULT_PAIRS", "LOSS_TOLERANCE", "MIN_PAIRS", "LossChange",
           "PairedGain", "StepPair", "loss_change", "measured_status", "median_interval",
           "paired_gain", "step_pairs"]

#: Fewer pairs of timed steps than this and a gain is not computed.
MIN_PAIRS = 5
#: The pairs ``--verify`` times by default: with 10, the median's interval runs from the
#: 2nd to the 9th smallest difference (97.9% coverage), so one outlying pair (a collection,
#: a recompile) does not widen it; with 8 it is the smallest to the largest.
DEFAULT_PAIRS = 10
#: The largest relative change of the loss a fix may cause and still count.
LOSS_TOLERANCE = 0.02
#: The confidence of the gain's and the loss change's intervals.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class StepPair:
    """Two adjacent timed steps, one without the fix (``off``) and one with it (``on``), in
    either order; their times (ns) and losses (None: not recorded)."""

    off_ns: float
    on_ns: float
    off_loss: float | None = None
    on_loss: float | None = None


def _loss(step: Mapping[str, Any]) -> float | None:
    value = step.get("loss")
    return float(value) if isinstance(value, (int, float)) else None


def step_pairs(steps: Sequence[Mapping[str, Any]]) -> list[StepPair]:
    """The pairs of a run's timed steps: from the first, each step and the next when both
    ended without an exception, their indices follow, and the fix was off in one and on in
    the other; a step that pairs with neither neighbour is left out.

    Args:
        steps: the step records of :attr:`~torch_nsight.verify_exchange.StepTimes.steps`
            (``index``, ``time_ns``, ``status``, ``loss``, ``fix_on``).
    """
    ordered = sorted(steps, key=lambda s: int(s["index"]))
    pairs: list[StepPair] = []
    position = 0
    while position + 1 < len(ordered):
        first, second = ordered[position], ordered[position + 1]
        flags = {first.get("fix_on"), second.get("fix_on")}
        if (int(second["index"]) == int(first["index"]) + 1 and flags == {False, True}
                and first.get("status") == second.get("status") == "ok"):
            off, on = (first, second) if first.get("fix_on") is False else (second, first)
            pairs.append(StepPair(float(off["time_ns"]), float(on["time_ns"]), _loss(off),
                                  _loss(on)))
            position += 2
        else:
            position += 1
    return pairs


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE
                    ) -> tuple[float, float]:
    """The distribution-free interval of the median of ``values``: the order statistics
    ``(k, n + 1 - k)`` with the largest ``k`` whose binomial tail (n trials, 1/2) is at most
    ``(1 - confidence) / 2`` on each side; with fewer than 6 values, the smallest and largest
    (which hold the median with 94% or less).

    Raises:
        ValueError: no value.
    """
    if not values:
        raise ValueError("median_interval needs at least one value")
    from scipy import special  # (scipy.stats would cost three times the import)

    ordered = sorted(values)
    n = len(ordered)
    k = 1
    while k < n // 2 and special.bdtr(k, n, 0.5) <= (1 - confidence) / 2:  # P(X <= k)
        k += 1
    return ordered[k - 1], ordered[n - k]


@dataclass(frozen=True)
class PairedGain:
    """The gain of a fix from pairs of steps (ns).

    Attributes:
        before_ns, after_ns: the median step time without and with the fix.
        gain_ns: the median of the pairs' differences (without - with: negative, the fix
            made the step slower); not ``before_ns - after_ns`` in general.
        low_ns, high_ns: the 95% interval of that median (:func:`median_interval`): a gain
            whose interval holds 0 is within the noise.
        pairs: how many pairs.
    """

    before_ns: float
    after_ns: float
    gain_ns: float
    low_ns: float
    high_ns: float
    pairs: int

    @property
    def spread_ns(self) -> float:
        """Half the width of the gain's interval."""
        return (self.high_ns - self.low_ns) / 2

    @property
    def within_noise(self) -> bool:
        """Whether the gain's interval holds 0."""
        return self.low_ns <= 0 <= self.high_ns


def paired_gain(pairs: Sequence[StepPair]) -> PairedGain:
    """The gain from pairs of steps.

    Raises:
        ValueError: no pair.
    """
    if not pairs:
        raise ValueError("paired_gain needs at least one pair of steps")
    differences = [p.off_ns - p.on_ns for p in pairs]
    low, high = median_interval(differences)
    return PairedGain(statistics.median(p.off_ns for p in pairs),
                      statistics.median(p.on_ns for p in pairs),
                      statistics.median(differences), low, high, len(pairs))


@dataclass(frozen=True)
class LossChange:
    """How a fix changed the loss, from pairs of steps.

    Attributes:
        change: the mean over pairs of ``(with - without) / |without|`` (``inf``: a loss
            finite on one side of a pair and not on the other).
        low, high: its 95% interval (Student's t; one pair: the change itself).
        pairs: the pairs with a loss on both sides.
    """

    change: float
    low: float
    high: float
    pairs: int

    @property
    def significant(self) -> bool:
        """Whether the interval leaves out 0 (a change, not the loss's own noise)."""
        return not self.low <= 0 <= self.high


def loss_change(pairs: Sequence[StepPair]) -> LossChange | None:
    """The relative change of the loss with the fix, over the pairs with a loss on both
    sides; None when there is none."""
    both = [(p.off_loss, p.on_loss) for p in pairs
            if p.off_loss is not None and p.on_loss is not None]
    if not both:
        return None
    if any(math.isfinite(off) != math.isfinite(on) for off, on in both):
        return LossChange(math.inf, math.inf, math.inf, len(both))  # made it NaN or inf
    changes = [(on - off) / max(abs(off), 1e-12) for off, on in both
               if math.isfinite(off) and math.isfinite(on)]
    if not changes:
        return None
    mean = statistics.fmean(changes)
    if len(changes) == 1:
        return LossChange(mean, mean, mean, 1)
    from scipy import special

    half = (float(special.stdtrit(len(changes) - 1, (1 + CONFIDENCE) / 2))
            * statistics.stdev(changes) / math.sqrt(len(changes)))
    return LossChange(mean, mean - half, mean + half, len(changes))


def measured_status(gain: PairedGain | None, change: LossChange | None, *,
                    tolerance: float = LOSS_TOLERANCE, min_pairs: int = MIN_PAIRS) -> str:
    """Whether a measurement counts: ``measured``, ``too_few_steps`` (fewer than
    ``min_pairs`` pairs) or ``loss_changed`` (the loss changed by more than ``tolerance``,
    relative, beyond its own noise); a run that failed, or a fix that did not apply, is told
    apart before this."""
    if gain is None or gain.pairs < min_pairs:
        return "too_few_steps"
    if change is not None and abs(change.change) > tolerance and change.significant:
        return "loss_changed"
    return "measured"
