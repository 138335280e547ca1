"""Collect stage: profile a model across input shapes under Nsight Compute.

:func:`sweep` pickles the job, runs ``ncu <flags> python -m torch_nsight.collect.worker
<job>`` (one process per GPU, every shape inside it) and loads the report into a
:class:`~torch_nsight.Profile`. The modules, in the order data flows:

* :mod:`~torch_nsight.collect.api`: :func:`sweep`, the front door;
* :mod:`~torch_nsight.collect.job`: the job description and its (cloud)pickle file;
* :mod:`~torch_nsight.collect.ncu`: find and check ``ncu``, build its argument list, read
  its output;
* :mod:`~torch_nsight.collect.worker`: the child process;
* :mod:`~torch_nsight.collect.replicate`: identical siblings, profiled once;
* :mod:`~torch_nsight.collect.launch` and :mod:`~torch_nsight.collect.progress`: run and
  watch the children;
* :mod:`~torch_nsight.collect.assemble`: reports and results -> one Profile.
"""

from __future__ import annotations

from torch_nsight.collect.api import sweep

__all__ = ["sweep"]
