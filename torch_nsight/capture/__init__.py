"""Capture stage: hooks that put NVTX ranges around modules, their backward, and named ops.

Imports torch and nvtx, never pandas. Most users only call :func:`instrument`.
"""

from __future__ import annotations

from torch_nsight.capture.front.instrument import Instrumentation, instrument
from torch_nsight.capture.ranges.detect import detect_profiler, resolve_enabled
from torch_nsight.capture.ranges.emitter import NvtxEmitter, RangeEmitter, RecordingEmitter
from torch_nsight.capture.ranges.ops import DEFAULT_OPS, normalize_op_name
from torch_nsight.capture.ranges.registry import active_instrumentations

__all__ = [
    "instrument",
    "Instrumentation",
    "active_instrumentations",
    "RangeEmitter",
    "NvtxEmitter",
    "RecordingEmitter",
    "DEFAULT_OPS",
    "normalize_op_name",
    "detect_profiler",
    "resolve_enabled",
]
