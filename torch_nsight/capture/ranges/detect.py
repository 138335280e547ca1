"""Decide whether to instrument: only when an NVTX consumer (a profiler) is attached."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from torch_nsight.environment import INSTRUMENT_ENV, REHEARSAL_ENV, TIMELINE_ENV, ScriptEnv

logger = logging.getLogger(__name__)

__all__ = ["NCU_VARIABLE", "detect_profiler", "rehearsing", "resolve_enabled",
           "under_nsight_compute"]

#: Set in processes Nsight Compute (``ncu``) starts, and only there.
NCU_VARIABLE = "NV_COMPUTE_PROFILER_PERFWORKS_DIR"
_PROFILER_VARIABLES = (
    "NVTX_INJECTION64_PATH",
    "NVTX_INJECTION32_PATH",
    "CUDA_INJECTION64_PATH",
    "NV_NSIGHT_INJECTION_TRANSPORT_TYPE",
    "NV_TPS_LAUNCH_TOKEN",
    NCU_VARIABLE,
)
_PROFILER_PREFIXES = ("NVIDIA_PROCESS_INJECTION_", "NV_NSIGHT_INJECTION_", "NSYS_")


def detect_profiler(environ: Mapping[str, str] | None = None) -> str | None:
    """Return the environment variable showing that an NVIDIA profiler started this process.

    Variables looked for, first match wins:

    * ``NVTX_INJECTION64_PATH`` / ``NVTX_INJECTION32_PATH``: the NVTX tool library to load
      (set by Nsight Systems and other NVTX consumers);
    * ``CUDA_INJECTION64_PATH``: a CUDA injection library (Nsight Systems, CUPTI tools);
    * ``NV_NSIGHT_INJECTION_TRANSPORT_TYPE``, ``NV_TPS_LAUNCH_TOKEN``,
      ``NV_COMPUTE_PROFILER_PERFWORKS_DIR``: set by Nsight Compute (``ncu``), which sets
      none of the injection paths above;
    * any variable starting with ``NVIDIA_PROCESS_INJECTION_`` or ``NV_NSIGHT_INJECTION_``
      (Nsight launchers) or ``NSYS_`` (Nsight Systems);
    * :data:`~torch_nsight.environment.REHEARSAL_ENV` (``torch-nsight profile --dry-run``:
      the script runs as under ncu, without it).

    Args:
        environ: The environment to inspect (default ``os.environ``).

    Returns:
        The name of the first variable found, or None when no profiler is detected.
    """
    env = os.environ if environ is None else environ
    for name in _PROFILER_VARIABLES:
        if env.get(name):
            return name
    for name in sorted(env):
        if name.startswith(_PROFILER_PREFIXES):
            return name
    return REHEARSAL_ENV if rehearsing(env) else None


def rehearsing(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a rehearsal (``torch-nsight profile --dry-run``): it runs as
    under Nsight Compute, without it."""
    return ScriptEnv.from_env(os.environ if environ is None else environ).rehearsal


def under_nsight_compute(environ: Mapping[str, str] | None = None) -> bool:
    """Whether Nsight Compute started this process (its reports keep NVTX range messages),
    or a rehearsal runs it as ncu would."""
    env = os.environ if environ is None else environ
    return bool(env.get(NCU_VARIABLE)) or rehearsing(env)


def resolve_enabled(
    enabled: bool | None, environ: Mapping[str, str] | None = None
) -> tuple[bool, str]:
    """Decide whether :func:`torch_nsight.instrument` installs hooks, and say why.

    Precedence: the ``enabled`` argument, then
    :attr:`~torch_nsight.environment.ScriptEnv.instrument` (``TORCH_NSIGHT_INSTRUMENT``:
    ``1``/``0``, also ``true``/``false``, ``yes``/``no``, ``on``/``off``), then
    :attr:`~torch_nsight.environment.ScriptEnv.timeline`, then :func:`detect_profiler`.

    Args:
        enabled: True or False to decide outright, None to look at the environment.
        environ: The environment to inspect (default ``os.environ``).

    Returns:
        ``(on, reason)``, the reason being one sentence fit for a log line.

    Raises:
        TypeError: If ``enabled`` is not a bool or None.
    """
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True, False or None, got {type(enabled).__name__}")
    if enabled is not None:
        return enabled, f"enabled={enabled} was passed"
    env = os.environ if environ is None else environ
    script = ScriptEnv.from_env(env)  # a value other than 1/0 is ignored with a warning
    if script.instrument is not None:
        return script.instrument, (f"{INSTRUMENT_ENV}={int(script.instrument)} forces "
                                   f"instrumentation {'on' if script.instrument else 'off'}")
    if script.timeline is not None:
        return True, f"{TIMELINE_ENV} is set: the timeline of PyTorch's profiler is recorded"
    found = detect_profiler(env)
    if found == REHEARSAL_ENV:
        return True, f"a dry run of torch-nsight profile ({found} is set)"
    if found is not None:
        return True, f"an NVIDIA profiler is attached ({found} is set)"
    return False, (
        "no NVIDIA profiler detected (no NVTX/CUDA injection or Nsight variable is set); "
        f"pass enabled=True or set {INSTRUMENT_ENV}=1 to instrument anyway"
    )
