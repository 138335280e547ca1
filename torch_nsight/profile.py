"""The one record that passes between stages.

A :class:`Profile` is a kernel table, an optional calls table (torch-level ops with their
shapes) and a typed :class:`~torch_nsight.record.ProfileMeta`. It is not changed once
built: steps that add rows or columns return a new Profile. Counts, coverage, shapes,
variants and GPUs are derived from the tables when asked, so they never go stale.
:func:`torch_nsight.loading.load`, its front door, builds one from any source; renderers
and the CLI receive it and nothing else.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import pandas as pd

from torch_nsight import analyze as analysis
from torch_nsight.analyze.frames import first_values, label_keys, with_columns
from torch_nsight.analyze.spread import runs_and_ranks
from torch_nsight.errors import MissingMetricError
from torch_nsight.record import CollectionRecord, ProfileMeta, Source
from torch_nsight.report import saved
from torch_nsight.units import counted, listed
from torch_nsight.vocabulary import (
    PROFILE_FINDING_COLUMNS,
    PROFILE_HOTSPOT_COLUMNS,
    PROFILE_MODULE_COLUMNS,
    PROFILE_MODULE_HOTSPOT_COLUMNS,
)

logger = logging.getLogger(__name__)

PathArg = Union[str, "os.PathLike[str]"]
_Copyable = TypeVar("_Copyable", pd.DataFrame, list[str])

# The stable columns of Profile.kernels, first and in this order; more may follow.
KERNEL_COLUMNS: tuple[str, ...] = (
    "variant", "shape", "run", "module", "module_path", "depth", "direction", "op", "context",
    "kernel", "kernel_full", "grid", "block", "duration_ns", "sm_pct", "mem_pct", "dram_bytes",
    "flops", "precision", "flops_complete", "intensity", "achieved_flops_per_s",
    "achieved_bytes_per_s", "peak_flops_per_s", "peak_bytes_per_s", "ridge_intensity",
    "roof_time_ns", "pct_of_roof", "headroom_ns", "roofline_side", "bound", "reason", "basis",
    "sol_bottleneck", "gpu", "metric_set", "source", "rank", "range_index", "kernel_index",
    "replicated_from",
)


def order_columns(kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` with :data:`KERNEL_COLUMNS` first (added, empty, where missing)."""
    for column in KERNEL_COLUMNS:
        if column not in kernels:
            kernels[column] = None if column in ("replicated_from", "rank") else float("nan")
    first = list(KERNEL_COLUMNS)
    return kernels.loc[:, first + [c for c in kernels.columns if c not in first]]


def _unique(values: Iterable[Any]) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if value is not None and not (isinstance(value, float) and pd.isna(value)) \
                and value not in seen:
            seen.append(value)
    return seen


@dataclass(frozen=True, eq=False, repr=False)
class Profile:
    """A profile: one row per profiled kernel launch, plus what was profiled and how. Not
    changed once built (steps return new profiles); equal only to the same object.

    Attributes:
        kernels: the kernel table (:data:`KERNEL_COLUMNS` first).
        meta: sources, sweeps and PyTorch settings (a :class:`~torch_nsight.record.ProfileMeta`;
            a format-1 ``dict`` is converted).
        calls: the calls table (torch-level ops with shapes, FLOPs and bytes, attributed like
            kernels: join on ``variant``, ``shape``, ``module_path``, ``direction``, ``op``),
            or None when the source recorded none.
        timeline: step windows and idle gaps of PyTorch profiler traces (see
            :mod:`torch_nsight.report.trace`), or None for Nsight Compute sources.
    """

    kernels: pd.DataFrame
    meta: ProfileMeta = field(default_factory=ProfileMeta)
    calls: pd.DataFrame | None = None
    timeline: pd.DataFrame | None = None
    # findings and other analyses computed once (:meth:`computed_once`)
    _computed: dict[tuple, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.meta, Mapping):
            object.__setattr__(self, "meta", ProfileMeta.from_dict(self.meta, version=1))
        if not isinstance(self.meta, ProfileMeta):
            raise TypeError(f"meta must be a ProfileMeta, got {type(self.meta).__name__}")
        if not isinstance(self.kernels, pd.DataFrame):
            raise TypeError(f"kernels must be a DataFrame, got {type(self.kernels).__name__}")

    # --- derived, never stored -------------------------------------------------------------
    @property
    def shapes(self) -> list[str]:
        """Shape labels: a sweep's in its order, then any other label of the table (or of
        the timeline, whose steps may have no GPU row)."""
        ordered = [s for sweep in self.meta.sweeps for s in sweep.shapes]
        column = first_values(self.kernels, "shape")
        steps = first_values(self.timeline, "shape") if self.timeline is not None else []
        return _unique([*ordered, *column, *steps])

    @property
    def variants(self) -> list[str]:
        """Variant labels (none for a single model)."""
        ordered = [v for sweep in self.meta.sweeps for v in sweep.variants if v]
        column = first_values(self.kernels, "variant")
        return _unique([*ordered, *column])

    @property
    def gpus(self) -> list[str]:
        """The GPUs the rows were recorded on."""
        column = first_values(self.kernels, "gpu")
        return _unique([*column, *(g for s in self.meta.sources for g in s.gpu)])

    @property
    def metric_sets(self) -> list[str]:
        """The metric sets of the sources (``roofline``, ``lean``, ``custom``...)."""
        return _unique(s.metric_set for s in self.meta.sources)

    @property
    def coverage(self) -> float:
        """Share (0..1) of GPU time spent in kernels inside a module range."""
        return analysis.coverage(self.kernels)

    @property
    def basis_counts(self) -> dict[str, int]:
        """How many kernels were classified by each basis (``ncu_rule``, ``roofline``...)."""
        if "basis" not in self.kernels:
            return {}
        return {str(k): int(v) for k, v in self.kernels["basis"].value_counts().items()}

    @property
    def replicated_rows(self) -> int:
        """Rows copied from a representative sibling rather than measured."""
        column = self.kernels.get("replicated_from")
        return 0 if column is None else int(column.notna().sum())

    @property
    def shallow_rows(self) -> int:
        """Rows a focused sweep did not profile under ncu (``deep_profiled`` False): the
        timeline's module and duration only."""
        if "deep_profiled" not in self.kernels:
            return 0
        return int((self.kernels["deep_profiled"] == False).sum())  # noqa: E712 - NaN is not False

    @property
    def results(self) -> list[dict[str, Any]]:
        """What each (variant, shape) of the sweeps and timelines did (status, error, ...)."""
        return [dict(item) for sweep in self.meta.sweeps for item in sweep.items]

    @property
    def failures(self) -> list[dict[str, Any]]:
        """The failed items of the sweeps and timelines, and children without a usable
        report."""
        return [f for sweep in self.meta.sweeps for f in sweep.failures]

    @property
    def replication(self) -> dict[str, Any]:
        """The sibling check's verdict per ``"variant|shape"``."""
        return {f"{i.get('variant') or ''}|{i.get('shape')}": i["replication"]
                for sweep in self.meta.sweeps for i in sweep.items if i.get("replication")}

    @property
    def notes(self) -> list[str]:
        """What the user should know about the sources (each names its file)."""
        return [f"{Path(s.path).name}: {s.note}" for s in self.meta.sources if s.note]

    # --- analysis ---------------------------------------------------------------------------
    def modules(self, depth: int | None = None, fold: bool = False) -> pd.DataFrame:
        """Return the module tree rolled up (see :func:`torch_nsight.analyze.module_tree`).

        Args:
            depth: deepest level kept (root = 0); None keeps all.
            fold: modules that differ only by the index of a repeated block
                (``layers.0`` ... ``layers.7`` and each of their children) are one row each,
                times summed, ``blocks`` saying how many (:func:`torch_nsight.analyze.fold_tree`).

        Returns:
            One row per module node: inclusive/exclusive time per run, share of total,
            kernel count, dominant bound, and the spread of the time over the runs: the
            columns of :data:`~torch_nsight.vocabulary.PROFILE_MODULE_COLUMNS` in their
            order, whatever the source (NaN or None where it does not tell: the shape of
            an unlabelled profile, the spread of a single run; ``blocks`` 1 unless folded).
        """
        return with_columns(self.module_table(depth, fold), PROFILE_MODULE_COLUMNS)

    def module_table(self, depth: int | None = None, fold: bool = False) -> pd.DataFrame:
        """:meth:`modules` with every column, in the analysis' order (for renderers)."""
        return self.computed_once(("modules", depth, fold), lambda: analysis.fold_tree(
            analysis.module_tree(self.kernels, depth, keep_runs=True), self.kernels)
            if fold else analysis.module_tree(self.kernels, depth))

    def hotspots(self, n: int = 10, order: Literal["headroom", "time"] = "headroom",
                 level: Literal["kernel", "module"] = "kernel",
                 fold: bool = True) -> pd.DataFrame:
        """Return the top kernels or modules (see :func:`torch_nsight.analyze.hotspots`).

        Args:
            n: how many.
            order: rank by recoverable time (``headroom``) or by ``time``.
            level: ``kernel`` or ``module``.
            fold: kernel sites that differ only by the index of a repeated block
                (``layers.0`` ... ``layers.7``) are one row, ``blocks`` saying how many
                (:mod:`torch_nsight.analyze.fold`); False for one row per site.

        Returns:
            Ranked rows with their roofline class and ``next_step``: at ``level="kernel"``
            the columns of :data:`~torch_nsight.vocabulary.PROFILE_HOTSPOT_COLUMNS`
            (module, direction, op, kernel, time, bound, reason, headroom and next step
            first), at ``level="module"`` those of
            :data:`~torch_nsight.vocabulary.PROFILE_MODULE_HOTSPOT_COLUMNS`; all of them
            whatever the source, NaN or None where it does not tell.
        """
        columns = (PROFILE_HOTSPOT_COLUMNS if level == "kernel"
                   else PROFILE_MODULE_HOTSPOT_COLUMNS)
        return with_columns(self.hotspot_table(n, order, level, fold), columns)

    def hotspot_table(self, n: int = 10, order: Literal["headroom", "time"] = "headroom",
                      level: Literal["kernel", "module"] = "kernel",
                      fold: bool = True) -> pd.DataFrame:
        """:meth:`hotspots` with every column, in the analysis' order (for renderers)."""
        return self.computed_once(("hotspots", n, order, level, fold), lambda: worded(
            "hotspots", analysis.hotspots(self.kernels, n=n, order=order, level=level,
                                          fold=fold)))

    def findings(self, fold: bool = True) -> pd.DataFrame:
        """Return the fixes worth making, each with the time per run it may recover (see
        :func:`torch_nsight.analyze.findings`).

        Args:
            fold: one finding of the same kind in each repeated block is one row with the
                gain of all of them (``blocks`` saying how many); False for one per block.

        Returns:
            One row per finding, the largest ``est_gain_ns`` first, with its evidence, a
            fix in PyTorch terms, the gain's basis and a confidence:
            the columns of :data:`~torch_nsight.vocabulary.PROFILE_FINDING_COLUMNS`
            (module, finding, gain and fix first), all of them whatever the source
            (``est_gain_ns`` NaN where no gain is known).
        """
        return with_columns(self.finding_table(fold), PROFILE_FINDING_COLUMNS)

    def finding_table(self, fold: bool = True) -> pd.DataFrame:
        """:meth:`findings` with every column (for renderers): the finding table's
        (:data:`~torch_nsight.vocabulary.FINDING_COLUMNS`, ``evidence`` and ``fix`` worded by
        render from the codes), then the codes
        (:data:`~torch_nsight.vocabulary.FINDING_CODE_COLUMNS`), then ``blocks`` where
        folded."""
        found = self.computed_once(("finding_codes",), lambda: analysis.findings(
            self.kernels, self.calls, self.meta.settings, self.timeline))  # for both folds
        return self.computed_once(("findings", fold), lambda: worded("findings", (
            analysis.fold_findings(found, self.kernels) if fold else found)))

    def computed_once(self, key: tuple[Any, ...], compute: Callable[[], _Copyable]
                      ) -> _Copyable:
        """A copy of ``compute()``, called the first time ``key`` is asked of this profile
        (a table or list derived from its tables alone, which never change once built)."""
        if key not in self._computed:
            self._computed[key] = compute()
        return self._computed[key].copy()

    def by_kernel(self) -> pd.DataFrame:
        """Return one row per kernel name and shape, across the modules that launch it
        (see :func:`torch_nsight.analyze.by_kernel`)."""
        return self.computed_once(("by_kernel",), lambda: analysis.by_kernel(self.kernels))

    def by_shape(self) -> pd.DataFrame:
        """Return one row per (variant, shape): time, launches, coverage, top module, bound
        mix (see :func:`torch_nsight.analyze.by_shape`)."""
        return self.computed_once(("by_shape",), lambda: analysis.by_shape(self.kernels))

    def by_rank(self) -> pd.DataFrame:
        """Return one row per distributed rank: time, launches, NCCL share, top module
        (see :func:`torch_nsight.analyze.by_rank`).

        Raises:
            ValueError: no kernel has a rank (load ``report-rank<R>`` files).
        """
        return analysis.by_rank(self.kernels)

    def normalize(self, baseline: str) -> pd.DataFrame:
        """Return each module's and kernel's speedup over variant ``baseline``, per shape.

        Args:
            baseline: the variant label to compare against.

        Returns:
            See :func:`torch_nsight.analyze.normalize`.

        Raises:
            ValueError: ``baseline`` is not a variant of this profile.
        """
        return analysis.normalize(self.kernels, baseline)

    def with_kernels(self, kernels: pd.DataFrame) -> Profile:
        """Return a new profile with another kernel table and the same metadata and calls."""
        return dataclasses.replace(self, kernels=order_columns(kernels.copy()))

    # --- display ----------------------------------------------------------------------------
    def describe(self) -> str:
        """One line: GPU, kernel count, shapes, variants, coverage and non-default settings."""
        from torch_nsight.record import stored_settings_summary

        shapes, variants = listed(self.shapes) or "unlabelled", listed(self.variants)
        try:
            coverage = self.coverage
        except MissingMetricError:  # a table built by hand: say what can be said
            coverage = float("nan")
        settings = stored_settings_summary(self.meta.settings)
        most, ranks = runs_and_ranks(self.kernels)
        noun = ("kernel launch", "kernel launches") if most > 1 else ("kernel", "kernels")
        count = (counted(len(self.kernels), *noun) + f" over {most} runs" * (most > 1)
                 + f" of {ranks} ranks" * (ranks > 1))
        return (f"{listed(self.gpus) or 'unknown GPU'}: {count}, shapes "
                f"{shapes}" + (f", variants {variants}" if variants else "")
                + (f"; {100 * coverage:.0f}% of GPU time inside module ranges"
                   if coverage == coverage else "")
                + (f"; {replicated:,} rows replicated" if (replicated := self.replicated_rows)
                   else "")
                + (f"; {shallow:,} rows timed by the timeline only (focus)"
                   if (shallow := self.shallow_rows) else "")
                + (f"; settings: {settings}" if settings else ""))

    def __repr__(self) -> str:
        failures = len(self.failures)
        return (f"<Profile {self.describe()}" + (f"; {failures} failed" if failures else "")
                + ">")

    def _repr_html_(self) -> str | None:
        """What a notebook shows: :func:`torch_nsight.render.notebook.profile_html` (the
        render stage registers it, see :func:`set_html_renderer`), or None for the text."""
        return _HTML_RENDERER[0](self) if _HTML_RENDERER else None

    # --- persistence ------------------------------------------------------------------------
    def save(self, path: PathArg) -> Path:
        """Write the profile to one Parquet file (metadata and calls as JSON inside it).

        Args:
            path: the file to write (conventionally ``*.parquet``).

        Returns:
            The path written.
        """
        return saved.write_profile(self.kernels, self.calls, self.meta, path,
                                   timeline=self.timeline)

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
        kernels, calls, meta = saved.read_profile(path)
        return cls(order_columns(kernels), meta, calls, saved.read_timeline(path))

    @classmethod
    def concat(cls, profiles: Iterable[Profile]) -> Profile:
        """Join profiles (of several shapes, variants or runs) into one.

        Each row keeps its provenance (``source``, ``gpu``, ``metric_set`` columns); joining
        profiles from different GPUs or metric sets logs a warning, since their numbers
        are not comparable one to one.

        Args:
            profiles: the profiles; their tables may differ in columns (missing -> NaN).

        Returns:
            One profile.

        Raises:
            ValueError: ``profiles`` is empty.
        """
        profiles = list(profiles)
        if not profiles:
            raise ValueError("profiles must hold at least one Profile")
        kernels = pd.concat([p.kernels for p in profiles], ignore_index=True)
        calls = [p.calls for p in profiles if p.calls is not None]
        timelines = [p.timeline for p in profiles if p.timeline is not None]
        joined = cls(order_columns(kernels), ProfileMeta.merge(p.meta for p in profiles),
                     pd.concat(calls, ignore_index=True) if calls else None,
                     pd.concat(timelines, ignore_index=True) if timelines else None)
        warn_if_mixed(joined)
        keys = [label_keys(p.kernels) for p in profiles]
        shared = set().union(*(a & b for i, a in enumerate(keys) for b in keys[i + 1:]))
        if shared:
            logger.warning("joined profiles share (variant, shape) labels %s: their rows are "
                           "averaged as runs of one thing; load them with labels= (or "
                           "label_rows each) to keep them apart", sorted(shared)[:3])
        return joined


#: How a notebook draws a Profile, and the words below: render registers them.
_HTML_RENDERER: list[Callable[[Profile], str]] = []


def set_html_renderer(render: Callable[[Profile], str]) -> None:
    """Make ``render`` what :meth:`Profile._repr_html_` returns (the last one set wins)."""
    _HTML_RENDERER[:] = [render]


_WORDS: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {}  # table -> its words
_WORDED = {"findings": ("evidence", "fix"), "hotspots": ("reason", "next_step"),
           "kernels": ("reason",)}


def set_words(table: str, words: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    """Make ``words`` what words ``table``'s codes (render registers them; the last wins)."""
    _WORDS[table] = words


def worded(table: str, coded: pd.DataFrame, quiet: bool = False) -> pd.DataFrame:
    """``coded`` worded by what render registered for ``table`` (else None beside it)."""
    if table in _WORDS:
        return _WORDS[table](coded)
    if not quiet:
        logger.warning("render's words are not imported: %s left empty",
                       ", ".join(_WORDED[table]))
    return coded.assign(**{c: None for c in _WORDED[table] if c not in coded})


def warn_if_mixed(profile: Profile) -> None:
    """Log a warning when ``profile`` joins rows of different GPUs or metric sets."""
    for what, values in (("GPUs", profile.gpus), ("metric sets", profile.metric_sets)):
        if len(values) > 1:
            logger.warning("this profile joins rows from different %s (%s): compare them "
                           "with care (the gpu and metric_set columns say which is which)",
                           what, ", ".join(map(str, values)))


__all__ = ["Profile", "KERNEL_COLUMNS", "ProfileMeta", "Source", "CollectionRecord"]
