"""Nsight Compute's command line: find ``ncu``, check its version, build the profiling
command as an argument list (never a shell string), and read its output for failures.

``ncu`` reports most failures on its own output rather than in its exit status: it exits 0
when it profiled nothing (``==WARNING== No kernels were profiled.``) and prints
``==ERROR== ERR_NVGPUCTRPERM`` when counters are not permitted. :class:`NcuOutput`
collects those lines while the child runs and :func:`raise_for_output` turns them into
library errors that say what to do.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from torch_nsight.environment import NCU_ENV
from torch_nsight.errors import (
    CounterPermissionError,
    NcuNotFoundError,
    NcuVersionError,
    NothingProfiledError,
    TorchNsightError,
)
from torch_nsight.metrics import METRIC_SETS, MetricSet
from torch_nsight.naming import DOMAIN, MEASURE_MESSAGE, REPLICA_MESSAGE

logger = logging.getLogger(__name__)

DEFAULT_NCU = "/usr/local/cuda/bin/ncu"
# Oldest release accepted. The project's tooling (report reader, metric names, start/end
# NVTX filters) was checked with 2025.3.1; releases before 2023.1 predate the Hopper metric
# names of the default set.
MIN_VERSION = (2023, 1, 0)
DURATION_METRIC = "gpu__time_duration.sum"
# Options the sweep sets itself; giving them again in ncu_args is refused.
RESERVED_OPTIONS = frozenset({"--clock-control", "-o", "--export", "-f", "--force-overwrite",
                              "--target-processes"})
PERMISSION_HELP = (
    "Nsight Compute is not permitted to read the GPU's performance counters "
    "(ERR_NVGPUCTRPERM). Run the sweep as root, or allow profiling for all users: load the "
    "nvidia kernel module with NVreg_RestrictProfilingToAdminUsers=0 (see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM); in a container, add --cap-add SYS_ADMIN."
)
# `ncu --query-metrics` lists hundreds of base names; fewer means the query failed.
MIN_LISTED = 100
ALWAYS_KEPT = ("launch__", "device__")
_VERSION_RE = re.compile(r"Version\s+(\d+)\.(\d+)\.(\d+)")
_PROFILING_RE = re.compile(r"^==PROF== Profiling ")
_METRIC_BASE_RE = re.compile(r"^([a-z0-9_]+__\w+)")


#: What is wrong when no ``ncu`` is found, before the advice in the caller's terms.
NCU_MISSING = ("Nsight Compute (`ncu`) was not found on PATH nor at /usr/local/cuda/bin/ncu "
               "(it ships with the CUDA toolkit)")


def find_ncu(ncu: str | os.PathLike[str] | None = None) -> str:
    """Return the path of the ``ncu`` to use.

    Order: the ``ncu`` argument, ``$TORCH_NSIGHT_NCU``, ``ncu`` on ``PATH``,
    ``/usr/local/cuda/bin/ncu``.

    Raises:
        NcuNotFoundError: the named file does not exist, or no ``ncu`` was found.
    """
    for origin, value in (("ncu=", ncu), (f"${NCU_ENV}", os.environ.get(NCU_ENV))):
        if value:
            path = shutil.which(os.fspath(value)) or None
            if path is None:
                raise NcuNotFoundError(
                    f"{origin}{os.fspath(value)!r} is not an executable Nsight Compute CLI: "
                    "point it at the `ncu` binary (e.g. /usr/local/cuda/bin/ncu)")
            return path
    found = shutil.which("ncu")
    if found:
        return found
    if os.access(DEFAULT_NCU, os.X_OK):
        return DEFAULT_NCU
    raise NcuNotFoundError(
        f"{NCU_MISSING}: pass sweep(..., ncu='/path/to/ncu') or set ${NCU_ENV}; to check a job "
        "without profiling, sweep(..., profiler=None)", missing=True)


def parse_version(text: str) -> tuple[int, int, int] | None:
    """Read ``(2025, 3, 1)`` from ``ncu --version`` output; None if absent."""
    match = _VERSION_RE.search(text)
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


@functools.lru_cache(maxsize=8)
def ncu_version(ncu: str) -> tuple[int, int, int] | None:
    """Run ``ncu --version``; return its version (None if unreadable).

    Raises:
        NcuNotFoundError: ``ncu`` cannot be started.
        NcuVersionError: it is older than :data:`MIN_VERSION`.
    """
    try:
        proc = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=120,
                              errors="replace")
    except (OSError, subprocess.SubprocessError) as err:
        raise NcuNotFoundError(f"could not run {ncu} --version: {err}") from err
    version = parse_version(proc.stdout + proc.stderr)
    if version is None:
        logger.warning("could not read the version of %s (output: %r); going on",
                       ncu, (proc.stdout + proc.stderr)[-300:])
        return None
    if version < MIN_VERSION:
        raise NcuVersionError(
            f"{ncu} is Nsight Compute {'.'.join(map(str, version))}; torch_nsight needs "
            f"{'.'.join(map(str, MIN_VERSION))} or newer. Install a newer CUDA toolkit or "
            f"Nsight Compute and pass its ncu (ncu=... or ${NCU_ENV}).")
    return version


def _metrics_cache_path(ncu: str, visible_devices: str | None) -> str:
    """Where :func:`known_metric_bases` keeps the list for this ncu file, device selection
    and host: ``$XDG_CACHE_HOME/torch_nsight`` (else ``~/.cache/torch_nsight``), a name
    hashing ncu's real path, mtime and size, ``CUDA_VISIBLE_DEVICES`` and the host name
    (no process is started to build it)."""
    real = os.path.realpath(ncu)
    info = os.stat(real)
    devices = visible_devices if visible_devices is not None else \
        os.environ.get("CUDA_VISIBLE_DEVICES")
    key = "\0".join((real, str(info.st_mtime_ns), str(info.st_size), repr(devices),
                     socket.gethostname()))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha1(key.encode("utf-8", "surrogateescape")).hexdigest()
    return os.path.join(base, "torch_nsight", f"ncu-metrics-{digest}.txt")


def _read_metrics_cache(path: str) -> frozenset[str] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            names = frozenset(line.strip() for line in handle if line.strip())
    except OSError as err:
        logger.debug("no usable ncu metric cache %s (%s)", path, err)
        return None
    if len(names) < MIN_LISTED:
        logger.debug("ncu metric cache %s looks incomplete (%d names); querying", path,
                     len(names))
        return None
    return names


def _write_metrics_cache(path: str, names: frozenset[str]) -> None:
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ncu-metrics-", suffix=".tmp",
                                   dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{name}\n" for name in sorted(names)))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new
        tmp = None
    except OSError as err:
        logger.debug("could not write the ncu metric cache %s (%s)", path, err)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _query_metric_bases(ncu: str, visible_devices: str | None) -> frozenset[str]:
    env = dict(os.environ)
    if visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    try:
        proc = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True,
                              timeout=180, env=env, errors="replace")
    except (OSError, subprocess.SubprocessError) as err:
        logger.info("ncu --query-metrics failed (%s): metrics are passed unchecked", err)
        return frozenset()
    return frozenset(m.group(1) for line in proc.stdout.splitlines()
                     if (m := _METRIC_BASE_RE.match(line)))


@functools.lru_cache(maxsize=8)
def known_metric_bases(ncu: str, visible_devices: str | None = None) -> frozenset[str]:
    """Base names of the metrics ``ncu --query-metrics`` lists for this GPU (empty when
    the query fails: then nothing is filtered).

    A complete list (:data:`MIN_LISTED` names or more) is kept on disk (see
    :func:`_metrics_cache_path`) and read back by later sweeps instead of querying again;
    any error reading or writing that file just means querying.
    """
    try:
        path: str | None = _metrics_cache_path(ncu, visible_devices)
    except (OSError, ValueError) as err:
        logger.debug("no ncu metric cache for %s (%s)", ncu, err)
        path = None
    if path is not None:
        cached = _read_metrics_cache(path)
        if cached is not None:
            logger.debug("ncu metric list read from %s", path)
            return cached
    names = _query_metric_bases(ncu, visible_devices)
    if path is not None and len(names) >= MIN_LISTED:
        _write_metrics_cache(path, names)
    return names


def resolve_metric_set(metric_set: str | Iterable[str]) -> MetricSet:
    """Turn the ``metric_set`` argument into a :class:`MetricSet`.

    Args:
        metric_set: a set name (:data:`~torch_nsight.metrics.METRIC_SETS`), or ncu metric
            names.

    Raises:
        ValueError: an unknown set name, or an empty list.
        TypeError: not a str nor an iterable of str.
    """
    if isinstance(metric_set, str):
        if metric_set not in METRIC_SETS:
            raise ValueError(f"metric_set {metric_set!r} is not one of {sorted(METRIC_SETS)}; "
                             "to name ncu metrics, pass a list of them")
        return METRIC_SETS[metric_set]
    if not isinstance(metric_set, Iterable):
        raise TypeError(f"metric_set must be a set name or a list of ncu metric names, got "
                        f"{type(metric_set).__name__}")
    names = list(metric_set)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError("metric_set must be a non-empty list of ncu metric names (str)")
    named = [n for n in names if n in METRIC_SETS]
    if named:
        raise ValueError(f"metric_set: {named[0]!r} is a metric set, not an ncu metric: pass "
                         f"it as a string (metric_set={named[0]!r})")
    if DURATION_METRIC not in names:
        names.insert(0, DURATION_METRIC)
    return MetricSet("custom", tuple(dict.fromkeys(names)), (), "metrics named by the user")


def filter_metrics(metrics: Sequence[str], known: frozenset[str]) -> list[str]:
    """Drop the metrics whose base name this GPU's ncu does not list.

    Launch and device attributes (``launch__``, ``device__``) are always kept, and nothing
    is dropped when the list looks incomplete (fewer than :data:`MIN_LISTED` names).
    """
    if len(known) < MIN_LISTED:
        return list(metrics)
    kept = [m for m in metrics
            if m.startswith(ALWAYS_KEPT) or m.split(".")[0] in known]
    dropped = sorted(set(metrics) - set(kept))
    if dropped:
        logger.info("this GPU's ncu does not know %d metric(s); not collected: %s",
                    len(dropped), ", ".join(dropped))
    return kept


def check_extra_args(args: Sequence[str]) -> list[str]:
    """Validate ``ncu_args``: a list of str that does not re-set what the sweep sets.

    Raises:
        TypeError: a single string (it would be split into characters) or non-str items.
        ValueError: an option the sweep sets itself.
    """
    if isinstance(args, (str, bytes)):
        raise TypeError(f"ncu_args must be a list of arguments, not a string: write "
                        f"ncu_args={str(args).split()!r}")
    out = list(args)
    if not all(isinstance(a, str) for a in out):
        raise TypeError("ncu_args must hold str items only")
    for arg in out:
        if arg.split("=", 1)[0] in RESERVED_OPTIONS:
            raise ValueError(f"ncu_args may not set {arg!r}: the sweep sets it (the clocks stay "
                             "unlocked with --clock-control none; use output_dir for -o)")
    return out


def build_command(ncu: str, *, report: str | os.PathLike[str], metric_set: MetricSet,
                  app: Sequence[str], metrics: Sequence[str] | None = None,
                  exclude_replicas: bool = True, extra_args: Sequence[str] = (),
                  measured_only: bool = True) -> list[str]:
    """Build the ``ncu`` argument list that profiles the sweep's measured iterations.

    Args:
        ncu: the ``ncu`` executable.
        report: report path *without* the ``.ncu-rep`` suffix (ncu adds it).
        metric_set: what to collect (its sections and metrics).
        app: the child command (``python -m torch_nsight.collect.child.start <job>``).
        metrics: the metric names to pass (default: the set's), e.g. after
            :func:`filter_metrics`.
        exclude_replicas: leave out kernels inside the child's ``replica`` start/end range.
        extra_args: more ``ncu`` arguments, placed before the application.
        measured_only: profile only kernels inside the ``measure`` start/end range (the
            sweep's measured iterations, the steps chosen with ``torch_nsight.step()``);
            False profiles every kernel the application launches.

    Returns:
        The argument list (for ``subprocess``; no shell involved).
    """
    cmd = [ncu, "--clock-control", "none", "--target-processes", "application-only", "--nvtx"]
    if measured_only:
        cmd += ["--nvtx-include", f"{DOMAIN}@{MEASURE_MESSAGE}"]
    if exclude_replicas:
        cmd += ["--nvtx-exclude", f"{DOMAIN}@{REPLICA_MESSAGE}"]
    for section in metric_set.sections:
        cmd += ["--section", section]
    names = list(metric_set.metrics if metrics is None else metrics)
    if names:
        cmd += ["--metrics", ",".join(names)]
    cmd += ["-f", "-o", os.fspath(report)]
    cmd += list(extra_args)
    return cmd + list(app)


@dataclass
class NcuOutput:
    """What ``ncu`` (and the child, whose output it forwards) printed, as it is read."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    kernels_profiled: int = 0
    first_profiled_at: float | None = None  # time.time() of the first kernel profiled
    nothing_profiled: bool = False
    permission_denied: bool = False
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=60))

    def feed(self, line: str) -> None:
        """Take one output line."""
        line = line.rstrip("\n")
        self.tail.append(line)
        if _PROFILING_RE.match(line):
            self.kernels_profiled += 1
            if self.first_profiled_at is None:
                self.first_profiled_at = time.time()
        elif line.startswith("==ERROR=="):
            self.errors.append(line)
            if "ERR_NVGPUCTRPERM" in line:
                self.permission_denied = True
        elif line.startswith("==WARNING=="):
            self.warnings.append(line)
            if "No kernels were profiled" in line:
                self.nothing_profiled = True

    def last_lines(self, n: int = 20) -> str:
        """The last ``n`` lines, for error messages."""
        return "\n".join(list(self.tail)[-n:])


def raise_for_output(output: NcuOutput, *, report_exists: bool, returncode: int | None,
                     why_nothing: str = "") -> None:
    """Raise the library error that ncu's output calls for; return if the report is usable.

    Args:
        output: the collected output.
        report_exists: whether the ``.ncu-rep`` was written.
        returncode: ncu's exit status.
        why_nothing: the likely reason when nothing was profiled (from the child's results).

    Raises:
        CounterPermissionError: ``ERR_NVGPUCTRPERM``.
        NothingProfiledError: ``No kernels were profiled`` or no report.
        TorchNsightError: ncu failed otherwise without writing a report.
    """
    if output.permission_denied:
        raise CounterPermissionError(f"{PERMISSION_HELP}\nncu said: "
                                     f"{next(e for e in output.errors if 'NVGPUCTRPERM' in e)}")
    if output.nothing_profiled or (report_exists is False and output.kernels_profiled == 0
                                   and not output.errors and returncode == 0):
        raise NothingProfiledError(
            "ncu profiled no kernel (it exits 0 in that case). "
            + (why_nothing or "No CUDA kernel ran inside the torch_nsight@measure range: is "
               "the model on the GPU, does it launch CUDA kernels, and do ncu_args (e.g. "
               "--kernel-name, --launch-count) filter them all out?"))
    if not report_exists:
        details = "\n".join(output.errors) or output.last_lines()
        raise TorchNsightError(f"ncu wrote no report (exit status {returncode}). Its output:\n"
                               f"{details}")
    for line in output.errors:
        logger.warning("ncu: %s", line)
