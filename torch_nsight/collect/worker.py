"""The sweep's child process: ``python -m torch_nsight.collect.worker <job-file>``.

Run under ``ncu`` (or alone, for a dry run). For each variant it builds the model (factory
or unpickled module), moves it to the device and dtype and instruments it (its range
emitter is a :class:`~torch_nsight.collect.replicate.ReplicaMarkers`); for each of its
shapes it builds the inputs, runs the warm-up iterations (outside any profiled range), checks
identical siblings (see :mod:`torch_nsight.collect.replicate`), then runs each measured
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
import json
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch_nsight.collect.job import Assignment, Job, read_job
from torch_nsight.collect.progress import StatusWriter
from torch_nsight.naming import DOMAIN, MEASURE_MESSAGE, format_measure_range, op_message

logger = logging.getLogger(__name__)

RESULT_FORMAT = 1
# The op range around the loss gradient of a backward sweep (module "(unattributed)").
LOSS_MESSAGE = op_message("loss")


class StopRequested(BaseException):
    """Raised in the child by SIGTERM: stop the sweep, keep what was done."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise StopRequested()


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, target)


def describe_outputs(value: Any) -> Any:
    """Shapes and dtypes of a model output (tensors, tuples, dicts), for the result JSON."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, (list, tuple)):
        return [describe_outputs(v) for v in value]
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): describe_outputs(v) for k, v in value.items()}
    return type(value).__name__


def _tensors(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict) or hasattr(value, "items"):
        for item in value.values():
            yield from _tensors(item)


def _to_device(value: Any, device: Any, dtype: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        cast = dtype if dtype is not None and value.is_floating_point() else None
        return value.to(device=device, dtype=cast)
    if isinstance(value, tuple):
        return tuple(_to_device(v, device, dtype) for v in value)
    if isinstance(value, list):
        return [_to_device(v, device, dtype) for v in value]
    if isinstance(value, dict):
        return {k: _to_device(v, device, dtype) for k, v in value.items()}
    return value


def model_dtype(model: Any) -> Any:
    """The dtype of the model's first floating-point parameter (float32 if none)."""
    import torch

    for param in model.parameters():
        if param.is_floating_point():
            return param.dtype
    return torch.float32


def build_inputs(job: Job, shape: Any, device: Any, dtype: Any) -> tuple[tuple[Any, ...],
                                                                         dict[str, Any]]:
    """Return (args, kwargs) for one call of the model at ``shape``, on ``device``.

    Floating-point inputs from ``make_inputs`` are cast only when the sweep names a dtype.
    """
    import torch

    if job.make_inputs is None:
        value: Any = torch.randn(tuple(shape) if not isinstance(shape, int) else (shape,),
                                 dtype=dtype, device=device)
    else:
        value = _to_device(job.make_inputs(shape), device,
                           dtype if job.dtype is not None else None)
    if isinstance(value, dict):
        return (), value
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    return (value,), {}


def run_step(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], backward: bool,
             emitter: Any = None) -> Any:
    """One iteration: forward, and backward of ``sum(mean(float(output)))`` if asked.

    The loss is not built as a graph: its gradient with respect to each output that needs
    one (``1 / numel`` in the output's dtype, what the loss graph would pass back) is made
    directly, inside the op range :data:`LOSS_MESSAGE` when ``emitter`` is given, and
    backward starts at the model's outputs. Every kernel of the iteration is then inside a
    module range or that op range (autograd would run the loss graph's backward on its own
    thread, before any module range opens there).

    Args:
        emitter: Where the loss range goes (push/pop), or None for no range.

    Raises:
        ValueError: ``backward`` but no output needs a gradient.
    """
    import torch

    if not backward:
        with torch.no_grad():
            return model(*args, **kwargs)
    out = model(*args, **kwargs)
    outputs = [t for t in _tensors(out) if t.requires_grad]
    if not outputs:
        raise ValueError("backward=True but no output of the model needs a gradient")
    if emitter is not None:
        emitter.push(LOSS_MESSAGE)
    try:
        grads = [torch.full_like(t, 1.0 / t.numel()) for t in outputs]
    finally:
        if emitter is not None:
            emitter.pop()
    torch.autograd.backward(outputs, grads)
    model.zero_grad(set_to_none=True)
    return out


class JobRunner:
    """Runs this child's share of a job and records what happened."""

    def __init__(self, assignment: Assignment, job: Job) -> None:
        import torch

        self.assignment = assignment
        self.job = job
        self.status = StatusWriter(assignment.status_path)
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda") if self.cuda else torch.device("cpu")
        self.dtype = getattr(torch, job.dtype) if job.dtype else None
        self.markers: Any = None  # the ReplicaMarkers the model is instrumented with
        self.items: list[dict[str, Any]] = [
            {"variant": variant, "shape": job.shapes[i][0], "shape_index": i,
             "status": "pending", "error": None, "elapsed_s": None}
            for variant in job.variants for i in assignment.shape_indices]
        self.result: dict[str, Any] = {
            "format": RESULT_FORMAT, "pid": os.getpid(), "device": self._device_name(),
            "torch": torch.__version__, "items": self.items, "finished": False}

    def _device_name(self) -> str:
        import torch

        if not self.cuda:
            return "cpu"
        return f"cuda ({torch.cuda.get_device_name(0)})"

    def save(self) -> None:
        """Write the result JSON as it stands."""
        write_json(self.assignment.result_path, self.result)

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def _cleanup(self, model: Any = None) -> None:
        if model is not None:
            with contextlib.suppress(Exception):
                model.zero_grad(set_to_none=True)
        gc.collect()
        if self.cuda:
            import torch

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
                    model = self._build(spec)
                except Exception as err:
                    for item in mine:
                        self._fail(item, "failed", f"building the model failed: "
                                   f"{type(err).__name__}: {err}", traceback.format_exc())
                    continue
                from torch_nsight.capture import instrument
                from torch_nsight.collect.replicate import ReplicaMarkers

                self.markers = ReplicaMarkers()
                with instrument(model, ops=self.job.ops, enabled=True, emitter=self.markers):
                    for item in mine:
                        try:
                            self._run_item(model, item)
                        except KeyboardInterrupt:  # a timeout signal that came late
                            logger.warning("an interrupt arrived between shapes; ignored")
                del model
                self._cleanup()
        except StopRequested:
            for item in self.items:
                if item["status"] in ("pending", "running"):
                    stopped = item["status"] == "running"
                    self._fail(item, "stopped" if stopped else "skipped",
                               "the sweep was stopped by the parent (timeout or interrupt)"
                               if stopped else "not run: the sweep was stopped before it")
        self.result["finished"] = True
        self.save()
        self.status.emit("done")

    def _fail(self, item: dict[str, Any], status: str, error: str, trace: str | None = None
              ) -> None:
        item.update(status=status, error=error, traceback=trace)
        self.status.emit("item_end", index=self.items.index(item), variant=item["variant"],
                         shape=item["shape"], status=status, error=error)
        self.save()

    def _build(self, spec: Any) -> Any:
        from torch import nn

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
        try:
            import torch

            torch.manual_seed(0)
            args, kwargs = build_inputs(job, shape, self.device, self.dtype or model_dtype(model))
            for _ in range(job.warmup):
                run_step(model, args, kwargs, job.backward, self.markers)
            self._sync()
            replicas: list[str] = []
            if job.replicate:
                item["replication"] = self._check(model, args, kwargs)
                replicas = [r for g in item["replication"]["groups"] for r in g["replicas"]]
            for run in range(job.repeats):
                out = self._measure(model, args, kwargs, item["variant"], label, run, replicas)
            item["outputs"] = describe_outputs(out)
            del out
            item.update(status="ok", runs=job.repeats)
        except KeyboardInterrupt:
            item.update(status="timeout", error="stopped by the parent at the per-shape timeout")
        except StopRequested:
            item["elapsed_s"] = round(time.perf_counter() - started, 3)
            raise
        except Exception as err:
            item.update(status="failed", error=f"{type(err).__name__}: {err}",
                        traceback=traceback.format_exc(limit=8))
        finally:
            del args, kwargs
            self._cleanup(model)
        item["elapsed_s"] = round(time.perf_counter() - started, 3)
        self.status.emit("item_end", index=index, variant=item["variant"], shape=label,
                         status=item["status"], error=item["error"],
                         elapsed_s=item["elapsed_s"])
        self.save()

    def _check(self, model: Any, args: Any, kwargs: Any) -> dict[str, Any]:
        from torch_nsight.collect.replicate import check_siblings

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
        import nvtx

        message = format_measure_range(variant=variant, shape=label, run=run)
        markers = self.markers.marking(replicas) if replicas else contextlib.nullcontext()
        self._sync()
        with markers:
            ranges = [nvtx.start_range(MEASURE_MESSAGE, domain=DOMAIN),
                      nvtx.start_range(message, domain=DOMAIN)]
            try:
                out = run_step(model, args, kwargs, self.job.backward, self.markers)
                self._sync()
            finally:
                for handle in reversed(ranges):
                    nvtx.end_range(handle)
        return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child. Returns its exit status (0 when results were written)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m torch_nsight.collect.worker <job-file>\n")
        return 2
    logging.basicConfig(level=logging.WARNING, format="torch_nsight child: %(message)s")
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        assignment, job = read_job(args[0])
    except Exception as err:
        sys.stderr.write(f"torch_nsight child: could not read the job {args[0]}: "
                         f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
        return 3
    runner = JobRunner(assignment, job)
    try:
        runner.run()
    except BaseException as err:  # record why, for the parent, then let it end the process
        runner.result.update(fatal=f"{type(err).__name__}: {err}",
                             traceback=traceback.format_exc())
        runner.save()
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
