"""The parent's progress line, from the child's status lines (see :mod:`torch_nsight.status`)
and ncu's line per kernel: one class for a sweep's items, ``profile``'s kernels and the steps
of a timeline or a timed run.

tqdm's ``auto`` bar draws in terminals and notebooks, with the phase of each running shape
(warm-up, calls table, sibling check, iterations). Where standard error is not a terminal, a
sweep writes one line per shape and phase as it starts instead (a log also gets one line per
finished shape from the launcher's logging, at INFO, and each failure once, at WARNING, when
the sweep is assembled).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Literal

from torch_nsight.units import counted

#: What a progress line counts: a sweep's (variant, shape) items, the kernels profiled in a
#: command's chosen steps, or the chosen steps themselves (a timeline, a bare timed run).
ProgressKind = Literal["shape", "kernel", "step"]
_WHAT = {"shape": "torch_nsight sweep", "kernel": "torch_nsight profile",
         "step": "torch_nsight profile"}


class Progress:
    """The one progress line of every run the parent watches, on standard error (nothing
    when ``quiet``), drawn by tqdm's ``auto`` bar in terminals and notebooks.

    * ``shape`` (a sweep): items done of ``total``, what runs now with its phase (``4x16
      (warm-up)``), kernels profiled; where no bar is drawn (a pipe, a log), one line per
      item and phase as it starts.
    * ``kernel`` (``profile``): kernels profiled in the chosen steps, their rate, the step
      running, in place of ncu's line per kernel (those go to the log file). The total (and
      so the ETA) is ``total`` when known (ncu's ``--launch-count``, or what the last profile
      of the same command recorded, times the steps), else from the steps already profiled.
    * ``step`` (``profile --timeline``, a run timed by its steps): the steps ended.

    Args:
        kind: what it counts (:data:`ProgressKind`).
        total: items (``shape``), kernels expected (``kernel``) or steps (``step``); None:
            not known.
        steps: how many steps are chosen (``kernel``; None: not known, e.g. no ``--steps``).
        quiet: show nothing.
        profiling: a profiler runs (``shape``; else a dry run).
    """

    def __init__(self, kind: ProgressKind, total: int | None, *, steps: int | None = None,
                 quiet: bool = False, profiling: bool = True) -> None:
        self.kind = kind
        self.steps = steps
        self.profiling = profiling
        self._said: set[str] = set()
        self._text = ""
        self._bar: Any = None
        if not quiet:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit=kind, desc=_WHAT[kind], file=sys.stderr,
                             disable=None, dynamic_ncols=True, leave=True)

    def update(self, *, done: int, failed: int, kernels: int, current: list[str],
               begun: Sequence[str] = ()) -> None:
        """Show the state: items or steps ended (``failed`` of them not ok), kernels
        profiled, what runs now; ``begun``: the items and phases started since the last
        update (written as lines where no bar is drawn)."""
        if self._bar is None:
            return
        if self.kind == "shape":
            self._shapes(done, failed, kernels, current, begun)
        elif self.kind == "step":
            self._advance(done)
            self._postfix(list(current) + ([f"{failed} raised"] if failed else []))
        else:
            self._kernels(done, failed, kernels, current)

    def _shapes(self, done: int, failed: int, kernels: int, current: list[str],
                begun: Sequence[str]) -> None:
        if self._bar.disable:
            for doing in begun:
                if doing not in self._said:
                    self._said.add(doing)
                    sys.stderr.write(f"torch_nsight sweep: {doing}\n")
                    sys.stderr.flush()
            return
        parts = [", ".join(current)] if current else []
        parts.append(f"{counted(kernels, 'kernel')} profiled" if self.profiling else "dry run")
        if failed:
            parts.append(f"{failed} failed")
        self._advance(done)
        self._postfix(parts)

    def _kernels(self, done: int, failed: int, kernels: int, current: list[str]) -> None:
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

    def _advance(self, n: int) -> None:
        if n > self._bar.n:
            self._bar.update(n - self._bar.n)

    def _postfix(self, parts: list[str]) -> None:
        text = " | ".join(parts)
        if text != self._text:
            self._text = text
            self._bar.set_postfix_str(text, refresh=True)

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


def describe_current(current: dict[str, Any]) -> str:
    """What a child does now (from its status file's current item): ``4x16 (warm-up)``, ``eager:4x16 (iterations)``."""
    label = (f"{current.get('variant')}:{current.get('shape')}" if current.get("variant")
             else str(current["shape"]))
    phase = PHASE_WORDS.get(str(current.get("phase")), current.get("phase"))
    return f"{label} ({phase})" if phase else label


#: The child's phases of a shape (collect/child/worker.py), in words.
PHASE_WORDS = {"warmup": "warm-up", "calls": "calls table", "check": "sibling check",
               "measure": "iterations"}
