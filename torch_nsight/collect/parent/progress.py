"""A sweep's progress bar in the parent: one step per (variant, shape), from the child's
status lines (see :mod:`torch_nsight.collect.shared.status`).

tqdm's ``auto`` bar draws in terminals and notebooks; it stays silent when standard error
is not a terminal (a log then gets one line per finished shape from the launcher's logging,
at INFO, and each failure once, at WARNING, when the sweep is assembled).
"""

from __future__ import annotations

import sys
from typing import Any


class SweepProgress:
    """Shows how far a sweep is: shapes done of the total, what runs now, kernels profiled.

    Args:
        total: (variant, shape) items in the sweep.
        quiet: show nothing.
        profiling: a profiler runs (else a dry run).
    """

    def __init__(self, total: int, *, quiet: bool = False, profiling: bool = True) -> None:
        self.total = total
        self.profiling = profiling
        self._text = ""
        self._bar: Any = None
        if not quiet:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit="shape", desc="torch_nsight sweep",
                             file=sys.stderr, disable=None, dynamic_ncols=True, leave=True)

    def update(self, *, done: int, failed: int, kernels: int, current: list[str]) -> None:
        """Show the state: items ended (``failed`` of them not ok), kernels profiled, and the
        items running now."""
        if self._bar is None:
            return
        parts = [", ".join(current)] if current else []
        parts.append(f"{kernels} kernels profiled" if self.profiling else "dry run")
        if failed:
            parts.append(f"{failed} failed")
        text = " | ".join(parts)
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)
        if text != self._text:
            self._text = text
            self._bar.set_postfix_str(text, refresh=True)

    def close(self) -> None:
        """End the bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class KernelProgress:
    """Shows how many kernels ncu profiled so far in a user's command (``profile``), with
    their rate, in place of ncu's own line per kernel (those go to the log file).

    Args:
        quiet: show nothing.
    """

    def __init__(self, *, quiet: bool = False) -> None:
        self.count = 0
        self._bar: Any = None
        if not quiet:
            from tqdm.auto import tqdm

            self._bar = tqdm(unit="kernel", desc="torch_nsight profile", file=sys.stderr,
                             disable=None, dynamic_ncols=True, leave=True)

    def kernel(self, name: str) -> None:
        """One more kernel profiled (``name`` as ncu printed it)."""
        self.count += 1
        if self._bar is not None:
            self._bar.update(1)
            if self.count % 25 == 1:
                self._bar.set_postfix_str(name[:40], refresh=False)

    def write(self, line: str) -> None:
        """Print one line of the command's own output above the bar."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            sys.stderr.write(line + "\n")

    def close(self) -> None:
        """End the bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
