"""Fixtures shared by all torch_nsight tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


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
