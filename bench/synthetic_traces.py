"""Traces of PyTorch's profiler with the shapes that stress a reader: many distinct kernel
names, deep nesting, many distinct module names.

    python bench/synthetic_traces.py names 1000000 OUT.json
    python bench/synthetic_traces.py depth 100000 OUT.json
    python bench/synthetic_traces.py modules 300000 OUT.json

Each event is written as the recorded traces in ``tests/data`` hold it
(``tests/data/timeline_train/trace-0.json.gz``, a GPT-2 step under
:func:`torch_nsight.timeline`): the measured iteration and the module ranges as ``cpu_op``
events named ``torch_nsight/sweep;variant=;shape=...;run=N`` and ``torch_nsight/fwd:NAME``,
each kernel launched by a ``cudaLaunchKernel`` (``cuda_runtime``) on the same thread with
its correlation id, the ``ac2g`` flow pair, and the ``kernel`` event on stream 7 with its
grid, block and registers; ``deviceProperties`` of an H200.

* ``names N``: one run, one model range, N kernels each of its own name (a template
  instantiation ``void bench::kernel_<i><float>(int, float*)``).
* ``depth D``: one run, D module ranges each nested in the one before (``fwd:m0`` >
  ``fwd:m1`` > ...), a kernel at the innermost.
* ``modules N``: about N events over steps of a model whose blocks hold many distinct
  module names (``blocks.<b>.experts.<e>.proj_<k>``), as a mixture of experts with
  thousands of experts is named: N/9 kernels, each in a module range of its own name
  inside its block's range, repeated over 3 runs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

_PID, _THREAD, _STREAM = 428, 428, 7
_DEVICE = [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320,
            "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
            "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}]
_HEAD = {"schemaVersion": 1, "deviceProperties": _DEVICE, "cuda_driver_version": 13000,
         "cuda_runtime_version": 13000, "cupti_version": 130001, "displayTimeUnit": "ms",
         "baseTimeNanoseconds": 1790857026000000000}


class _Writer:
    """Events written one by one; a clock in µs that each event moves on."""

    def __init__(self, file: TextIO) -> None:
        self.file, self.count, self.now, self.correlation = file, 0, 1000.0, 100
        self.gpu = 1000.0

    def event(self, event: dict[str, Any]) -> None:
        self.file.write((",\n" if self.count else "") + json.dumps(event))
        self.count += 1

    def cpu(self, name: str, start: float, end: float) -> None:
        self.event({"ph": "X", "cat": "cpu_op", "name": name, "pid": _PID, "tid": _THREAD,
                    "ts": round(start, 3), "dur": round(end - start, 3),
                    "args": {"External id": self.count, "Record function id": 0}})

    def launch(self, kernel: str) -> None:
        """A kernel launched now: the call, its flow pair and the kernel (4 events)."""
        self.correlation += 1
        call, self.now = self.now, self.now + 3.0
        self.gpu = max(self.gpu, call + 4.0)
        self.event({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                    "pid": _PID, "tid": _THREAD, "ts": round(call, 3), "dur": 2.5,
                    "args": {"External id": self.count, "cbid": 211,
                             "correlation": self.correlation}})
        self.event({"ph": "s", "id": self.correlation, "pid": _PID, "tid": _THREAD,
                    "ts": round(call, 3), "cat": "ac2g", "name": "ac2g"})
        self.event({"ph": "f", "id": self.correlation, "pid": 0, "tid": _STREAM,
                    "ts": round(self.gpu, 3), "cat": "ac2g", "name": "ac2g", "bp": "e"})
        self.event({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": _STREAM,
                    "ts": round(self.gpu, 3), "dur": 5.0,
                    "args": {"External id": self.count, "queued": 0, "device": 0,
                             "context": 1, "stream": _STREAM,
                             "correlation": self.correlation, "registers per thread": 32,
                             "shared memory": 0, "grid": [1024, 1, 1],
                             "block": [128, 1, 1]}})
        self.gpu += 6.0


def _run_name(run: int, shape: str = "1x8") -> str:
    return f"torch_nsight/sweep;variant=;shape={shape};run={run}"


def _kernel(i: int) -> str:
    return f"void bench::kernel_{i}<float>(int, float*)"


def _names(out: _Writer, kernels: int) -> None:
    start = out.now
    out.now += 1.0
    model = out.now
    for i in range(kernels):
        out.launch(_kernel(i))
    out.cpu("torch_nsight/fwd:Net", model, out.now + 1.0)
    out.cpu(_run_name(0), start, out.now + 2.0)


def _depth(out: _Writer, depth: int) -> None:
    start = out.now
    out.now += 0.01
    starts = []
    for _ in range(depth):
        out.now += 0.01
        starts.append(out.now)
    out.launch("void bench::innermost<float>(int, float*)")
    for level in reversed(range(depth)):  # the innermost range ends first
        out.now += 0.01
        out.cpu(f"torch_nsight/fwd:m{level}", starts[level], out.now)
    out.cpu(_run_name(0), start, out.now + 1.0)


def _modules(out: _Writer, events: int, runs: int = 3, per_block: int = 64) -> None:
    kernels = max(1, events // 9 // runs)  # 1 module range + 4 launch events ~ per kernel
    blocks = max(1, kernels // per_block)
    for run in range(runs):
        start = out.now
        out.now += 1.0
        model = out.now
        for block in range(blocks):
            block_start = out.now
            for k in range(per_block):
                begin = out.now
                out.now += 0.1
                out.launch(_kernel(k % 8))
                out.launch(_kernel(8 + k % 8))
                out.cpu(f"torch_nsight/fwd:blocks.{block}.experts.{k}.proj_{block % 7}",
                        begin, out.now)
            out.cpu(f"torch_nsight/fwd:blocks.{block}", block_start, out.now + 0.5)
            out.now += 1.0
        out.cpu("torch_nsight/fwd:MoE", model, out.now)
        out.cpu(_run_name(run), start, out.now + 1.0)
        out.now += 50.0


SHAPES = {"names": _names, "depth": _depth, "modules": _modules}


def write_trace(shape: str, size: int, path: Path) -> Path:
    """Write the synthetic trace ``shape`` (a key of :data:`SHAPES`) of ``size`` to
    ``path`` (plain JSON)."""
    with open(path, "w", encoding="utf-8") as file:
        file.write(json.dumps(_HEAD)[:-1] + ', "traceEvents": [\n')
        writer = _Writer(file)
        SHAPES[shape](writer, size)
        file.write("\n]}\n")
    return path


def events(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a written trace (for tests of this generator)."""
    with open(path, encoding="utf-8") as file:
        yield from json.load(file)["traceEvents"]


if __name__ == "__main__":
    write_trace(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
