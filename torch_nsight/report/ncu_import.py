"""Import NVIDIA's report reader, ``ncu_report``: the ``ncu-report`` package from PyPI ahead
of Nsight Compute's own copy (which crashes once numpy is loaded), and its workload types.
"""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path
from typing import Any

from torch_nsight.errors import ReportError

logger = logging.getLogger(__name__)

__all__ = ["import_reader", "WORKLOADS"]

#: ncu_report's workload type values -> ``kernel``, ``graph``, ``range``... (filled by
#: :func:`import_reader`).
WORKLOADS: dict[int, str] = {}


def _bundled_with_ncu(origin: str | None) -> bool:
    """Whether a module file is the copy of the reader in an Nsight Compute install
    (``.../nsight-compute/<version>/extras/python``)."""
    if not origin:
        return False
    folder = Path(origin).parent
    return folder.name == "python" and folder.parent.name == "extras"


def _packaged_reader() -> Path | None:
    """The folder holding the ``ncu-report`` package from PyPI, when it is installed."""
    from importlib import metadata

    try:
        folder = Path(str(metadata.distribution("ncu-report").locate_file("")))
    except metadata.PackageNotFoundError:
        return None
    return folder if (folder / "ncu_report" / "__init__.py").is_file() else None


def _prefer_the_package() -> str | None:
    """Put the ``ncu-report`` package ahead of Nsight Compute's own copy of the reader.

    That copy (``extras/python``, on ``PYTHONPATH`` by hand) crashes the process (a
    segmentation fault in ``IMetric.unit()``) when numpy was imported before it, seen with
    ncu 2025.3.1 on the GPU machine, and torch_nsight always imports numpy first; the PyPI
    package, a dependency, does not.

    Returns:
        The folder put first on ``sys.path`` for the import (to take off again), or None.
    """
    import importlib.util

    if "ncu_report" in sys.modules:
        return None
    spec = importlib.util.find_spec("ncu_report")
    if spec is None or not _bundled_with_ncu(spec.origin):
        return None
    packaged = _packaged_reader()
    if packaged is None:
        logger.warning("the report reader comes from Nsight Compute's own copy (%s), which "
                       "crashes once numpy is loaded (ncu 2025.3.1): pip install ncu-report",
                       spec.origin)
        return None
    logger.info("reading reports with the ncu-report package in %s, not Nsight Compute's "
                "copy %s", packaged, spec.origin)
    sys.path.insert(0, str(packaged))
    return str(packaged)


@functools.cache  # once: read_action asks for it per kernel
def import_reader() -> Any:
    """Import ``ncu_report`` (the ``ncu-report`` package first, see
    :func:`_prefer_the_package`) and learn its workload types.

    Raises:
        ReportError: the reader is not installed.
    """
    first = _prefer_the_package()
    try:
        import ncu_report
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ReportError(
            "the Nsight Compute report reader is not installed: pip install ncu-report"
        ) from err
    finally:
        if first is not None and first in sys.path:  # the rest of the process as it was
            sys.path.remove(first)
    if not WORKLOADS:
        action = ncu_report.IAction
        for label in ("KERNEL", "GRAPH", "RANGE", "CMDLIST", "SUBGRID_SCHEDULE"):
            value = getattr(action, f"WorkloadType_{label}", None)
            if value is not None:
                WORKLOADS[int(value)] = label.lower()
    return ncu_report
