"""Collect stage: profile a model across input shapes under Nsight Compute.

:func:`sweep` pickles the job, runs ``ncu <flags> python -m torch_nsight.collect.child.start
<job>`` (one process per GPU, every shape inside it) and loads the sweep's output directory
into a :class:`~torch_nsight.Profile`. The code is split by the process it runs in:

* :mod:`~torch_nsight.collect.parent`: the user's process. :mod:`~.parent.sweep`, the front
  door; :mod:`~.parent.plan`, its plan; :mod:`~.parent.engine`, the one route of every plan
  (a sweep's, a command's): launch, settle, load; :mod:`~.parent.launch`, run and watch the
  children; :mod:`~.parent.outcomes`, what they left; :mod:`~.parent.progress`, the
  progress bar.
* :mod:`~torch_nsight.collect.child`: the profiled process, under ``ncu``.
  :mod:`~.child.start`, its entry point (CUDA starts while it imports); :mod:`~.child.worker`,
  what it runs; :mod:`~.child.steps`, inputs and one iteration;
  :mod:`~.child.siblings`, identical siblings profiled once.
* :mod:`~torch_nsight.collect.shared`: what both sides agree on. :mod:`~.shared.job`, the
  job and its file; :mod:`~.shared.ncu`, the ``ncu`` command line and output;
  :mod:`torch_nsight.status`, the child's progress lines. The output directory's layout is in
  :mod:`torch_nsight.formats`, since the reporter reads it too.

:mod:`~torch_nsight.collect.timeline` is the cheap first look: PyTorch's profiler in the
user's own process, no ``ncu``, no child.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch_nsight.collect.parent.sweep import sweep

__all__ = ["sweep"]


def __getattr__(name: str) -> Any:
    # on first use: the child processes live in this package too, and never import the
    # parent's code
    if name == "sweep":
        from torch_nsight.collect.parent.sweep import sweep

        globals()["sweep"] = sweep
        return sweep
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
