"""``sweep(..., focus=0.9)``: a timeline pass first, then Nsight Compute only on the kernels
that carry the time.

1. The timeline runs in a child process (the parent never imports the user's model):
   ``python -m torch_nsight.collect.child.first_look JOB DIR/timeline``.
2. :func:`~torch_nsight.report.focused_kernels.focus_set` picks, per (variant, shape), the
   kernel functions that carry ``focus`` of the GPU time; ncu's ``-k`` keeps only them.
3. The sweep's plan is rewritten (:func:`focused`, the engine's rewrite phase) and runs as
   usual into ``DIR``, its manifest recording the focus; reading ``DIR`` adds the
   timeline's rows for every other kernel (:mod:`torch_nsight.report.focused_kernels`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from torch_nsight.collect.parent.engine import child_env
from torch_nsight.collect.shared import job as jobs
from torch_nsight.errors import ShapeFailedError

if TYPE_CHECKING:
    from torch_nsight.collect.parent.plan import SweepPlan

logger = logging.getLogger(__name__)

FIRST_LOOK_MODULE = "torch_nsight.collect.child.first_look"


def focused(plan: SweepPlan) -> SweepPlan:
    """Run the timeline child, choose the kernels: the plan rewritten to profile only them
    (ncu's ``-k``), its manifest recording the focus; the engine launches it.

    Raises:
        ShapeFailedError: the timeline pass failed (its output is in the message).
    """
    from torch_nsight.loading import load
    from torch_nsight.report.focused_kernels import (
        TIMELINE_FOLDER,
        focus_set,
        kernel_filter,
    )

    assert plan.focus is not None
    folder = plan.work / TIMELINE_FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    private = jobs.make_private_dir()
    try:
        assignment = jobs.Assignment(list(range(len(plan.job.shapes))), str(private / "status"),
                                     str(private / "result"), jobs.parent_sys_path(),
                                     "first-look")
        path = jobs.write_job(jobs.serialize_job(plan.job, private), assignment, private)
        visible = plan.visible[0] if plan.visible else None
        if not plan.quiet:
            logger.warning("torch_nsight: focus=%s: recording a timeline first", plan.focus)
        items = max(len(plan.job.shapes) * len(plan.job.variants), 1)
        done = subprocess.run([sys.executable, "-m", FIRST_LOOK_MODULE, str(path), str(folder)],
                              env=child_env(visible), cwd=os.getcwd(), capture_output=True,
                              text=True, timeout=plan.timeout * items + 300)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if done.returncode != 0:
        raise ShapeFailedError(
            f"the timeline pass of focus={plan.focus} failed (exit {done.returncode}): "
            + (done.stderr.strip().splitlines() or ["no output"])[-1])
    first = load(folder, cache=False)
    names, filters, carried = focus_set(first.kernels, float(plan.focus))
    logger.info("focus=%s: %d kernel functions carry %.1f%% of GPU time", plan.focus,
                len(names), 100 * carried)
    ncu_args = [*plan.ncu_args, "-k", kernel_filter(filters)]
    return dataclasses.replace(
        plan, ncu_args=ncu_args, focus=None, entered=time.time(),
        options={**plan.options, "ncu_args": ncu_args, "focus": plan.focus,
                 "focused_kernels": names, "focus_share": carried})
