"""The reader of profiles saved by :meth:`torch_nsight.Profile.save` (``.parquet``): their
tables come analyzed already (see :mod:`torch_nsight.report.saved`)."""

from __future__ import annotations

from pathlib import Path

from torch_nsight.report import saved
from torch_nsight.report.cache import CACHE_SUFFIX
from torch_nsight.report.source_base import ReadOptions, SourceData


class SavedProfile:
    """Parquet files written by :meth:`torch_nsight.Profile.save` (any format version)."""

    name = "profile"

    def accepts(self, path: Path) -> bool:
        """Files named ``*.parquet`` that are not report caches."""
        return path.suffix.lower() == ".parquet" and not path.name.endswith(CACHE_SUFFIX)

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Read the saved tables and metadata."""
        kernels, calls, meta = saved.read_profile(path)
        return SourceData(kernels, list(meta.sources), analyzed=True, calls=calls,
                          sweeps=list(meta.sweeps), settings=dict(meta.settings),
                          timeline=saved.read_timeline(path))
