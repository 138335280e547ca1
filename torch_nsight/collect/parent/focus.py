"""``sweep(..., focus=0.9)``: a timeline pass first, then Nsight Compute only on the kernels
that carry the time.

1. The timeline runs in a child process (the parent never imports the user's model):
   ``python -m torch_nsight.collect.child.first_look JOB DIR/timeline``.
2. :func:`~torch_nsight.report.focus.focus_set` picks, per (variant, shape), the kernel
   functions that carry ``focus`` of the GPU time; ncu's ``-k`` keeps only them.
3. The sweep runs as usual into ``DIR``, its manifest recording the focus; reading ``DIR``
   adds the timeline's rows for every other kernel (:mod:`torch_nsight.report.focus`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_nsight.collect.parent.plan import child_env
from torch_nsight.collect.shared import job as jobs
from torch_nsight.collect.shared.arguments import check_variants, user_settings
from torch_nsight.errors import ShapeFailedError

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

FIRST_LOOK_MODULE = "torch_nsight.collect.child.first_look"


def _check_focus(focus: Any, ncu_args: Sequence[str]) -> None:
    if not isinstance(focus, (int, float)) or isinstance(focus, bool) or not 0 < focus <= 1:
        raise ValueError(f"focus must be a share of GPU time in (0, 1], e.g. 0.9; got {focus!r}")
    if any(a in ("-k", "--kernel-name") or a.startswith(("-k=", "--kernel-name="))
           for a in ncu_args):
        raise ValueError("focus chooses the kernels itself (ncu -k): leave -k out of ncu_args")


def focused_sweep(sweep: Callable[..., Profile], model: Any, shapes: Any, *, focus: float,
                  output_dir: str | os.PathLike[str] | None, ncu_args: Sequence[str],
                  devices: Sequence[int | str] | None, quiet: bool,
                  options: Mapping[str, Any]) -> Profile:
    """Run the timeline child, choose the kernels, run the focused sweep.

    Raises:
        ValueError: ``focus`` is out of range or ``ncu_args`` has a kernel filter.
        ShapeFailedError: the timeline pass failed (its output is in the message).
    """
    from torch_nsight.loading import load
    from torch_nsight.report.focus import TIMELINE_FOLDER, focus_set, kernel_filter

    _check_focus(focus, ncu_args)
    variants = check_variants(model)
    pairs = jobs.normalize_shapes(shapes)
    job = jobs.Job(variants=variants, shapes=pairs, make_inputs=options.get("make_inputs"),
                   backward=bool(options.get("backward")),
                   dtype=jobs.normalize_dtype(options.get("dtype")),
                   warmup=int(options.get("warmup", 2)), ops=options.get("ops", False),
                   settings=user_settings())
    work = (Path(output_dir).resolve() if output_dir is not None
            else Path(tempfile.mkdtemp(prefix="torch_nsight-sweep-")))
    folder = work / TIMELINE_FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    private = jobs.make_private_dir()
    try:
        assignment = jobs.Assignment(list(range(len(pairs))), str(private / "status"),
                                     str(private / "result"), jobs.parent_sys_path(),
                                     "first-look")
        path = jobs.write_job(jobs.serialize_job(job, private), assignment, private)
        visible = None if devices is None else str(list(devices)[0])
        if not quiet:
            logger.warning("torch_nsight: focus=%s: recording a timeline first", focus)
        done = subprocess.run([sys.executable, "-m", FIRST_LOOK_MODULE, str(path), str(folder)],
                              env=child_env(visible), cwd=os.getcwd(), capture_output=True,
                              text=True, timeout=float(options.get("timeout", 600.0))
                              * max(len(pairs) * len(variants), 1) + 300)
        if done.returncode != 0:
            raise ShapeFailedError(
                f"the timeline pass of focus={focus} failed (exit {done.returncode}): "
                + (done.stderr.strip().splitlines() or ["no output"])[-1])
        first = load(folder, cache=False)
        names, filters, carried = focus_set(first.kernels, float(focus))
        logger.info("focus=%s: %d kernel functions carry %.1f%% of GPU time", focus,
                    len(names), 100 * carried)
        profile = sweep(model, shapes, **options, ncu_args=[*ncu_args, "-k",
                                                            kernel_filter(filters)],
                        output_dir=work, devices=devices, quiet=quiet, focus=None,
                        _options={"focus": focus, "focused_kernels": names,
                                  "focus_share": carried})
    finally:
        shutil.rmtree(private, ignore_errors=True)
        if output_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return profile
