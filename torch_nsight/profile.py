"""The one record that passes between stages: a profile's kernel table plus metadata.

A :class:`Profile` is built by :func:`load` (from ``.ncu-rep`` reports) or by
:func:`torch_nsight.sweep`; renderers and the CLI receive it and nothing else. It saves to
and loads from one Parquet file: the kernel table, with the metadata as JSON in the file's
key-value metadata.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Union

import pandas as pd

from torch_nsight import analyze as steps
from torch_nsight.errors import ReportError
from torch_nsight.report import read_report
from torch_nsight.report.cache import plain_strings

logger = logging.getLogger(__name__)

PathArg = Union[str, "os.PathLike[str]"]
FORMAT_VERSION = 1
_META_KEY = b"torch_nsight.profile"

# The stable columns of Profile.kernels, first and in this order; more may follow.
KERNEL_COLUMNS: tuple[str, ...] = (
    "variant", "shape", "run", "module", "module_path", "depth", "direction", "op", "context",
    "kernel", "kernel_full", "grid", "block", "duration_ns", "sm_pct", "mem_pct", "dram_bytes",
    "flops", "precision", "flops_complete", "intensity", "achieved_flops_per_s",
    "achieved_bytes_per_s", "peak_flops_per_s", "peak_bytes_per_s", "ridge_intensity",
    "roof_time_ns", "pct_of_roof", "headroom_ns", "roofline_side", "bound", "reason", "basis",
    "sol_bottleneck", "gpu", "source", "range_index", "kernel_index",
)


def _order(kernels: pd.DataFrame) -> pd.DataFrame:
    first = [c for c in KERNEL_COLUMNS if c in kernels]
    return kernels.loc[:, first + [c for c in kernels.columns if c not in first]]


def _unique(values: Iterable[Any]) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if value is not None and not (isinstance(value, float) and pd.isna(value)) \
                and value not in seen:
            seen.append(value)
    return seen


@dataclass
class Profile:
    """A profile: one row per profiled kernel launch, plus what was profiled and how.

    Attributes:
        kernels: the kernel table (:data:`KERNEL_COLUMNS` first).
        meta: ``gpu``, ``ncu_version``, ``sources`` (report paths), ``metric_set``,
            ``shapes``, ``variants``, ``failures`` (list of dicts), ``created`` and more.
    """

    kernels: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def modules(self, depth: int | None = None) -> pd.DataFrame:
        """Return the module tree rolled up (see :func:`torch_nsight.analyze.module_tree`).

        Args:
            depth: deepest level kept (root = 0); None keeps all.

        Returns:
            One row per module node: inclusive/exclusive time per run, share of total,
            kernel count, dominant bound.
        """
        return steps.module_tree(self.kernels, depth)

    def hotspots(self, n: int = 10, by: Literal["headroom", "time"] = "headroom",
                 level: Literal["kernel", "module"] = "kernel") -> pd.DataFrame:
        """Return the top kernels or modules (see :func:`torch_nsight.analyze.hotspots`).

        Args:
            n: how many.
            by: rank by recoverable time (``headroom``) or by ``time``.
            level: ``kernel`` or ``module``.

        Returns:
            Ranked rows with their roofline class and ``next_step``.
        """
        return steps.hotspots(self.kernels, n=n, by=by, level=level)

    def normalize(self, baseline: str) -> pd.DataFrame:
        """Return each module's and kernel's speedup over variant ``baseline``, per shape.

        Args:
            baseline: the variant label to compare against.

        Returns:
            See :func:`torch_nsight.analyze.normalize`.

        Raises:
            ValueError: ``baseline`` is not a variant of this profile.
        """
        return steps.normalize(self.kernels, baseline)

    @property
    def coverage(self) -> float:
        """Share (0..1) of GPU time spent in kernels inside a module range."""
        return steps.coverage(self.kernels)

    def save(self, path: PathArg) -> Path:
        """Write the profile to one Parquet file (metadata as JSON inside it).

        Args:
            path: the file to write (conventionally ``*.parquet``).

        Returns:
            The path written.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        target = Path(path)
        table = pa.Table.from_pandas(self.kernels, preserve_index=False)
        stored = json.dumps({"format": FORMAT_VERSION, "meta": self.meta}, default=str)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               _META_KEY: stored})
        pq.write_table(table, target)
        return target

    @classmethod
    def read(cls, path: PathArg) -> Profile:
        """Read a profile written by :meth:`save`, by this or an older version.

        Columns an older file lacks are added as NaN.

        Args:
            path: the file.

        Returns:
            The profile.

        Raises:
            ReportError: the file is missing or was not written by :meth:`save`.
        """
        import pyarrow.parquet as pq

        source = Path(path)
        if not source.is_file():
            raise ReportError(f"profile {source} does not exist")
        try:
            table = pq.read_table(source)
        except Exception as err:  # pyarrow raises several types for non-Parquet input
            raise ReportError(f"{source} is not a Parquet file written by Profile.save: "
                              f"{err}") from err
        stored = (table.schema.metadata or {}).get(_META_KEY)
        if stored is None:
            raise ReportError(f"{source} is Parquet but not a torch_nsight profile; to read a "
                              "report use torch_nsight.load()")
        kernels = plain_strings(table.to_pandas())
        for column in KERNEL_COLUMNS:
            if column not in kernels:
                kernels[column] = float("nan")
        for column in ("nvtx_stack", "nvtx_start_end", "nvtx_other"):
            if column in kernels:
                kernels[column] = [tuple(v) if v is not None else () for v in kernels[column]]
        return cls(_order(kernels), json.loads(stored).get("meta", {}))

    @classmethod
    def concat(cls, profiles: Iterable[Profile]) -> Profile:
        """Join profiles (of several shapes, variants or runs) into one.

        Args:
            profiles: the profiles; their tables may differ in columns (missing -> NaN).

        Returns:
            One profile; list-valued metadata is merged, ``created`` is now.

        Raises:
            ValueError: ``profiles`` is empty.
        """
        profiles = list(profiles)
        if not profiles:
            raise ValueError("profiles must hold at least one Profile")
        kernels = pd.concat([p.kernels for p in profiles], ignore_index=True)
        meta: dict[str, Any] = {}
        for profile in profiles:
            for key, value in profile.meta.items():
                meta.setdefault(key, value)
        for key in ("sources", "shapes", "variants", "missing_metrics"):
            meta[key] = _unique(v for p in profiles for v in p.meta.get(key, []))
        meta["failures"] = [f for p in profiles for f in p.meta.get("failures", [])]
        gpus = _unique(g for p in profiles for g in _as_list(p.meta.get("gpu")))
        meta["gpu"] = gpus[0] if len(gpus) == 1 else gpus
        meta["created"] = _now()
        return cls(_order(kernels), meta)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _paths(paths: PathArg | Iterable[PathArg]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    if not isinstance(paths, Iterable):
        raise TypeError(f"paths must be a path or an iterable of paths, got "
                        f"{type(paths).__name__}")
    out = []
    for item in paths:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"paths must hold str or os.PathLike items, got "
                            f"{type(item).__name__}")
        out.append(Path(item))
    if not out:
        raise ValueError("paths is empty: pass at least one .ncu-rep file")
    return out


def load(paths: PathArg | Iterable[PathArg], *, shapes: Sequence[str] | None = None,
         cache: bool = True) -> Profile:
    """Read Nsight Compute reports into a :class:`Profile`: attributed and classified.

    Args:
        paths: one ``.ncu-rep`` / ``.ncu-rep.xz`` or several (one per shape or run).
        shapes: a shape label per path, used for kernels that no ``measure`` range labels.
        cache: keep each report's tidy table in ``<report>.tn-cache.parquet`` beside it
            (skipped where that cannot be written) so that the next load is instant.

    Returns:
        The profile; ``meta["coverage"]`` is the share of GPU time inside a module range.

    Raises:
        TypeError: ``paths`` or ``shapes`` has the wrong type.
        ValueError: ``paths`` is empty, or ``shapes`` has a different length.
        ReportError: a file is missing, unreadable or not a report with kernels.
    """
    files = _paths(paths)
    if shapes is not None:
        if isinstance(shapes, str) or not all(isinstance(s, str) for s in shapes):
            raise TypeError("shapes must be a sequence of str labels, one per path")
        if len(shapes) != len(files):
            raise ValueError(f"shapes has {len(shapes)} labels for {len(files)} paths")
    tables, metas = [], []
    for file in files:
        table, meta = read_report(file, cache=cache)
        tables.append(table)
        metas.append(meta)
    raw = pd.concat(tables, ignore_index=True)
    kernels = steps.analyze(raw)
    sources = [str(file.resolve()) for file in files]
    if shapes is not None:
        kernels = steps.label_shapes(kernels, dict(zip(sources, shapes, strict=True)))
    gpus = _unique(g for m in metas for g in _as_list(m.get("gpu")))
    meta: dict[str, Any] = {
        "gpu": gpus[0] if len(gpus) == 1 else gpus,
        "ncu_version": _single(m.get("ncu_version") for m in metas),
        "reader_version": metas[0].get("reader_version"),
        "sources": sources,
        "metric_set": _single(m.get("metric_set") for m in metas),
        "missing_metrics": _unique(n for m in metas for n in m.get("missing_metrics", [])),
        "shapes": _unique(kernels["shape"]),
        "variants": _unique(kernels["variant"]),
        "kernels": int(len(kernels)),
        "coverage": steps.coverage(kernels),
        "basis": {str(k): int(v) for k, v in kernels["basis"].value_counts().items()},
        "failures": [],
        "created": _now(),
    }
    logger.info("loaded %d kernels from %d report(s); %.0f%% of GPU time attributed",
                len(kernels), len(files), 100 * meta["coverage"])
    return Profile(_order(kernels), meta)


def _single(values: Iterable[Any]) -> Any:
    distinct = _unique(values)
    return distinct[0] if len(distinct) == 1 else (distinct or None)
