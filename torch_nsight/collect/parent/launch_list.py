"""``profile --replicate-launches``: the launch list recorded first, without ncu, and the
invocation numbers ncu then profiles (see :mod:`torch_nsight.report.launch_replicas`).

The command runs once with PyTorch's profiler recording its chosen steps into the folder
:data:`~torch_nsight.formats.LAUNCH_FOLDER` beside the report, and is stopped when they have
ended; the plan written there (:data:`~torch_nsight.formats.LAUNCH_PLAN`) gives ncu's
``--kernel-id`` and is read again with the report.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torch_nsight import formats
from torch_nsight.collect.parent.rehearsal import run_until_steps_end
from torch_nsight.environment import ScriptEnv, Steps
from torch_nsight.errors import NothingProfiledError, OutputWriteError, ReportError
from torch_nsight.report.launch_replicas import (
    LaunchPlan,
    check_steps_listed,
    launch_list,
    plan_representatives,
)
from torch_nsight.report.source_base import ReadOptions
from torch_nsight.report.timeline_source import TimelineDirectory
from torch_nsight.status import RECURRENT_EVENT, StatusReader, recurrent_modules

logger = logging.getLogger(__name__)


class LaunchListFailed(NothingProfiledError):
    """The launch list's pass recorded no launch of the chosen steps: ``reason`` (the
    message adds the option and ``advice`` for a user who gave ``--replicate-launches``)."""

    def __init__(self, reason: str, advice: str = "") -> None:
        super().__init__(f"--replicate-launches: {reason}{advice}")
        self.reason = reason


@dataclass(frozen=True)
class ReplicatedLaunches:
    """The launch list's pass: the plan, and what the run's manifest records of it."""

    plan: LaunchPlan
    seconds: float
    #: the cuDNN recurrent layers its first step found, where it looked (None: it did not)
    recurrent: list[str] | None = None

    def summary(self) -> dict[str, Any]:
        """For the run's manifest: launches, how many ncu profiles, the pass's seconds (and
        the recurrent layers found, where the pass looked)."""
        return {"launches": self.plan.launches, "profiled": self.plan.profiled,
                "seconds": round(self.seconds, 3),
                **({} if self.recurrent is None else {"seen": self.recurrent})}


def forget_launches(report: Path) -> None:
    """Remove what an earlier ``--replicate-launches`` run left beside ``report`` (the plan, the
    launch list's manifest and trace): a new report would otherwise be read with them. Nothing
    else in the folder is touched."""
    folder = formats.launch_plan_of(report).parent
    for path in (formats.launch_plan_of(report), folder / formats.TIMELINE_MANIFEST,
                 folder / formats.LAUNCH_STATUS, *folder.glob(formats.LAUNCH_TRACES)):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # left where it holds anything else
        folder.rmdir()


def record_launches(command: Sequence[str], report: Path, *, steps: Steps,
                    timeout: float | None, quiet: bool, environ: Mapping[str, str],
                    probe: bool = False) -> ReplicatedLaunches:
    """Run ``command`` without ncu until its chosen steps end, recording them, and write
    the plan of which launches ncu profiles beside ``report``; with ``probe``, its first step
    also says which cuDNN recurrent layers it holds (:attr:`ReplicatedLaunches.recurrent`).

    Raises:
        LaunchListFailed: the command recorded no launch of the chosen steps.
        OutputWriteError: the launch list's folder holds files torch_nsight did not write.
        FileNotFoundError: the command does not exist.
        KeyboardInterrupt: interrupted.
    """
    plan_path = formats.launch_plan_of(report)
    folder = plan_path.parent
    forget_launches(report)
    folder.mkdir(parents=True, exist_ok=True)
    foreign = sorted(p.name for p in folder.iterdir())
    if foreign:
        raise OutputWriteError(f"--replicate-launches writes its launch list into {folder}, "
                                f"which holds files torch_nsight did not write "
                                f"({', '.join(foreign[:3])}): "
                                "choose another --out")
    started = time.monotonic()
    env = ScriptEnv(timeline=folder.resolve(), steps=steps, probe_launches=probe,
                    status=folder / formats.LAUNCH_STATUS).environment(dict(environ))
    outcome = run_until_steps_end("launch list", command, env, folder, steps=steps.count,
                                  timeout=timeout, quiet=quiet)
    seen = [recurrent_modules(e.get("modules")) for e in
            StatusReader(folder / formats.LAUNCH_STATUS).poll()
            if e.get("event") == RECURRENT_EVENT]
    (folder / formats.LAUNCH_STATUS).unlink(missing_ok=True)
    if not formats.is_timeline_dir(folder):
        raise LaunchListFailed(f"the command recorded no launch list without ncu (exit status "
                               f"{outcome.returncode}"
                               f"{'; ' + outcome.stopped if outcome.stopped else ''})",
                               ": run it without --replicate-launches")
    try:
        kernels = TimelineDirectory().read(folder, ReadOptions(cache=False)).kernels
        listed = launch_list(kernels)
        check_steps_listed(listed, steps.count or 1)
        plan = replace(plan_representatives(listed), report=report.name)
    except ReportError as err:
        raise LaunchListFailed(str(err)) from err
    if plan.launches == 0:
        raise LaunchListFailed("no kernel ran inside the chosen steps without ncu")
    formats.write_json(plan_path, plan.document())
    seconds = time.monotonic() - started
    logger.info("launch list: %d launches in %.1f s, ncu profiles %d of them", plan.launches,
                seconds, plan.profiled)
    return ReplicatedLaunches(plan, seconds, (seen[0] if seen else []) if probe else None)
