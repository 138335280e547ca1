"""The child's entry point starts CUDA on a thread while it imports, and never fails for it."""

from __future__ import annotations

import subprocess
import sys

from torch_nsight.collect.child import start


def test_without_a_driver_the_early_start_ends_quietly_with_its_reason(monkeypatch):
    monkeypatch.setattr(start, "OUTCOME", {})
    thread = start.start_cuda_early()
    assert thread is not None
    thread.join(timeout=60)
    outcome = str(start.OUTCOME["outcome"])
    # a CPU machine has no libcuda; a GPU machine says ok
    assert outcome == "ok" or "libcuda" in outcome or "returned" in outcome
    assert start.OUTCOME["ended"] >= start.OUTCOME["started"]


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv(start.EARLY_CUDA_ENV, "0")
    assert start.start_cuda_early() is None


def test_the_entry_point_imports_no_torch_before_the_thread_starts():
    code = ("import sys, torch_nsight.collect.child.start as s; "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"
