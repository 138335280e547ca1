"""The sweep's child process, started as ``python -m torch_nsight.collect.child.start
<job-file>`` (which starts CUDA on a thread, then calls :func:`main`).

Run under ``ncu`` (or alone, for a dry run). It first applies the parent's global PyTorch
settings (TF32, cuDNN, SDPA backends). For each variant it builds the model (factory or
unpickled module), moves it to the device and dtype and instruments it (its range emitter is
a :class:`~torch_nsight.capture.calls.recorder.CallRecorder` around a
:class:`~torch_nsight.capture.replicas.replica.ReplicaMarkers`); for each of its shapes it builds the
inputs, runs the warm-up iterations (outside any profiled range), records the calls table in
one more un-profiled iteration, checks identical siblings (see
:mod:`torch_nsight.capture.replicas.siblings`), then runs each measured
iteration inside the start/end ranges ``measure`` and ``sweep;variant=...;shape=...;run=i``
(domain ``torch_nsight``) that the ``ncu`` command's ``--nvtx-include`` selects.

A shape that raises (out of memory, a shape error) is recorded and the next one runs. The
result JSON is rewritten after every shape, so a child stopped half-way still says what it
did. Signals from the parent: SIGINT stops the current shape (its timeout) and goes on;
SIGTERM stops the sweep, after which ``ncu`` writes the report of what was profiled.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Mapping
from typing import Any

import nvtx
import torch
from torch import nn

from torch_nsight.capture import instrument
from torch_nsight.capture.calls.recorder import CallRecorder
from torch_nsight.capture.calls.settings import apply_settings, describe_settings, read_settings
from torch_nsight.capture.compiled.inductor import is_compiled, measured_window
from torch_nsight.capture.replicas.replica import ReplicaMarkers
from torch_nsight.capture.replicas.siblings import check_siblings
from torch_nsight.collect.child.iteration import (
    build_inputs,
    describe_outputs,
    model_dtype,
    run_step,
)
from torch_nsight.collect.shared.job import Assignment, Job, read_job
from torch_nsight.collect.shared.timing import process_start_time, timed
from torch_nsight.formats import write_json
from torch_nsight.naming import DOMAIN, MEASURE_MESSAGE, format_measure_range
from torch_nsight.status import StatusWriter

logger = logging.getLogger(__name__)

RESULT_FORMAT = 1


def ran_with() -> dict[str, Any]:
    """The global PyTorch settings in force now, with their one-line summary."""
    settings = read_settings()
    return {**settings, "summary": describe_settings(settings)}


class StopRequested(BaseException):
    """Raised in the child by SIGTERM: stop the sweep, keep what was done."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise StopRequested()


class JobRunner:
    """Runs this child's share of a job and records what happened."""

    def __init__(self, assignment: Assignment, job: Job,
                 stamps: dict[str, float | None] | None = None) -> None:
        self.assignment = assignment
        self.job = job
        self.status = StatusWriter(assignment.status_path)
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda") if self.cuda else torch.device("cpu")
        self.dtype = getattr(torch, job.dtype) if job.dtype else None
        self.markers: Any = None  # the ReplicaMarkers the model is instrumented with
        self.recorder: Any = None  # the CallRecorder around them
        self.items: list[dict[str, Any]] = [
            {"variant": variant, "shape": job.shapes[i][0], "shape_index": i,
             "status": "pending", "error": None, "elapsed_s": None}
            for variant in job.variants for i in assignment.shape_indices]
        self.result: dict[str, Any] = {
            "format": RESULT_FORMAT, "pid": os.getpid(), "device": self._device_name(),
            "torch": torch.__version__, "items": self.items, "finished": False,
            "timing": dict(stamps or {}), "build_s": {}}
        self.result["timing"]["cuda_ready"] = time.time()  # _device_name started CUDA

    def _device_name(self) -> str:
        if not self.cuda:
            return "cpu"
        return f"cuda ({torch.cuda.get_device_name(0)})"

    def save(self) -> None:
        """Write the result JSON as it stands."""
        write_json(self.assignment.result_path, self.result)

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def _cleanup(self, model: Any = None) -> None:
        if model is not None:
            with contextlib.suppress(Exception):
                model.zero_grad(set_to_none=True)
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def run(self) -> None:
        """Run every (variant, shape) of this child's share."""
        self.status.emit("start", pid=os.getpid(), items=len(self.items),
                         device=self.result["device"])
        self.save()
        try:
            for variant, spec in self.job.variants.items():
                mine = [item for item in self.items if item["variant"] == variant]
                try:
                    with timed(self.result["build_s"], variant):
                        model = self._build(spec)
                except Exception as err:
                    for item in mine:
                        self._fail(item, "failed", f"building the model failed: "
                                   f"{type(err).__name__}: {err}", traceback.format_exc())
                    continue
                if "settings" not in self.result:  # what the model runs with, factory included
                    self.result["settings"] = ran_with()
                self.markers = ReplicaMarkers()
                self.recorder = CallRecorder(self.markers)
                with instrument(model, ops=self.job.ops, enabled=True, emitter=self.recorder):
                    for item in mine:
                        try:
                            self._run_item(model, item)
                        except KeyboardInterrupt:  # a timeout signal that came late
                            logger.warning("an interrupt arrived between shapes; ignored")
                del model
                if mine and mine[-1] is not self.items[-1]:
                    self._cleanup()
        except StopRequested:
            for item in self.items:
                if item["status"] in ("pending", "running"):
                    stopped = item["status"] == "running"
                    self._fail(item, "stopped" if stopped else "skipped",
                               "the sweep was stopped by the parent (timeout or interrupt)"
                               if stopped else "not run: the sweep was stopped before it")
        self.result["finished"] = True
        self.result["timing"]["done"] = time.time()
        self.save()
        self.status.emit("done")

    def _fail(self, item: dict[str, Any], status: str, error: str, trace: str | None = None
              ) -> None:
        item.update(status=status, error=error, traceback=trace)
        self.status.emit("item_end", index=self.items.index(item), variant=item["variant"],
                         shape=item["shape"], status=status, error=error)
        self.save()

    def _build(self, spec: Any) -> Any:
        if isinstance(spec, nn.Module):
            model = spec  # an unpickled instance: moved as it is
        else:
            # Factories build on the target device (torch.device sets the default device of
            # factory functions): no CPU initialisation followed by a copy.
            with self.device:
                model = spec()
        if not isinstance(model, nn.Module):
            raise TypeError(f"the factory returned {type(model).__name__}, not an nn.Module")
        return model.to(device=self.device, dtype=self.dtype)

    def _run_item(self, model: Any, item: dict[str, Any]) -> None:
        job = self.job
        index = self.items.index(item)
        label = item["shape"]
        shape = job.shapes[item["shape_index"]][1]
        item["status"] = "running"
        self.status.emit("item_start", index=index, variant=item["variant"], shape=label)
        started = time.perf_counter()
        args: Any = None
        kwargs: Any = None
        phases = item["phases_s"] = {}

        def phase(name: str) -> Any:  # timed, and told to the parent (what a hang was doing)
            self.status.emit("phase", index=index, phase=name)
            return timed(phases, name)
        try:
            with phase("warmup"):
                torch.manual_seed(0)
                args, kwargs = build_inputs(job, shape, self.device,
                                            self.dtype or model_dtype(model))
                for _ in range(job.warmup):
                    run_step(model, args, kwargs, job.backward, self.markers)
                self._sync()
            compiled = is_compiled(model)
            if job.record_calls and not compiled:  # a dispatch mode would undo the compile
                with phase("calls"):
                    item["calls"] = self._record_calls(model, args, kwargs)
            replicas: list[str] = []
            if job.replicate and compiled:
                item["replication"] = {"status": "skipped", "groups": [], "mismatches": [],
                                       "error": "a compiled model: every module is profiled"}
            elif job.replicate:
                with phase("check"):
                    item["replication"] = self._check(model, args, kwargs)
                replicas = [r for g in item["replication"]["groups"] for r in g["replicas"]]
            with phase("measure"):
                for run in range(job.runs):
                    out = self._measure(model, args, kwargs, item["variant"], label, run,
                                        replicas)
            item["outputs"] = describe_outputs(out)
            del out
            item.update(status="ok", runs=job.runs)
        except KeyboardInterrupt:
            item.update(status="timeout", error="stopped by the parent at the per-shape timeout")
        except StopRequested:
            item["elapsed_s"] = round(time.perf_counter() - started, 3)
            raise
        except Exception as err:
            item.update(status="failed", error=f"{type(err).__name__}: {err}",
                        traceback=traceback.format_exc(limit=-8))  # the frames nearest the error
        finally:
            del args, kwargs
            if item is not self.items[-1]:  # the process ends after the last: no need
                with timed(phases, "cleanup"):
                    self._cleanup(model)
        item["elapsed_s"] = round(time.perf_counter() - started, 3)
        self.status.emit("item_end", index=index, variant=item["variant"], shape=label,
                         status=item["status"], error=item["error"],
                         elapsed_s=item["elapsed_s"])
        self.save()

    def _record_calls(self, model: Any, args: Any, kwargs: Any) -> list[dict[str, Any]]:
        """The calls table of one un-profiled iteration (empty if recording fails)."""
        try:
            self.recorder.clear()  # this shape's calls only
            with self.recorder.recording():
                run_step(model, args, kwargs, self.job.backward, self.markers)
            self._sync()
            return [{**row, "range_stack": list(row["range_stack"])}
                    for row in self.recorder.rows()]
        except (KeyboardInterrupt, StopRequested):
            raise
        except Exception as err:  # the calls table is extra information: keep profiling
            logger.warning("recording the calls table failed (%s): profiling without it", err)
            return []

    def _check(self, model: Any, args: Any, kwargs: Any) -> dict[str, Any]:
        try:
            return check_siblings(
                model, lambda: run_step(model, args, kwargs, self.job.backward, self.markers),
                backward=self.job.backward, cuda=self.cuda)
        except (KeyboardInterrupt, StopRequested):
            raise
        except Exception as err:  # the check is an optimisation: profile everything instead
            logger.warning("sibling check failed (%s): profiling every module", err)
            return {"status": "error", "groups": [], "mismatches": [],
                    "error": f"{type(err).__name__}: {err}"}

    def _measure(self, model: Any, args: Any, kwargs: Any, variant: str, label: str, run: int,
                 replicas: list[str]) -> Any:
        message = format_measure_range(variant=variant, shape=label, run=run)
        markers = self.markers.marking(replicas) if replicas else contextlib.nullcontext()
        self._sync()
        with markers, measured_window():
            ranges = [nvtx.start_range(MEASURE_MESSAGE, domain=DOMAIN),
                      nvtx.start_range(message, domain=DOMAIN)]
            try:
                out = run_step(model, args, kwargs, self.job.backward, self.markers)
                self._sync()
            finally:
                for handle in reversed(ranges):
                    nvtx.end_range(handle)
        return out


def main(argv: list[str] | None = None, early_cuda: Mapping[str, object] | None = None) -> int:
    """Entry point of the child. Returns its exit status (0 when results were written).

    ``early_cuda``: how :mod:`~torch_nsight.collect.child.start` started CUDA on a thread
    while this process imported (kept in the result's ``early_cuda``)."""
    stamps: dict[str, float | None] = {"process_start": process_start_time(),
                                       "imported": time.time()}
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m torch_nsight.collect.child.worker <job-file>\n")
        return 2
    logging.basicConfig(level=logging.WARNING, format="torch_nsight child: %(message)s")
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        assignment, job = read_job(args[0])
    except Exception as err:
        sys.stderr.write(f"torch_nsight child: could not read the job {args[0]}: "
                         f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
        return 3
    stamps["job_read"] = time.time()
    skipped = apply_settings(job.settings)
    if skipped:
        logger.info("settings this torch lacks, not applied: %s", ", ".join(skipped))
    stamps["settings_applied"] = time.time()
    runner = JobRunner(assignment, job, stamps)
    if early_cuda is not None:  # the thread's own record, filled in when it ends
        runner.result["early_cuda"] = early_cuda
    try:
        runner.run()
    except BaseException as err:  # record why, for the parent, then let it end the process
        runner.result.update(fatal=f"{type(err).__name__}: {err}",
                             traceback=traceback.format_exc())
        runner.save()
        raise
    return 0


def exit_now(code: int) -> None:
    """End the child at once, its output flushed: the results are written, and the
    interpreter's teardown (torch, CUDA) would only delay ``ncu``'s report by a second."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
