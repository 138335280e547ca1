"""Fixes measured on the user's own steps: ``torch-nsight profile --verify`` (and
``findings --verify --command``).

Choose -> run each fix (in rounds) -> judge. For the top findings whose fix is a switch
(:mod:`torch_nsight.analyze.findings.switch_fixes`; or the fixes asked for by name), the
user's command runs bare (:mod:`torch_nsight.collect.parent.bare`) once per fix, the fix
switched off and on inside that one process at every step boundary, in the ABBA order
(off, on, on, off, ...: the warm-up too, so that both forms are warm when timed), and again
in each of ``rounds`` rounds, pooled. There is no separate run without the fix: the bare
step's time drifts between processes, and within one process shifts for several steps at a
time, by more than a fix's gain. Each adjacent pair of timed steps, one without the fix and
one with it, gives one difference; the gain is their median, with the 95% interval of that
median (:mod:`torch_nsight.analyze.measured`), and an interval holding 0 is said to be within
the noise. A fix that fails to apply or to switch, a run whose steps raise, or a fix that
changes the loss beyond the tolerance is reported in ``verify_status`` and not counted. The
finding table keeps its prediction in ``est_gain_ns`` and gains
:data:`~torch_nsight.vocabulary.MEASURED_COLUMNS` (``steps_timed``: the pairs); a measured
row's ``gain_basis`` becomes :data:`~torch_nsight.vocabulary.STEPS_BASIS`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch_nsight.analyze.findings.switch_fixes import switch_fix
from torch_nsight.analyze.measured import (
    DEFAULT_PAIRS,
    LOSS_TOLERANCE,
    MIN_PAIRS,
    LossChange,
    PairedGain,
    loss_change,
    measured_status,
    paired_gain,
    step_pairs,
)
from torch_nsight.collect.parent.bare import BareRun, run_bare
from torch_nsight.environment import Steps
from torch_nsight.errors import VerifyError
from torch_nsight.units import format_duration
from torch_nsight.verify_exchange import FixSpec
from torch_nsight.vocabulary import FINDING_COLUMNS, MEASURED_COLUMNS, STEPS_BASIS

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

__all__ = ["VerifyPlan", "verify_on_steps", "verify_window"]

#: The fixes measured by default: the top findings that have a switch.
DEFAULT_TOP = 3
#: Bare runs of each fix by default (one process each, the fix switched off and on).
DEFAULT_ROUNDS = 1
#: Steps before the first timed one, at the least: one without the fix, one with it.
MIN_WARMUP = 2


@dataclass(frozen=True)
class VerifyPlan:
    """What ``--verify`` runs.

    Attributes:
        command: the user's command, run as it is.
        steps: the steps to time (``A:B``, at least ``2 * MIN_PAIRS``; those before A, at
            least :data:`MIN_WARMUP`, warm up): :func:`verify_window` chooses them.
        top: how many of the ranked findings' distinct switches to measure.
        fixes: fixes asked for by name: measured instead of the findings' own.
        loss_tolerance: the largest relative change of the loss a fix may cause.
        rounds: how many processes each fix runs in (pooled).
        timeout: seconds each run may take (None: no limit).
        quiet: no progress bar.
    """

    command: list[str]
    steps: Steps
    top: int = DEFAULT_TOP
    fixes: tuple[FixSpec, ...] = ()
    loss_tolerance: float = LOSS_TOLERANCE
    rounds: int = DEFAULT_ROUNDS
    timeout: float | None = None
    quiet: bool = False


def verify_window(steps: Steps | None, chosen: Steps | None = None) -> Steps:
    """The steps ``--verify`` times: ``chosen`` (``--verify-steps``) if given, else the
    profile's ``--steps`` window lengthened to :data:`DEFAULT_PAIRS` pairs of steps (an even
    number of steps, ``10:12`` -> ``10:30``) and started after :data:`MIN_WARMUP` steps
    (``0:1`` -> ``2:22``).

    Raises:
        VerifyError: no steps, an open-ended window, too few steps, or too short a warm-up.
    """
    window = chosen or steps
    if window is None:
        raise VerifyError("--verify times the steps the loop marks with torch_nsight.step(): "
                          "pass --steps A:B (the steps before A warm up)")
    least = 2 * MIN_PAIRS
    start = max(window.first, MIN_WARMUP)
    if window.count is None:
        raise VerifyError(f"--verify times a closed window of steps, not '{window}': pass "
                          f"--verify-steps {start}:{start + 2 * DEFAULT_PAIRS}")
    if chosen is not None:
        if window.count < least or window.first < MIN_WARMUP:
            raise VerifyError(f"--verify-steps {chosen}: time at least {least} steps ("
                              f"{MIN_PAIRS} pairs, the fix off and on) after at least "
                              f"{MIN_WARMUP} to warm up (e.g. {start}:{start + least})")
        return chosen
    length = max(window.count, 2 * DEFAULT_PAIRS)
    return Steps(start, start + length + length % 2)


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


def _loss_words(change: LossChange | None, tolerance: float) -> str:
    if change is None:
        return "loss not recorded (step.record_loss): not compared"
    if abs(change.change) <= tolerance:
        return f"loss within {100 * tolerance:.2g}%"
    return (f"the loss changed by {100 * change.change:+.3g}%, within its own noise between "
            f"steps ({100 * change.low:+.3g}% to {100 * change.high:+.3g}%)")


def _judge(runs: Sequence[BareRun], tolerance: float, n_steps: int
           ) -> tuple[str, str, PairedGain | None]:
    """(verify_status, verify_detail, gain) of one fix's runs, their pairs pooled; the first
    run that failed decides when one did."""
    failed = [r for r in runs if r.error is not None or r.times is None]
    if failed and (len(failed) == len(runs) or failed[0].fix_failed):
        run = failed[0]
        return ("fix_failed" if run.fix_failed else "run_failed"), str(run.error), None
    runs = [r for r in runs if r not in failed]  # a later round's run that failed: left out
    pairs = [p for r in runs if r.times for p in step_pairs(r.times.steps)]
    gain = paired_gain(pairs) if pairs else None
    change = loss_change(pairs)
    status = measured_status(gain, change, tolerance=tolerance)
    if status == "loss_changed" and change is not None:
        return status, (f"the loss changed by {100 * change.change:+.3g}% (tolerance "
                        f"{100 * tolerance:.2g}%, steps with the fix against the adjacent "
                        "ones without): not counted"), gain
    if status == "too_few_steps":
        timed = sum(len(r.times.steps) for r in runs if r.times)
        short = (f": the command ended after {timed} of the {n_steps * len(runs)} steps to "
                 "time" if timed < n_steps * len(runs) else "")
        return status, f"{len(pairs)} pairs of steps timed, fewer than {MIN_PAIRS}{short}", gain
    detail = _loss_words(change, tolerance)
    if gain is not None:  # the interval as it is: it need not be even around the median
        detail = (f"the gain's 95% interval {_ms(gain.low_ns)} to {_ms(gain.high_ns)}"
                  + (" holds 0: within the noise" if gain.within_noise else "")
                  + f"; {detail}")
    if len(runs) > 1:
        detail += f"; {len(runs)} runs pooled"
    if failed:
        detail += f"; {len(failed)} run(s) failed and were left out: {failed[0].error}"
    return status, detail, gain


def _record(table: pd.DataFrame, positions: list[int], spec: FixSpec, status: str,
            detail: str, gain: PairedGain | None) -> None:
    for position in positions:
        index = table.index[position]
        table.loc[index, ["verify_status", "verify_detail", "verify_fix"]] = [
            status, detail, spec.describe()]
        if gain is not None:
            table.loc[index, ["measured_gain_ns", "measured_spread_ns", "before_ns",
                              "after_ns", "steps_timed"]] = [
                gain.gain_ns, gain.spread_ns, gain.before_ns, gain.after_ns, gain.pairs]
        if status == "measured":
            table.loc[index, "gain_basis"] = STEPS_BASIS


def verify_on_steps(found: pd.DataFrame, plan: VerifyPlan,
                    say: Callable[[str], None] | None = None,
                    kernels: pd.DataFrame | None = None,
                    calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Measure the fixes of the top findings (or ``plan.fixes``) on the user's steps.

    Args:
        found: a finding table (:meth:`Profile.finding_table`), ranked.
        plan: what to run.
        say: where the progress lines go, one per run started and ended (default: logged).
        kernels: the profile's kernel table, where it holds every kernel of its steps:
            with it, the bare step the runs timed (their steps with the fix off) against
            the kernels' time may add a ``step_idle``
            finding (:mod:`~torch_nsight.analyze.findings.step_idle`), whose switch is then
            measured too where no run did already.
        calls: the profile's calls table, for that finding's ops of data-dependent size.

    Returns:
        ``found`` (with a row per fix asked for by name) and
        :data:`~torch_nsight.vocabulary.MEASURED_COLUMNS`; ``verify_status`` is
        ``measured``, ``fix_failed``, ``run_failed``, ``loss_changed``, ``too_few_steps``,
        ``no_switch`` (a finding whose fix is not a switch) or None (not tried).

    Raises:
        VerifyError: a bad window, or nothing to measure.
        KeyboardInterrupt: interrupted.
        FileNotFoundError: the command does not exist.
    """
    tell = say or (lambda line: logger.info("%s", line))
    n_steps = verify_window(None, plan.steps).count or 0  # (checked again: a closed window)
    table, chosen = (_asked(found, plan.fixes) if plan.fixes
                     else (found.copy(), _choose(found, plan)))
    if not chosen:
        raise VerifyError("--verify: none of the findings has a fix that is a switch "
                          "(torch.compile, channels-last, TF32, a padded Linear, an SDPA "
                          "backend); name one with --verify-fix")
    table = _with_columns(table)
    runs = _run_rounds(plan, chosen, table, tell)
    for positions, spec in chosen:
        status, detail, gain = _judge(runs[spec.describe()], plan.loss_tolerance, n_steps)
        _record(table, positions, spec, status, detail, gain)
        tell(f"verify: {spec.describe()}: " + (
            f"{_ms(gain.before_ns)} -> {_ms(gain.after_ns)} per step, gain "
            f"{_ms(gain.gain_ns)} over {gain.pairs} pairs; {detail}"
            if status == "measured" and gain is not None else f"NOT counted ({status}): {detail}"))
    if kernels is not None and not plan.fixes:
        compiled = {spec.describe() for _, spec in chosen if spec.fix == "compile"}
        table = _with_idle(table, kernels, calls, runs, compiled, plan, tell, n_steps)
    return table


def _bare_step_ns(runs: dict[str, list[BareRun]], compiled: set[str]) -> float:
    """The median of the runs' timed steps with the fix off: the user's step as it runs.
    The runs of a compile switch (``compiled``: their keys) count only where no other run
    timed enough steps: with the compiled callable switched off, a step ran slower than in
    the other runs (docs/zoo.md)."""
    import statistics

    def off_steps(keys: list[str]) -> list[float]:
        return [p.off_ns for key in keys for r in runs[key]
                if r.error is None and r.times is not None for p in step_pairs(r.times.steps)]

    off = off_steps([k for k in runs if k not in compiled])
    if len(off) < MIN_PAIRS:
        off = off_steps(list(runs))
    return statistics.median(off) if len(off) >= MIN_PAIRS else float("nan")


def _with_idle(table: pd.DataFrame, kernels: pd.DataFrame, calls: pd.DataFrame | None,
               runs: dict[str, list[BareRun]],
               compiled: set[str], plan: VerifyPlan, tell: Callable[[str], None],
               n_steps: int) -> pd.DataFrame:
    """``table`` with the ``step_idle`` finding of the bare step the runs timed, where the GPU
    idles enough of it; its switch measured (by the runs already made where one measured
    it)."""
    import pandas as pd

    from torch_nsight.analyze.findings.cast_first import cast_first_row
    from torch_nsight.analyze.findings.step_idle import add_step_idle, step_idle
    from torch_nsight.analyze.verdicts import FINDING_PCT
    from torch_nsight.render.finding_words import word_findings

    bare = _bare_step_ns(runs, compiled)
    row = step_idle(kernels, bare, calls)
    if row is None:
        tell(f"verify: the bare step ({_ms(bare)}) leaves the GPU idle under {FINDING_PCT:g}% "
             "of it, or the profile holds several shapes" if bare == bare
             else "verify: too few bare steps timed to judge the GPU's idle time")
        return table
    idle = _with_columns(word_findings(pd.DataFrame([cast_first_row(table, row)])))
    spec = switch_fix(idle.iloc[0])
    tell(f"verify: the GPU idles {_ms(row['facts']['idle_ns'])} of the bare step's {_ms(bare)}"
         + (f": measuring {spec.describe()}" if spec is not None else ": no switch fixes it"))
    if spec is not None:
        key = spec.describe()
        if key not in runs:
            runs.update(_run_rounds(plan, [([0], spec)], idle, tell))
        status, detail, gain = _judge(runs[key], plan.loss_tolerance, n_steps)
        _record(idle, [0], spec, status, detail, gain)
    return add_step_idle(table, idle.iloc[0].to_dict())


def _ran(run: BareRun, spec: FixSpec) -> str:
    """The progress line of a run that ended."""
    if run.error is not None or run.times is None:
        return f"verify: {spec.describe()}: this run is unusable: {run.error}"
    pairs = step_pairs(run.times.steps)
    if not pairs:
        return (f"verify: {spec.describe()}: no pair of adjacent steps with the fix off and "
                f"on among {len(run.times.steps)} timed")
    gain = paired_gain(pairs)
    return (f"verify: {spec.describe()}: {len(pairs)} pairs of steps ({run.times.clock}): "
            f"median {_ms(gain.before_ns)} off, {_ms(gain.after_ns)} on")


def _run_rounds(plan: VerifyPlan, chosen: list[tuple[list[int], FixSpec]],
                table: pd.DataFrame, tell: Callable[[str], None]
                ) -> dict[str, list[BareRun]]:
    """Each fix's runs (by ``describe()``), round after round; a fix whose run failed is not
    run again."""
    total = plan.rounds * len(chosen)
    runs: dict[str, list[BareRun]] = {spec.describe(): [] for _, spec in chosen}
    number = 0
    for _ in range(plan.rounds):
        for positions, spec in chosen:
            number += 1
            done = runs[spec.describe()]
            if done and (done[-1].fix_failed or all(r.error is not None for r in done)):
                tell(f"verify: run {number} of {total}: {spec.describe()}: not run again "
                     "(its run in an earlier round failed)")
                continue
            row = table.iloc[positions[0]]
            tell(f"verify: run {number} of {total}: {spec.describe()}" + (
                "" if plan.fixes else f" (the fix of {row['finding']} in {row['module']})")
                + f", off and on in turn over steps {plan.steps}")
            done.append(run_bare(plan.command, plan.steps, (spec,),
                                 name=f"verify {spec.fix}", timeout=plan.timeout,
                                 quiet=plan.quiet))
            tell(_ran(done[-1], spec))
    return runs


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
