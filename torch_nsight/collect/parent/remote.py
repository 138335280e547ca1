"""Sweep children through an executor: one job per (variant, shape) group, on any engine.

``sweep(..., executor=...)`` hands each child's command to an object with
``submit(fn, *args)`` returning something with ``done()`` and ``result()``: a
``concurrent.futures`` executor (``ProcessPoolExecutor``), dask's
``Client.get_executor()``, submitit's ``AutoExecutor`` (Slurm job arrays), Ray's... The job
(:func:`run_spec`, importable by reference on the worker) runs the child's command there —
``ncu ... python -m torch_nsight.collect.child.start JOB`` — with the GPU the worker was
given, and writes the report, result and status files into the sweep's output directory,
which must be on a filesystem the workers share. A job that fails or whose worker dies is
recorded like a failing shape; the others are kept.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch_nsight.collect.parent.launch import ChildOutcome, ChildSpec, load_results
from torch_nsight.collect.parent.progress import Progress
from torch_nsight.collect.shared.ncu import NcuOutput

logger = logging.getLogger(__name__)

POLL_S = 0.5
#: Environment variables of the parent a worker's child must not inherit: the worker has
#: its own GPU and its own Python.
WORKER_OWN = ("CUDA_VISIBLE_DEVICES",)


def run_spec(command: Sequence[str], env: dict[str, str], cwd: str, timeout: float,
             log_path: str | None) -> dict[str, Any]:
    """Run one child's command on this worker (a job of an executor).

    Args:
        command: the child's argument list.
        env: variables to set over the worker's own environment (the parent's
            ``CUDA_VISIBLE_DEVICES`` is not carried unless the sweep chose devices).
        cwd: working directory (the parent's: user modules import from it).
        timeout: seconds before the child is stopped.
        log_path: where to keep its output, or None.

    Returns:
        ``returncode`` (None when stopped), ``output`` (its text), ``seconds``, ``stopped``.
    """
    full = {**os.environ, **env}
    start = time.monotonic()
    launched_at = time.time()
    stopped = None
    try:
        done = subprocess.run(list(command), env=full, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        code, stopped = None, f"it ran past its {timeout:.0f} s timeout"
        output = (err.stdout or "") + (err.stderr or "") if isinstance(err.stdout, str) else ""
    if log_path:
        Path(log_path).write_text(output, encoding="utf-8")
    return {"returncode": code, "output": output, "stopped": stopped,
            "seconds": round(time.monotonic() - start, 3), "launched_at": launched_at,
            "ended_at": time.time()}


def _env(spec: ChildSpec, chose_devices: bool) -> dict[str, str]:
    """What a worker's child needs from the parent's environment: torch_nsight importable,
    unbuffered output, and the device only where the sweep chose one."""
    keep = {k: v for k, v in spec.env.items() if k in ("PYTHONPATH", "PYTHONUNBUFFERED")}
    if chose_devices and "CUDA_VISIBLE_DEVICES" in spec.env:
        keep["CUDA_VISIBLE_DEVICES"] = spec.env["CUDA_VISIBLE_DEVICES"]
    return keep


def run_with_executor(specs: list[ChildSpec], executor: Any, *, item_timeout: float,
                      startup_s: float, cwd: str, chose_devices: bool,
                      progress: Progress | None = None) -> list[ChildOutcome]:
    """Submit every child to ``executor`` and wait for all; return how each ended.

    Args:
        specs: the children (one per (variant, shape) group).
        executor: an object with ``submit(fn, *args)`` (see the module docstring).
        item_timeout: seconds per (variant, shape) item.
        startup_s: seconds allowed on top of ``item_timeout`` x items per child.
        cwd: the children's working directory (as the parent sees it).
        chose_devices: the sweep named GPUs, which the jobs then carry.
        progress: the progress bar (None: none).

    Returns:
        One outcome per spec, in order.

    Raises:
        TypeError: ``executor`` has no ``submit``.
    """
    if not callable(getattr(executor, "submit", None)):
        raise TypeError("executor must have a submit(fn, *args) method (a concurrent.futures "
                        f"Executor, dask's Client.get_executor(), submitit...), got "
                        f"{type(executor).__name__}")
    futures = [executor.submit(run_spec, spec.command, _env(spec, chose_devices), cwd,
                               item_timeout * spec.items + startup_s,
                               str(spec.log_path) if spec.log_path else None)
               for spec in specs]
    answers: dict[int, dict[str, Any]] = {}
    while len(answers) < len(futures):
        for index, future in enumerate(futures):
            if index in answers or not future.done():
                continue
            try:
                answers[index] = future.result()
            except Exception as err:  # noqa: BLE001 - a lost worker is one failed job
                logger.warning("job %s failed on its worker: %s: %s", specs[index].name,
                               type(err).__name__, err)
                answers[index] = {"returncode": None, "output": "",
                                  "stopped": f"its worker failed: {type(err).__name__}: {err}",
                                  "seconds": 0.0}
        if progress is not None:
            done = sum(specs[i].items for i in answers)
            progress.update(done=done, failed=0, kernels=0, current=[])
        if len(answers) < len(futures):
            time.sleep(POLL_S)
    if progress is not None:
        progress.close()
    outcomes = []
    for index, spec in enumerate(specs):
        answer = answers[index]
        output = NcuOutput()
        for line in answer["output"].splitlines():
            output.feed(line)
        outcomes.append(ChildOutcome(spec, answer["returncode"], output,
                                     load_results(spec.result_path), answer["stopped"],
                                     answer["seconds"], answer.get("launched_at"),
                                     answer.get("ended_at")))
    return outcomes
