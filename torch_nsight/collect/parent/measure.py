"""Fixes measured on the user's own steps: ``torch-nsight profile --verify`` (and
``findings --verify --command``).

Choose -> rounds of (baseline, each fix) -> merge. For the top findings whose fix is a switch
(:mod:`torch_nsight.analyze.findings.switch_fixes`; or the fixes asked for by name), the
user's command runs bare (:mod:`torch_nsight.collect.parent.bare`) once without any fix and
once with each, timing the same steps, and does so again for each round: the runs alternate
(baseline, fixes; the fixes in reverse order on even rounds) so that a GPU whose speed
drifts between runs (clocks, power, other tenants) weighs on both sides alike. Each fix's
gain is the median of its steps over all rounds minus the baseline's
(:mod:`torch_nsight.analyze.measured`); the baseline's round-to-round drift is reported,
and a gain inside it is said to be. A fix that fails to apply, a run whose steps
raise or end early, or a fix that changes the loss beyond the tolerance is reported in
``verify_status`` and not counted. The finding table keeps its prediction in
``est_gain_ns`` and gains :data:`~torch_nsight.vocabulary.MEASURED_COLUMNS`; a measured
row's ``gain_basis`` becomes :data:`~torch_nsight.vocabulary.STEPS_BASIS`.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch_nsight.analyze.findings.switch_fixes import switch_fix
from torch_nsight.analyze.measured import (
    LOSS_TOLERANCE,
    MIN_STEPS,
    StepGain,
    loss_change,
    measured_status,
    step_gain,
)
from torch_nsight.collect.parent.bare import BareRun, run_bare
from torch_nsight.errors import VerifyError
from torch_nsight.status import parse_steps
from torch_nsight.switches import FixSpec
from torch_nsight.units import format_duration
from torch_nsight.vocabulary import FINDING_COLUMNS, MEASURED_COLUMNS, STEPS_BASIS

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

__all__ = ["VerifyPlan", "verify_on_steps", "verify_window"]

#: The fixes measured by default: the top findings that have a switch.
DEFAULT_TOP = 3
#: Rounds of bare runs by default (each round: the baseline, then every fix).
DEFAULT_ROUNDS = 2


@dataclass(frozen=True)
class VerifyPlan:
    """What ``--verify`` runs.

    Attributes:
        command: the user's command, run as it is.
        steps: the steps to time (``A:B``, at least :data:`MIN_STEPS`; those before A warm).
        top: how many of the ranked findings' distinct switches to measure.
        fixes: fixes asked for by name: measured instead of the findings' own.
        loss_tolerance: the largest relative change of a step's loss a fix may cause.
        rounds: how many times the baseline and every fix run (alternating).
        timeout: seconds each run may take (None: no limit).
        quiet: no progress bar.
    """

    command: list[str]
    steps: str
    top: int = DEFAULT_TOP
    fixes: tuple[FixSpec, ...] = ()
    loss_tolerance: float = LOSS_TOLERANCE
    rounds: int = DEFAULT_ROUNDS
    timeout: float | None = None
    quiet: bool = False


def verify_window(steps: str | None, chosen: str | None = None) -> str:
    """The steps ``--verify`` times: ``chosen`` if given, else the profile's ``--steps``
    window lengthened to :data:`MIN_STEPS` steps (``10:12`` -> ``10:15``).

    Raises:
        VerifyError: no steps, a malformed or open-ended selection, or too few steps.
    """
    text = chosen or steps
    if text is None:
        raise VerifyError("--verify times the steps the loop marks with torch_nsight.step(): "
                          "pass --steps A:B (the steps before A warm up)")
    try:
        window = parse_steps(text)
    except ValueError as err:
        raise VerifyError(f"--verify-steps: {err}") from None
    if window.stop >= 2**62:
        raise VerifyError(f"--verify times a closed window of steps, not {text!r}: pass "
                          f"--verify-steps {window.start}:{window.start + MIN_STEPS}")
    if chosen is not None:
        if len(window) < MIN_STEPS:
            raise VerifyError(f"--verify-steps {chosen}: time at least {MIN_STEPS} steps "
                              f"(e.g. {window.start}:{window.start + MIN_STEPS})")
        return chosen
    return f"{window.start}:{window.start + max(len(window), MIN_STEPS)}"


def _choose(found: pd.DataFrame, plan: VerifyPlan) -> list[tuple[list[int], FixSpec]]:
    """The switches to measure, each with the rows (table positions) it stands for."""
    chosen: dict[str, tuple[list[int], FixSpec]] = {}
    for position, (_, row) in enumerate(found.iterrows()):
        spec = switch_fix(row)
        if spec is None:
            continue
        key = spec.describe()
        if key in chosen:
            chosen[key][0].append(position)
        elif len(chosen) < plan.top:
            chosen[key] = ([position], spec)
    return list(chosen.values())


def _asked(found: pd.DataFrame, fixes: Sequence[FixSpec]
           ) -> tuple[pd.DataFrame, list[tuple[list[int], FixSpec]]]:
    """Rows for fixes asked for by name, appended to the table."""
    import pandas as pd

    rows = [{"module": spec.target or "(model)", "finding": "asked", "fix": spec.describe(),
             "est_gain_ns": float("nan")} for spec in fixes]
    extra = pd.DataFrame(rows, columns=list(FINDING_COLUMNS))
    table = pd.concat([found, extra], ignore_index=True) if len(found) else extra
    first = len(found)
    return table, [([first + i], spec) for i, spec in enumerate(fixes)]


def _ms(value_ns: float) -> str:
    return format_duration(value_ns, largest="ms", decimals=2)


def _pooled(runs: Sequence[BareRun]) -> list[float]:
    return [t for run in runs for t in run.times_ns]


def _drift(bases: Sequence[BareRun]) -> float:
    """The range of the baseline's median step over its rounds (0 with one round)."""
    medians = [statistics.median(b.times_ns) for b in bases if b.times_ns]
    return max(medians) - min(medians) if len(medians) > 1 else 0.0


def _judge(bases: Sequence[BareRun], runs: Sequence[BareRun], tolerance: float
           ) -> tuple[str, str, StepGain | None]:
    """(verify_status, verify_detail, gain) of one fix's runs against the baseline's, all
    rounds pooled; the first run that failed decides when one did."""
    failed = [r for r in runs if r.error is not None or r.times is None]
    if failed and (len(failed) == len(runs) or failed[0].fix_failed):
        run = failed[0]
        return ("fix_failed" if run.fix_failed else "run_failed"), str(run.error), None
    runs = [r for r in runs if r not in failed]  # a later round's run that failed: left out
    after = _pooled(runs)
    gain = step_gain(_pooled(bases), after) if after else None
    change = max((c for c in (loss_change(bases[0].times.losses, r.times.losses)
                              for r in runs if bases[0].times and r.times)
                  if c is not None), default=None)
    status = measured_status(gain, change, tolerance=tolerance)
    if status == "loss_changed":
        detail = (f"the loss changed by {100 * (change or 0):.2g}% (tolerance "
                  f"{100 * tolerance:.2g}%): not counted")
    elif status == "too_few_steps":
        detail = f"fewer than {MIN_STEPS} steps timed"
    else:
        detail = ("loss not recorded (step.record_loss): not compared" if change is None
                  else f"loss within {100 * tolerance:.2g}%")
        drift = _drift(bases)
        if gain is not None and gain.within_noise:
            detail += "; the gain is within the step-to-step noise"
        elif gain is not None and abs(gain.gain_ns) <= drift:
            detail += (f"; the gain is within the baseline's drift between rounds "
                       f"({_ms(drift)})")
        if len(runs) > 1:
            detail += f"; {len(runs)} rounds"
        if failed:
            detail += f"; {len(failed)} run(s) failed and were left out: {failed[0].error}"
    return status, detail, gain


def _baseline(plan: VerifyPlan, n_steps: int, say: Callable[[str], None], number: int,
              total: int) -> BareRun | None:
    """One baseline run; None when a later round's is unusable (the first round's raises)."""
    say(f"verify: run {number} of {total}: no fix, steps {plan.steps}")
    base = run_bare(plan.command, plan.steps, n_steps, name="verify baseline",
                    timeout=plan.timeout, quiet=plan.quiet)
    problem = base.error or (None if len(base.times_ns) >= MIN_STEPS else
                             f"it timed {len(base.times_ns)} steps; at least {MIN_STEPS} "
                             "are needed")
    if problem is not None:
        if number == 1:
            raise VerifyError(f"--verify: the run without any fix is unusable: {problem}")
        say(f"verify: this run without a fix is left out: {problem}")
        return None
    times = base.times_ns
    say(f"verify: no fix: median step {_ms(statistics.median(times))} over "
        f"{len(times)} steps ({base.times.clock if base.times else '?'})")
    return base


def _record(table: pd.DataFrame, positions: list[int], spec: FixSpec, status: str,
            detail: str, gain: StepGain | None) -> None:
    for position in positions:
        index = table.index[position]
        table.loc[index, ["verify_status", "verify_detail", "verify_fix"]] = [
            status, detail, spec.describe()]
        if gain is not None:
            table.loc[index, ["measured_gain_ns", "measured_spread_ns", "before_ns",
                              "after_ns", "steps_timed"]] = [
                gain.gain_ns, gain.spread_ns, gain.before_ns, gain.after_ns, min(gain.steps)]
        if status == "measured":
            table.loc[index, "gain_basis"] = STEPS_BASIS


def verify_on_steps(found: pd.DataFrame, plan: VerifyPlan,
                    say: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Measure the fixes of the top findings (or ``plan.fixes``) on the user's steps.

    Args:
        found: a finding table (:meth:`Profile.finding_table`), ranked.
        plan: what to run.
        say: where the progress lines go, one per run started and ended (default: logged).

    Returns:
        ``found`` (with a row per fix asked for by name) and
        :data:`~torch_nsight.vocabulary.MEASURED_COLUMNS`; ``verify_status`` is
        ``measured``, ``fix_failed``, ``run_failed``, ``loss_changed``, ``too_few_steps``,
        ``no_switch`` (a finding whose fix is not a switch) or None (not tried).

    Raises:
        VerifyError: a bad window, nothing to measure, or the run without fixes unusable.
        KeyboardInterrupt: interrupted.
        FileNotFoundError: the command does not exist.
    """
    tell = say or (lambda line: logger.info("%s", line))
    n_steps = len(parse_steps(verify_window(None, plan.steps)))  # (checked again)
    table, chosen = (_asked(found, plan.fixes) if plan.fixes
                     else (found.copy(), _choose(found, plan)))
    if not chosen:
        raise VerifyError("--verify: none of the findings has a fix that is a switch "
                          "(torch.compile, channels-last, TF32, a padded Linear, an SDPA "
                          "backend); name one with --verify-fix")
    table = _with_columns(table)
    bases, runs = _run_rounds(plan, chosen, table, n_steps, tell)
    for positions, spec in chosen:
        status, detail, gain = _judge(bases, runs[spec.describe()], plan.loss_tolerance)
        _record(table, positions, spec, status, detail, gain)
        tell(f"verify: {spec.describe()}: " + (
            f"{_ms(gain.before_ns)} -> {_ms(gain.after_ns)} per step, gain "
            f"{_ms(gain.gain_ns)} ± {_ms(gain.spread_ns)}; {detail}"
            if status == "measured" and gain is not None else f"NOT counted ({status}): {detail}"))
    return table


def _run_rounds(plan: VerifyPlan, chosen: list[tuple[list[int], FixSpec]],
                table: pd.DataFrame, n_steps: int, tell: Callable[[str], None]
                ) -> tuple[list[BareRun], dict[str, list[BareRun]]]:
    """The baseline's runs and each fix's (by ``describe()``), round after round; a fix whose
    run failed is not run again."""
    total = plan.rounds * (len(chosen) + 1)
    bases: list[BareRun] = []
    runs: dict[str, list[BareRun]] = {spec.describe(): [] for _, spec in chosen}
    number = 0
    for round_number in range(plan.rounds):
        number += 1
        base = _baseline(plan, n_steps, tell, number, total)
        if base is None:  # the fixes of a round without a baseline would pool unpaired
            tell(f"verify: round {round_number + 1}'s fixes are not run (no baseline)")
            number += len(chosen)
            continue
        bases.append(base)
        order = chosen if round_number % 2 == 0 else chosen[::-1]
        for positions, spec in order:
            number += 1
            done = runs[spec.describe()]
            if done and (done[-1].fix_failed or all(r.error is not None for r in done)):
                tell(f"verify: run {number} of {total}: {spec.describe()}: not run again "
                     "(its run in an earlier round failed)")
                continue
            row = table.iloc[positions[0]]
            tell(f"verify: run {number} of {total}: {spec.describe()}" + (
                "" if plan.fixes else f" (the fix of {row['finding']} in {row['module']})"))
            done.append(run_bare(plan.command, plan.steps, n_steps, fixes=(spec,),
                                 name=f"verify {spec.fix}", timeout=plan.timeout,
                                 quiet=plan.quiet))
    return bases, runs


def _with_columns(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with the measured columns, empty; ``no_switch`` where a row has none."""
    out = table.astype({c: object for c in FINDING_COLUMNS if c != "est_gain_ns"})
    out["predicted_basis"] = out["gain_basis"]
    for column in MEASURED_COLUMNS[1:6]:
        out[column] = float("nan")
    out["verify_status"] = [None if switch_fix(r) is not None or r["finding"] == "asked"
                            else "no_switch" for _, r in out.iterrows()]
    out["verify_detail"] = None
    out["verify_fix"] = None
    return out.astype({"verify_status": object, "verify_detail": object, "verify_fix": object})


def verify_summary(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows ``--verify`` tried, as plain records (for a JSON file or a test)."""
    tried = table[table["verify_status"].notna() & (table["verify_status"] != "no_switch")]
    return tried[[c for c in (*FINDING_COLUMNS, *MEASURED_COLUMNS) if c in tried]
                 ].to_dict(orient="records")
