"""Peaks of known GPUs by name, for reports that hold no device peaks of their own.

A report recorded with durations only (``--metric-set duration``, or ``ncu --metrics
gpu__time_duration.sum`` by hand) names its GPU but carries none of the per-cycle peaks and
clocks the roofline multiplies. Its FLOPs still come from the calls table, so with a peak it
still gets a compute ceiling and a gain. The peaks here are the dense per-SM per-cycle rates
of each architecture times the GPU's SM count and its maximum boost clock. Nsight Compute's
per-cycle peaks are the same rates (checked on every H200 report in tests/data); at the
clocks kernels ran at (1.73-2.02 GHz measured there) its bf16 tensor peak is 0-9% under the
table's 1,070 TFLOP/s, so a gain from the table errs small.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Dense FLOPs per SM per cycle, per precision (``PRECISIONS``'s names), per compute
#: capability: NVIDIA's architecture whitepapers (Hopper 9.0, Ampere GA100 8.0 and GA10x
#: 8.6, Ada 8.9).
PER_SM_CYCLE: dict[tuple[int, int], dict[str, float]] = {
    (9, 0): {"fp64": 128, "fp32": 256, "fp16": 256, "tensor_bf16": 4096,
               "tensor_fp16": 4096, "tensor_tf32": 2048, "tensor_fp8": 8192,
               "tensor_fp64": 256, "tensor_int8": 8192},
    (8, 0): {"fp64": 64, "fp32": 128, "fp16": 256, "tensor_bf16": 2048,
                  "tensor_fp16": 2048, "tensor_tf32": 1024, "tensor_fp64": 128,
                  "tensor_int8": 4096},
    (8, 6): {"fp64": 4, "fp32": 256, "fp16": 256, "tensor_bf16": 1024, "tensor_fp16": 1024,
               "tensor_tf32": 512, "tensor_int8": 2048},
    (8, 9): {"fp64": 4, "fp32": 256, "fp16": 256, "tensor_bf16": 1024, "tensor_fp16": 1024,
            "tensor_tf32": 512, "tensor_fp8": 2048, "tensor_int8": 2048},
}


@dataclass(frozen=True)
class KnownGpu:
    """One GPU model: the names its driver gives it, its compute capability, SMs, boost
    clock and DRAM bandwidth."""

    names: tuple[str, ...]
    capability: tuple[int, int]
    sms: int
    boost_mhz: float
    dram_bytes_per_s: float

    def flops_per_s(self, precision: str) -> float | None:
        """Dense peak FLOP/s of ``precision`` at the boost clock; None if it has no such
        path."""
        rate = PER_SM_CYCLE[self.capability].get(precision)
        return None if rate is None else rate * self.sms * self.boost_mhz * 1e6


#: Each model by the exact names its driver reports (``cudaDeviceProp.name``, Nsight
#: Compute's device name), with or without the ``NVIDIA`` its older drivers left out. A name
#: is matched whole, never by a part of it: "RTX A1000 6" is no A100, "NVIDIA H200 NVL" (a
#: lower clock) no H200; a name not listed gets no peaks from the table (no ceiling, no
#: gain), never those of a bigger GPU.
KNOWN_GPUS: tuple[KnownGpu, ...] = (
    KnownGpu(("NVIDIA H100 PCIe",), (9, 0), 114, 1755, 2.0e12),
    KnownGpu(("NVIDIA H100 NVL",), (9, 0), 132, 1785, 3.9e12),
    KnownGpu(("NVIDIA H100 80GB HBM3", "NVIDIA H800"), (9, 0), 132, 1980, 3.35e12),
    KnownGpu(("NVIDIA H200",), (9, 0), 132, 1980, 4.8e12),
    KnownGpu(("NVIDIA A100 80GB PCIe",), (8, 0), 108, 1410, 1.935e12),
    KnownGpu(("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM-80GB"), (8, 0), 108, 1410,
             2.039e12),
    KnownGpu(("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"), (8, 0), 108, 1410,
             1.555e12),
    KnownGpu(("NVIDIA L40S",), (8, 9), 142, 2520, 0.864e12),
    KnownGpu(("NVIDIA L4",), (8, 9), 58, 2040, 0.3e12),
    KnownGpu(("NVIDIA A10",), (8, 6), 72, 1695, 0.6e12),
)


def _key(name: str) -> str:
    """A device name as the table is looked up: case and runs of spaces aside, without the
    leading ``NVIDIA``."""
    words = name.casefold().split()
    return " ".join(words[1:] if words[:1] == ["nvidia"] else words)


_BY_NAME: dict[str, KnownGpu] = {_key(name): gpu for gpu in KNOWN_GPUS for name in gpu.names}


def known_gpu(name: object) -> KnownGpu | None:
    """The table's entry for a device name such as ``NVIDIA H100 80GB HBM3``, matched
    whole; None when the name is not one of :data:`KNOWN_GPUS`' names."""
    if not isinstance(name, str):
        return None
    return _BY_NAME.get(_key(name))


#: Names whose peaks the table does not hold, by compute capability only (the occupancy
#: calculator needs no more).
FAMILIES = ((re.compile(r"\b(H100|H200|H800|GH200|H20)\b"), (9, 0)),
            (re.compile(r"\b(A100|A800|A30)\b"), (8, 0)),
            (re.compile(r"\b(B200|B100|GB200)\b"), (10, 0)))


def capability_of(name: object) -> tuple[int, int] | None:
    """The compute capability of a device by its name; None when unknown."""
    gpu = known_gpu(name)
    if gpu is not None:
        return gpu.capability
    if isinstance(name, str):
        return next((cap for pattern, cap in FAMILIES if pattern.search(name)), None)
    return None
