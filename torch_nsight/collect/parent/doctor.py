"""Check what profiling needs on this machine, one typed result per check.

The checks, in order: a CUDA GPU visible to torch, the NVIDIA driver, ``ncu`` and its version,
permission to read performance counters (``ncu --clock-control none`` profiles one tiny kernel
launched inside an NVTX range), the report reader (``ncu_report``) and whether it opens that
report, the ``nvtx`` package and whether the kernel's NVTX range reaches the report (read with
:func:`torch_nsight.load`), and ``pyarrow``. A check whose prerequisite failed is skipped with
the reason; every external command runs with a timeout. torch is imported only by
:func:`check_gpu`. Nothing is printed: ``torch-nsight doctor`` renders the results.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib
import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from torch_nsight.collect.shared import ncu as ncu_cli
from torch_nsight.environment import NCU_ENV
from torch_nsight.errors import NcuNotFoundError, TorchNsightError
from torch_nsight.naming import DOMAIN

logger = logging.getLogger(__name__)

Status = Literal["ok", "fail", "skip"]

DEFAULT_TIMEOUT_S = 120.0
"""Time allowed for the profiled tiny kernel (python and torch start-up included)."""
QUICK_TIMEOUT_S = 30.0
"""Time allowed for ``nvidia-smi`` and ``ncu --version``."""
DOCTOR_RANGE = "doctor"
"""Message of the NVTX push/pop range (domain ``torch_nsight``) around the tiny kernel."""
LIBCUDA = "libcuda.so.1"
# Where Nsight Compute is often installed when it is not on PATH.
USUAL_NCU_GLOBS = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu",
                   "/opt/nvidia/nsight-compute/*/ncu")
PERMISSION_FIX = (
    "run as root, or let every user read the counters: load the nvidia kernel module with "
    "NVreg_RestrictProfilingToAdminUsers=0 (a line `options nvidia "
    "NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d/, then reboot); in a container, "
    "start it with --cap-add SYS_ADMIN; see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
# The profiled script: one kernel (a fill) inside the NVTX range, none outside it.
TINY_KERNEL_SCRIPT = f"""\
import torch
try:
    import nvtx
except ImportError:
    nvtx = None
x = torch.empty(256, device="cuda")
torch.cuda.synchronize()
if nvtx is not None:
    nvtx.push_range({DOCTOR_RANGE!r}, domain={DOMAIN!r})
x.fill_(2.0)
torch.cuda.synchronize()
if nvtx is not None:
    nvtx.pop_range(domain={DOMAIN!r})
print("torch_nsight doctor: kernel ran", "with" if nvtx else "without", "nvtx", flush=True)
"""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: a stable key (``gpu``, ``driver``, ``ncu``, ``counters``, ``reader``,
            ``report``, ``nvtx``, ``nvtx_ranges``, ``pyarrow``).
        status: ``ok``, ``fail`` or ``skip`` (a prerequisite failed).
        detail: one sentence saying what was found (for a skip: what and why not).
        fix: what to do about a failure; empty otherwise.
        data: facts for machines (paths, versions), JSON-serialisable.
    """

    name: str
    status: Status
    detail: str
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def _ok(name: str, detail: str, **data: Any) -> CheckResult:
    return CheckResult(name, "ok", detail, "", data)


def _fail(name: str, detail: str, fix: str, **data: Any) -> CheckResult:
    return CheckResult(name, "fail", detail, fix, data)


def _skip(name: str, what: str, reason: str) -> CheckResult:
    return CheckResult(name, "skip", f"{what} ({reason})")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _package_version(distribution: str, module: Any) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(module, "__version__", "unknown version"))


def check_gpu() -> CheckResult:
    """A CUDA GPU is visible to torch (imports torch)."""
    try:
        import torch
    except Exception as err:  # ImportError, or a broken install's OSError
        return _fail("gpu", f"torch cannot be imported ({_one_line(str(err))})",
                     "install PyTorch with CUDA support: https://pytorch.org/get-started/locally/")
    version = torch.__version__
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            return _fail("gpu", f"no CUDA GPU visible to torch {version}, a CPU-only build",
                         "install a CUDA build of PyTorch "
                         "(https://pytorch.org/get-started/locally/) on a machine with an "
                         "NVIDIA GPU", torch=version)
        return _fail("gpu", f"no CUDA GPU visible to torch {version} (CUDA {torch.version.cuda})",
                     "check that nvidia-smi lists a GPU, that CUDA_VISIBLE_DEVICES does not "
                     "hide it, and that the driver supports this CUDA version", torch=version)
    try:
        name = torch.cuda.get_device_name(0)
    except Exception as err:  # reported, not fatal: is_available() said yes
        logger.debug("torch.cuda.get_device_name failed: %s", err)
        name = "device 0"
    return _ok("gpu", f"CUDA GPU {name} visible to torch {version} (CUDA {torch.version.cuda})",
               device=name, torch=version, cuda=torch.version.cuda)


def _driver_from_libcuda() -> str | None:
    """The CUDA driver API version from ``libcuda`` (what torch loads), e.g. ``13.0``."""
    try:
        lib = ctypes.CDLL(LIBCUDA)
        value = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(value)) != 0:
            return None
    except (OSError, AttributeError) as err:
        logger.debug("no usable %s: %s", LIBCUDA, err)
        return None
    return f"{value.value // 1000}.{value.value % 1000 // 10}"


def check_driver(timeout: float = QUICK_TIMEOUT_S) -> CheckResult:
    """The NVIDIA driver answers: ``nvidia-smi``, else ``libcuda`` loaded directly."""
    smi = shutil.which("nvidia-smi")
    problem = "nvidia-smi is not on PATH"
    if smi is not None:
        try:
            proc = subprocess.run([smi, "--query-gpu=name,driver_version",
                                   "--format=csv,noheader"], capture_output=True, text=True,
                                  timeout=timeout, errors="replace", check=False)
            rows = [line.rsplit(",", 1) for line in proc.stdout.splitlines() if "," in line]
            if proc.returncode == 0 and rows:
                names = [name.strip() for name, _ in rows]
                driver = rows[0][1].strip()
                return _ok("driver", f"NVIDIA driver {driver} ({len(rows)} GPU(s): "
                           f"{', '.join(dict.fromkeys(names))})", driver=driver, gpus=names)
            problem = f"nvidia-smi failed: {_one_line(proc.stdout + proc.stderr)[-200:]}"
        except subprocess.TimeoutExpired:
            problem = f"nvidia-smi did not answer within {timeout:g} s"
        except OSError as err:
            problem = f"nvidia-smi could not run ({err})"
    api = _driver_from_libcuda()
    if api is not None:
        return _ok("driver", f"NVIDIA driver loaded, CUDA driver API {api} ({LIBCUDA}; "
                   f"{problem})", driver_api=api)
    return _fail("driver", f"no NVIDIA driver found ({problem}; {LIBCUDA} cannot be loaded)",
                 "install the NVIDIA driver so that nvidia-smi lists the GPU; in a container, "
                 "start it with the NVIDIA Container Toolkit (docker run --gpus all)")


def _usual_ncu() -> list[str]:
    found = (path for pattern in USUAL_NCU_GLOBS for path in sorted(glob.glob(pattern)))
    return [path for path in found if os.access(path, os.X_OK)]


def check_ncu(timeout: float = QUICK_TIMEOUT_S) -> CheckResult:
    """``ncu`` is found (:func:`~torch_nsight.collect.shared.ncu.find_ncu`) and recent enough.

    On success ``data["path"]`` is the ``ncu`` to use.
    """
    minimum = ".".join(map(str, ncu_cli.MIN_VERSION))
    try:
        path = ncu_cli.find_ncu()
    except NcuNotFoundError:
        env = os.environ.get(NCU_ENV)
        elsewhere = _usual_ncu()
        if env:
            detail = f"${NCU_ENV}={env!r} is not an executable Nsight Compute CLI"
            fix = (f"point ${NCU_ENV} at the ncu binary (e.g. {ncu_cli.DEFAULT_NCU}) "
                   "or unset it")
        else:
            detail = f"Nsight Compute (ncu) not found on PATH nor at {ncu_cli.DEFAULT_NCU}"
            fix = (f"install Nsight Compute {minimum} or newer (it ships with the CUDA "
                   f"toolkit) and put ncu on PATH, or set ${NCU_ENV}=/path/to/ncu")
        if elsewhere:
            fix = f"found {elsewhere[-1]}: export {NCU_ENV}={elsewhere[-1]}"
        return _fail("ncu", detail, fix, candidates=elsewhere)
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=timeout, errors="replace", check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return _fail("ncu", f"{path} --version could not run ({_one_line(str(err))})",
                     f"check that {path} is a working Nsight Compute CLI", path=path)
    version = ncu_cli.parse_version(proc.stdout + proc.stderr)
    if version is None:
        return _fail("ncu", f"could not read the version of {path} (it printed "
                     f"{_one_line(proc.stdout + proc.stderr)[-120:]!r})",
                     f"check that {path} is Nsight Compute's ncu", path=path)
    shown = ".".join(map(str, version))
    if version < ncu_cli.MIN_VERSION:
        return _fail("ncu", f"ncu {shown} at {path} is older than {minimum}",
                     f"install Nsight Compute {minimum} or newer and put its ncu first on PATH "
                     f"(or set ${NCU_ENV})", path=path, version=shown)
    return _ok("ncu", f"ncu {shown} at {path}", path=path, version=shown)


def build_tiny_command(ncu: str, report: str | os.PathLike[str]) -> list[str]:
    """The ``ncu`` argument list profiling :data:`TINY_KERNEL_SCRIPT` into ``report``
    (without its ``.ncu-rep`` suffix): unlocked clocks, NVTX on, duration only (one pass)."""
    return [ncu, "--clock-control", "none", "--target-processes", "application-only", "--nvtx",
            "--metrics", ncu_cli.DURATION_METRIC, "-f", "-o", os.fspath(report),
            sys.executable, "-c", TINY_KERNEL_SCRIPT]


def check_counters(ncu: str, report: str | os.PathLike[str],
                   timeout: float = DEFAULT_TIMEOUT_S) -> CheckResult:
    """``ncu`` may read performance counters: it profiles one tiny kernel into ``report``.

    On success ``data["report"]`` is the ``.ncu-rep`` written.
    """
    command = build_tiny_command(ncu, report)
    written = Path(f"{os.fspath(report)}.ncu-rep")
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              errors="replace", check=False)
    except subprocess.TimeoutExpired:
        return _fail("counters", f"ncu did not finish profiling one tiny kernel within "
                     f"{timeout:g} s", "run `torch-nsight doctor --timeout 600`; check that no "
                     "other process holds the GPU or another profiler session")
    except OSError as err:
        return _fail("counters", f"ncu could not start ({err})",
                     f"check that {ncu} is a working Nsight Compute CLI")
    output = ncu_cli.NcuOutput()
    for line in (proc.stdout + proc.stderr).splitlines():
        output.feed(line)
    if output.permission_denied:
        said = next(e for e in output.errors if "ERR_NVGPUCTRPERM" in e)
        return _fail("counters", "ncu may not read the GPU's performance counters "
                     f"(ERR_NVGPUCTRPERM; ncu said: {said})", PERMISSION_FIX)
    if output.nothing_profiled or output.kernels_profiled == 0 or not written.is_file():
        said = "; ".join(output.errors) or output.last_lines(6)
        return _fail("counters", f"ncu profiled no kernel (exit status {proc.returncode}; "
                     f"output: {_one_line(said)[-400:]})",
                     "run the command with -v to see it, and check that a CUDA kernel runs "
                     "under ncu outside torch_nsight (ncu --clock-control none python -c "
                     "\"import torch; torch.ones(1, device='cuda')\")",
                     returncode=proc.returncode)
    return _ok("counters", f"performance counters readable: ncu --clock-control none profiled "
               f"{output.kernels_profiled} kernel(s)", report=str(written),
               kernels=output.kernels_profiled)


def _check_import(name: str, module: str, package: str, what: str) -> CheckResult:
    """``module`` (PyPI ``package``) is importable; ``what`` names it in the line."""
    try:
        loaded = importlib.import_module(module)
    except Exception as err:  # ImportError, or a broken build's OSError
        return _fail(name, f"{what} cannot be imported ({_one_line(str(err))})",
                     f"pip install {package}")
    version = _package_version(package, loaded)
    return _ok(name, f"{what} {version} importable", version=version)


def check_reader() -> CheckResult:
    """Nsight Compute's report reader (``ncu_report``) is importable."""
    return _check_import("reader", "ncu_report", "ncu-report", "report reader ncu_report")


def check_report(report: str | os.PathLike[str]) -> CheckResult:
    """The report reader opens ``report`` and finds the profiled kernel in it."""
    from torch_nsight.report import reader

    try:
        with reader.local_report(report) as local:
            context = reader.open_context(local, report)
            kernels = sum(context.range_by_idx(i).num_actions()
                          for i in range(context.num_ranges()))
            written_by = reader.writer_version(local)
    except TorchNsightError as err:
        return _fail("report", _one_line(str(err)),
                     "install an ncu-report release at least as new as ncu "
                     "(pip install -U ncu-report)")
    return _ok("report", f"ncu_report opened the report ({kernels} kernel(s), written by ncu "
               f"{written_by or 'of unknown version'})", kernels=kernels)


def check_nvtx() -> CheckResult:
    """The ``nvtx`` package is importable."""
    return _check_import("nvtx", "nvtx", "nvtx", "nvtx")


@contextlib.contextmanager
def _quiet_library_warnings() -> Iterator[None]:
    """Keep torch_nsight's warnings about the tiny report (it holds the duration only, so
    the roofline metrics are missing) off the doctor's output, unless debugging."""
    library = logging.getLogger("torch_nsight")
    before = library.level
    if library.getEffectiveLevel() > logging.DEBUG:
        library.setLevel(logging.ERROR)
    try:
        yield
    finally:
        library.setLevel(before)


def check_nvtx_ranges(report: str | os.PathLike[str], message: str = DOCTOR_RANGE) -> CheckResult:
    """A kernel launched inside the push/pop range ``message`` (domain ``torch_nsight``) is
    attributed to it in ``report``, as :func:`torch_nsight.load` reads it."""
    from torch_nsight.loading import load

    try:
        with _quiet_library_warnings():
            kernels = load(report, cache=False).kernels
    except TorchNsightError as err:
        return _fail("nvtx_ranges", f"torch_nsight.load could not read the report "
                     f"({_one_line(str(err))})", "run with -vv and report the traceback")
    inside = kernels[[message in stack for stack in kernels["range_stack"]]]
    if inside.empty:
        stacks = sorted({tuple(s) for s in kernels["range_stack"]})
        return _fail("nvtx_ranges", f"no kernel carries the NVTX range {DOMAIN}@{message} "
                     f"(range stacks seen: {stacks})",
                     "check that the profiled python imports the same nvtx package and that "
                     "ncu runs with --nvtx; an NVTX_INJECTION64_PATH set by another tool can "
                     "take NVTX away from ncu")
    return _ok("nvtx_ranges", f"NVTX ranges reach the report: kernel {inside['kernel'].iloc[0]} "
               f"inside {DOMAIN}@{message}", kernels=len(inside))


def check_pyarrow() -> CheckResult:
    """``pyarrow`` (Parquet profiles and caches) is importable."""
    return _check_import("pyarrow", "pyarrow", "pyarrow", "pyarrow")


def _guarded(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """Run one check; an unexpected exception becomes a failed line, never a crash."""
    try:
        return check()
    except Exception as err:
        logger.debug("doctor check %s raised", name, exc_info=True)
        return _fail(name, f"the {name} check itself failed ({type(err).__name__}: "
                     f"{_one_line(str(err))})", "run with -vv and report the traceback")


def run_checks(timeout: float = DEFAULT_TIMEOUT_S,
               workdir: str | os.PathLike[str] | None = None) -> list[CheckResult]:
    """Run every check, skipping those whose prerequisite failed.

    Args:
        timeout: seconds allowed for profiling the tiny kernel.
        workdir: where the tiny report goes (default: a temporary folder, removed after).

    Returns:
        One :class:`CheckResult` per check, in order.

    Raises:
        ValueError: ``timeout`` is not positive.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    with contextlib.ExitStack() as stack:
        folder = Path(workdir) if workdir is not None else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="torch_nsight-doctor-")))
        return _run_in(folder, timeout)


def _run_in(folder: Path, timeout: float) -> list[CheckResult]:
    quick = min(timeout, QUICK_TIMEOUT_S)
    gpu = _guarded("gpu", check_gpu)
    results = [gpu, _guarded("driver", lambda: check_driver(quick))]
    ncu = _guarded("ncu", lambda: check_ncu(quick))
    results.append(ncu)
    what = "performance-counter permission: profile one tiny kernel under ncu"
    if gpu.status != "ok":
        counters = _skip("counters", what, "needs a GPU")
    elif ncu.status != "ok":
        counters = _skip("counters", what, "needs ncu")
    else:
        path = ncu.data["path"]
        counters = _guarded("counters", lambda: check_counters(path, folder / "doctor", timeout))
    results.append(counters)
    reader = _guarded("reader", check_reader)
    results.append(reader)
    report = counters.data.get("report")
    what = "the report reader opens the tiny kernel's report"
    if report is None:
        opened = _skip("report", what, "needs a GPU" if gpu.status != "ok"
                       else "needs the profiled report")
    elif reader.status != "ok":
        opened = _skip("report", what, "needs ncu_report")
    else:
        opened = _guarded("report", lambda: check_report(report))
    results.append(opened)
    nvtx = _guarded("nvtx", check_nvtx)
    results.append(nvtx)
    what = "NVTX ranges reach the report"
    if opened.status != "ok" or report is None:  # (no report: `opened` was skipped)
        ranges = _skip("nvtx_ranges", what, "needs a GPU" if gpu.status != "ok"
                       else "needs a readable report")
    elif nvtx.status != "ok":
        ranges = _skip("nvtx_ranges", what, "needs the nvtx package")
    else:
        ranges = _guarded("nvtx_ranges", lambda: check_nvtx_ranges(report, DOCTOR_RANGE))
    results.append(ranges)
    results.append(_guarded("pyarrow", check_pyarrow))
    return results
