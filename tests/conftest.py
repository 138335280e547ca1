"""Fixtures shared by all torch_nsight tests."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _gpu_missing() -> str | None:
    """Why tests marked ``gpu`` cannot run here, or None when CUDA and ncu are present."""
    try:
        import torch
    except ImportError:
        return "needs torch"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    if shutil.which("ncu") is None and not Path("/usr/local/cuda/bin/ncu").exists():
        return "needs Nsight Compute (ncu)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``gpu`` where there is no CUDA GPU or no ``ncu``; run the modules
    holding ``slow`` tests first."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    reason = _gpu_missing() if gpu_items else None
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))
    _slow_modules_first(items)


def _slow_modules_first(items: list[pytest.Item]) -> None:
    """Put the modules that start subprocesses (seconds a test) before the others, each
    module's tests in their own order: with the tests spread over workers (``-n auto``),
    the last ones to be handed out are then short, and no worker is left alone with a long
    test at the end while the others have finished."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)  # stable: False (slow) first


_CACHES: list[str] = []
#: The run's cache folder, as the controlling process of ``-n N`` made it: its workers
#: (started with its environment) share it instead of making one each.
_RUN_CACHES = "TORCH_NSIGHT_TEST_RUN_CACHES"
#: Inductor's cache folder (its compiled C++ kernels, its graphs, and the programs it builds
#: once to learn which vector instructions the CPU runs, seconds each).
_INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"


#: Inductor's switch for vector instructions in the C++ kernels it compiles on the CPU: off for
#: the run (unless set), as a CPU without one would have it. The tests that compile check
#: which kernels run and where they are mapped, never their code; scalar kernels compile in
#: about three quarters of the time (a compiled dry run: 29 s -> 22 s from an empty cache).
_INDUCTOR_VECTORS = "TORCHINDUCTOR_VEC_ISA_OK"
_VECTORS_SET: list[bool] = []  # set by this run (and removed at its end)


def _run_caches() -> dict[str, str]:
    """Each variable that names a cache -> its folder in the run's cache folder."""
    from torch_nsight.report.cache import CACHE_DIR_ENV

    return {CACHE_DIR_ENV: "reports", _INDUCTOR_CACHE: "inductor"}


def pytest_configure(config: pytest.Config) -> None:
    """Send the caches of the whole run (collection, fixtures of every scope, subprocesses,
    which inherit the variables) to a folder of this run: the report caches, so none lands
    beside the fixtures in tests/data and every run reads the recorded reports with the real
    reader; and Inductor's, so no test compiles into the user's own
    (``/tmp/torchinductor_$USER``) and the tests that compile share what one compiled
    before. The workers of ``-n N`` share the folder their controller made: a report that
    one worker has read is a cache hit on the others (a cache is written whole, under
    another name first, so a worker never reads another's half-written one; Inductor locks
    and writes its own the same way)."""
    if _INDUCTOR_VECTORS not in os.environ:  # the workers inherit it
        os.environ[_INDUCTOR_VECTORS] = "0"
        _VECTORS_SET.append(True)
    caches = _run_caches()
    shared = os.environ.get(_RUN_CACHES)
    if os.environ.get("PYTEST_XDIST_WORKER") and shared and Path(shared).is_dir() \
            and all(os.environ.get(name) == os.path.join(shared, sub)
                    for name, sub in caches.items()):
        return  # the controller's folder, removed by the controller
    folder = tempfile.mkdtemp(prefix="tn-run-caches-")
    for name, sub in {**caches, _RUN_CACHES: ""}.items():
        _CACHES.append(os.environ.get(name, ""))
        os.environ[name] = os.path.join(folder, sub) if sub else folder
        os.makedirs(os.environ[name], exist_ok=True)
    _CACHES.append(folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put the variables back and remove the run's caches."""
    if _VECTORS_SET:
        os.environ.pop(_INDUCTOR_VECTORS, None)
    names = [*_run_caches(), _RUN_CACHES]
    if len(_CACHES) == len(names) + 1:
        *before, folder = _CACHES
        for name, value in zip(names, before, strict=True):
            if value:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _a_terminal_120_columns_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text tables fit ``$COLUMNS``: every test renders for the same width (120), whatever
    the terminal the tests run in."""
    monkeypatch.setenv("COLUMNS", "120")


@pytest.fixture(autouse=True)
def _no_instrumentation_left_behind() -> Iterator[None]:
    """Fail a test that leaves torch_nsight hooks installed on a module it instrumented.

    Looks only if the capture stage was imported, so tests that never touch torch stay
    free of it. Leftover hooks are removed before failing, so one leak fails one test.
    """
    capture = sys.modules.get("torch_nsight.capture")
    before = set(capture.active_instrumentations()) if capture is not None else set()
    yield
    capture = sys.modules.get("torch_nsight.capture")
    if capture is None:
        return
    left = [handle for handle in capture.active_instrumentations() if handle not in before]
    if left:
        message = (f"test left torch_nsight hooks installed: {left}; call .remove() on the "
                   "handle or use `with torch_nsight.instrument(...):`")
        for handle in left:
            handle.remove()
        pytest.fail(message, pytrace=False)
