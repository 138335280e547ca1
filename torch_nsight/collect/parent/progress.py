"""Progress bars in the parent, from the child's status lines (see :mod:`torch_nsight.status`)
and ncu's line per kernel: a sweep's, one step per (variant, shape); ``profile``'s, one step
per kernel profiled.

tqdm's ``auto`` bar draws in terminals and notebooks, with the phase of each running shape
(warm-up, calls table, sibling check, iterations). Where standard error is not a terminal, a
sweep writes one line per shape and phase as it starts instead (a log also gets one line per
finished shape from the launcher's logging, at INFO, and each failure once, at WARNING, when
the sweep is assembled).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any


class _Bar:
    """One tqdm line on stderr (None when quiet), its postfix text, its end."""

    def __init__(self, total: int | None, *, unit: str, desc: str, quiet: bool) -> None:
        self._text = ""
        self._bar: Any = None
        if not quiet:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, disable=None,
                             dynamic_ncols=True, leave=True)

    def _advance(self, n: int) -> None:
        if n > self._bar.n:
            self._bar.update(n - self._bar.n)

    def _postfix(self, parts: list[str]) -> None:
        text = " | ".join(parts)
        if text != self._text:
            self._text = text
            self._bar.set_postfix_str(text, refresh=True)

    def close(self) -> None:
        """End the bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class SweepProgress(_Bar):
    """Shows how far a sweep is: shapes done of the total, what runs now, kernels profiled.

    Args:
        total: (variant, shape) items in the sweep.
        quiet: show nothing.
        profiling: a profiler runs (else a dry run).
    """

    def __init__(self, total: int, *, quiet: bool = False, profiling: bool = True) -> None:
        super().__init__(total, unit="shape", desc="torch_nsight sweep", quiet=quiet)
        self.total = total
        self.profiling = profiling
        self._said: set[str] = set()

    def update(self, *, done: int, failed: int, kernels: int, current: list[str],
               begun: Sequence[str] = ()) -> None:
        """Show the state: items ended (``failed`` of them not ok), kernels profiled, and the
        items running now with their phase (``4x16 (warm-up)``); where no bar is drawn (a
        pipe, a log), one line per item and phase ``begun`` since the last update."""
        if self._bar is None:
            return
        if self._bar.disable:
            for doing in begun:
                if doing not in self._said:
                    self._said.add(doing)
                    sys.stderr.write(f"torch_nsight sweep: {doing}\n")
                    sys.stderr.flush()
            return
        parts = [", ".join(current)] if current else []
        parts.append(f"{kernels} kernels profiled" if self.profiling else "dry run")
        if failed:
            parts.append(f"{failed} failed")
        self._advance(done)
        self._postfix(parts)


class ScriptProgress(_Bar):
    """``torch-nsight profile``'s line: kernels profiled in the command's chosen steps, their
    rate and the step running, in place of ncu's line per kernel (those go to the log file).

    The total (and so the ETA) is known once it can be: from ``expected`` (ncu's
    ``--launch-count``, or the kernels per step the last profile of the same command in the
    same folder recorded, times the steps), else from the steps already profiled.

    Args:
        steps: how many steps are profiled (None: not known, e.g. no ``--steps``).
        expected: kernels expected in all, or None.
        quiet: show nothing.
        unit: ``kernel``, or ``step`` for ``profile --timeline`` (no ncu: steps counted).
    """

    def __init__(self, steps: int | None, *, expected: int | None = None,
                 quiet: bool = False, unit: str = "kernel") -> None:
        super().__init__(steps if unit == "step" else expected, unit=unit,
                         desc="torch_nsight profile", quiet=quiet)
        self.steps = steps
        self.unit = unit
        self.count = 0

    def update(self, *, done: int, failed: int, kernels: int, current: list[str],
               begun: Sequence[str] = ()) -> None:
        """Show the state: steps ended (``failed`` of them raised), kernels profiled, the
        step running now."""
        self.count = kernels
        if self._bar is None:
            return
        if self.unit == "step":  # a timeline: the steps recorded
            self._advance(done)
            self._postfix(list(current) + ([f"{failed} raised"] if failed else []))
            return
        total = self._bar.total
        if done and self.steps and done < self.steps:
            total = round(kernels / done * self.steps)  # what the profiled steps took
        if total is not None and total < kernels:
            total = kernels
        if total != self._bar.total:
            self._bar.total = total
        self._advance(kernels)
        parts = list(current)
        if self.steps and self.steps > 1:
            parts.append(f"{done} of {self.steps} steps done")
        if failed:
            parts.append(f"{failed} raised")
        self._postfix(parts)

    def write(self, line: str) -> None:
        """Print one line of the command's own output above the bar."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            sys.stderr.write(line + "\n")


def describe_current(current: dict[str, Any]) -> str:
    """What a child does now (from its status file's current item): ``4x16 (warm-up)``, ``eager:4x16 (iterations)``."""
    label = (f"{current.get('variant')}:{current.get('shape')}" if current.get("variant")
             else str(current["shape"]))
    phase = PHASE_WORDS.get(str(current.get("phase")), current.get("phase"))
    return f"{label} ({phase})" if phase else label


#: The child's phases of a shape (collect/child/worker.py), in words.
PHASE_WORDS = {"warmup": "warm-up", "calls": "calls table", "check": "sibling check",
               "measure": "iterations"}
