"""Report stage: ``.ncu-rep`` files -> a tidy kernel table (``ncu_report`` and pandas, no torch).

:func:`read_report` reads one report (``.ncu-rep`` or ``.ncu-rep.xz``) into a DataFrame with
one row per profiled kernel: names, launch shape, one column per declared metric, Nsight
Compute's ``SOLBottleneck`` verdict and the NVTX ranges around the kernel. Attribution and
classification are the analyze stage's job.

The names below are imported when first used: the process that reads reports for the
others (:mod:`torch_nsight.report.read_worker`) imports NVIDIA's reader, not pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch_nsight.naming import lazy_names

if TYPE_CHECKING:
    from torch_nsight.report.cache import CACHE_SUFFIX, cache_path
    from torch_nsight.report.kernel_table import RAW_COLUMNS, SCHEMA_VERSION, read_report
    from torch_nsight.report.names import format_dims, short_kernel_name

__all__ = ["read_report", "RAW_COLUMNS", "SCHEMA_VERSION", "CACHE_SUFFIX", "cache_path",
           "short_kernel_name", "format_dims"]

_LAZY = {"read_report": "kernel_table", "RAW_COLUMNS": "kernel_table",
         "SCHEMA_VERSION": "kernel_table",
         "CACHE_SUFFIX": "cache", "cache_path": "cache", "short_kernel_name": "names",
         "format_dims": "names"}


__getattr__ = lazy_names(__name__, _LAZY)
