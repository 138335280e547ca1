"""Exception types raised by torch_nsight.

Every error a user can hit derives from :class:`TorchNsightError`, and each message says
what happened and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "TorchNsightError",
    "NcuNotFoundError",
    "NcuVersionError",
    "CounterPermissionError",
    "NothingProfiledError",
    "ReportError",
    "MissingMetricError",
    "ShapeFailedError",
    "OutputWriteError",
    "OutputBusyError",
    "VerifyError",
    "StepsError",
]


class TorchNsightError(Exception):
    """Root of all torch_nsight errors."""


class NcuNotFoundError(TorchNsightError):
    """Nsight Compute (`ncu`) could not be found or started.

    Attributes:
        missing: no ``ncu`` was found at all (the command line then advises ``--ncu PATH``
            instead of the Python arguments).
    """

    def __init__(self, message: str, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


class NcuVersionError(TorchNsightError):
    """The `ncu` found is too old for what was asked."""


class CounterPermissionError(TorchNsightError):
    """`ncu` was not permitted to read GPU performance counters (ERR_NVGPUCTRPERM)."""


class NothingProfiledError(TorchNsightError):
    """`ncu` ran but profiled no kernel (it exits 0 in that case)."""


class ReportError(TorchNsightError):
    """A file is not a readable Nsight Compute report."""


class MissingMetricError(ReportError):
    """An analysis step needs a column (a metric, a range stack) that the source lacks."""


class ShapeFailedError(TorchNsightError):
    """One shape of a sweep failed in the profiled child process."""


class OutputWriteError(TorchNsightError):
    """An output file cannot be written (permissions, a full disk, a file-size limit...)."""


class OutputBusyError(TorchNsightError):
    """An output folder is being written by another process."""


class VerifyError(TorchNsightError):
    """``--verify`` could not measure a fix on the user's steps: a bad choice of steps or
    fixes, or the run without any fix timed no step."""


class StepsError(TorchNsightError, ValueError):
    """A step selection (``--steps``, ``--verify-steps``, ``$TORCH_NSIGHT_STEPS``) is not
    ``N``, ``A:B`` or ``A:`` with step indices from 0 and ``A < B``."""
