"""The focused second pass of ``torch-nsight profile --stalls``: what latency-bound kernels
wait on.

After the first pass, :func:`~torch_nsight.analyze.stalls.stall_targets` names the kernels
(Nsight Compute's function names) that hold most of the latency-bound time of the chosen
steps, replicas counted; :func:`plan_stall_pass` builds the same command under ncu again,
with the same steps, NVTX filters and replicas left out, only those names (``-k``), one
launch per launch configuration (``--filter-mode per-launch-config -c 1``) and the
warp-state metrics (:data:`~torch_nsight.metrics.STALL_PASS`: 8 replay passes a kernel),
its report in :data:`~torch_nsight.formats.STALL_FOLDER` beside the first;
:func:`run_stall_pass` runs it and loads the first report again, which merges the second
(:mod:`torch_nsight.report.stall_merge`). ncu applies one metric list to every kernel of a
process, so a focused pass must be a second process: it costs one more start-up of the
script. Whatever goes wrong in it, the first pass's profile is kept.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch_nsight import formats
from torch_nsight.collect.parent.script import ScriptPlan, run_script
from torch_nsight.collect.shared import ncu as ncu_cli
from torch_nsight.errors import TorchNsightError
from torch_nsight.metrics import STALL_PASS

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

#: What a dry run shows in place of the names, which the first pass has not given yet.
NAMES_PLACEHOLDER = "NAMES"


@dataclass(frozen=True)
class StallPass:
    """How the second pass went.

    Attributes:
        profile: the first pass's profile, with the warp states merged where it ran.
        functions: the kernel names it profiled (empty: it did not run).
        kernels_profiled: the launches ncu profiled in it.
        seconds: its whole time (start-up, profiling, loading).
        merged: kernel rows of the profile that now hold stall reasons.
        failed: why it did not run or gave nothing, or None.
    """

    profile: Profile
    functions: tuple[str, ...] = ()
    kernels_profiled: int = 0
    seconds: float = 0.0
    merged: int = 0
    failed: str | None = None


def kernel_filter(functions: Sequence[str]) -> str:
    """ncu's ``-k`` value selecting exactly these function names: ``regex:^(?:a|b)$``."""
    return "regex:^(?:" + "|".join(re.escape(f) for f in functions) + ")$"


def plan_stall_pass(first: ScriptPlan, functions: Sequence[str], *, ncu: str,
                    ncu_args: Sequence[str] = (), known: frozenset[str] | None = None,
                    expected: int | None = None) -> ScriptPlan:
    """The second pass of ``first``: the same command, steps and environment, only the
    kernels named ``functions`` and :data:`~torch_nsight.metrics.STALL_PASS`.

    Args:
        first: the first pass's plan.
        functions: the function names to profile (or ``[NAMES_PLACEHOLDER]`` for a dry run).
        ncu: the ``ncu`` executable.
        ncu_args: the user's extra ncu arguments, passed again.
        known: the metric base names this ncu knows (None: pass every metric).
        expected: the launches it should profile (for the progress line), when known.

    Returns:
        Its plan: the report in the ``stalls`` folder beside the first's.
    """
    report = formats.stall_report_of(first.report)
    metrics = (list(STALL_PASS.metrics) if known is None
               else ncu_cli.filter_metrics(STALL_PASS.metrics, known))
    command = ncu_cli.build_command(
        ncu, report=report.with_suffix(""), metric_set=STALL_PASS, app=first.command,
        metrics=metrics, exclude_replicas=first.replicate,
        extra_args=["-k", kernel_filter(functions), "--kernel-name-base", "function",
                    "--filter-mode", "per-launch-config", "-c", "1",
                    *ncu_cli.check_extra_args(ncu_args)],
        measured_only=first.steps is not None)
    script = dataclasses.replace(first.script, status=report.with_suffix(formats.STATUS_SUFFIX),
                                 replicate_ops=False)  # matched to the first pass by name
    return dataclasses.replace(first, ncu_command=command, metric_set=STALL_PASS.name,
                               metrics=metrics, report=report, script=script,
                               expected_kernels=expected, entered=time.time())


def run_stall_pass(first: ScriptPlan, profile: Profile, *, ncu: str,
                   ncu_args: Sequence[str] = (),
                   known: frozenset[str] | None = None) -> StallPass:
    """Choose the kernels, run the second pass, merge it; never lose ``profile``.

    Args:
        first: the first pass's plan (its report is ``profile``'s source).
        profile: the first pass's profile.
        ncu: the ``ncu`` executable.
        ncu_args: the user's extra ncu arguments.
        known: the metric base names this ncu knows.

    Returns:
        The outcome; its ``profile`` is the first one, merged where the second pass ran,
        unchanged (with ``failed`` saying why) where it did not.
    """
    from torch_nsight.analyze.stalls import stall_targets

    targets = stall_targets(profile.kernels)
    if targets.empty:
        return StallPass(profile, failed="no latency-bound kernel in the first pass")
    functions = tuple(str(f) for f in targets["function"])
    plan = plan_stall_pass(first, functions, ncu=ncu, ncu_args=ncu_args, known=known,
                           expected=int(targets["profiled_launches"].sum()))
    logger.info("second pass (--stalls): %d kernel names, %.0f%% of the latency-bound time, "
                "%d launches", len(functions), float(targets["cumulative_pct"].iloc[-1]),
                plan.expected_kernels or 0)
    started = time.time()
    try:
        plan.report.parent.mkdir(parents=True, exist_ok=True)
        ran = run_script(plan)
        from torch_nsight.loading import load

        merged = load(first.report)
    except KeyboardInterrupt:
        return StallPass(profile, functions, failed="interrupted")
    except (TorchNsightError, OSError, ValueError) as err:
        return StallPass(profile, functions, seconds=time.time() - started,
                         failed=f"{type(err).__name__}: {err}")
    count = _with_stalls(merged)
    return StallPass(merged, functions, kernels_profiled=int(ran.record["kernels_profiled"]),
                     seconds=time.time() - started, merged=count,
                     failed=None if count else "no launch of the second pass matched the first")


def _with_stalls(profile: Profile) -> int:
    """Kernel rows holding stall reasons (the scheduler's figures come with the fast set)."""
    from torch_nsight.metrics import STALL_REASONS, stall_column

    columns = [c for c in map(stall_column, STALL_REASONS) if c in profile.kernels]
    return int(profile.kernels[columns].notna().any(axis=1).sum()) if columns else 0
