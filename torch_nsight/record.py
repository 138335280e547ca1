"""The typed metadata of a :class:`~torch_nsight.Profile`: only what the tables cannot say.

Counts, coverage, shapes and the roofline basis are derived from the kernel table when asked
(see :class:`~torch_nsight.Profile`), so they never go stale after a concat or an expansion.
What is kept here is what no table row holds: where each source came from and what wrote it,
what a sweep was asked to do and how each of its (variant, shape) items ended, and the
PyTorch settings the profiled process ran with. Plain dataclasses, JSON in and out: no
pandas, no torch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, ClassVar

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2

SourceKind = str
"""``ncu-report``, ``profile`` (a saved Parquet profile), ``sweep`` (a sweep's output
directory) or ``legacy`` (a source named by a format-1 file)."""


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class _Record:
    """JSON in and out for the records below: tuple fields travel as lists."""

    _TUPLES: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = asdict(self)  # type: ignore[call-overload]
        for key in self._TUPLES:
            out[key] = list(out[key])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        values = {k: v for k, v in data.items() if k in known}
        for key in cls._TUPLES:
            values[key] = tuple(_as_list(values.get(key)))
        return cls(**values).checked()

    def checked(self) -> Any:
        """This record, its fields checked against the types they declare (for a record
        read out of a file).

        Raises:
            TypeError: a field holds another type.
        """
        for item in fields(self):  # type: ignore[arg-type]
            value = getattr(self, item.name)
            if not _fits(value, str(item.type)):
                raise TypeError(f"field {item.name!r} holds {type(value).__name__} "
                                f"{str(value)[:40]!r}, not {item.type}")
        return self


#: The field types :func:`_fits` checks (names and flags: what is printed and compared).
_SIMPLE = {"str": (str,), "SourceKind": (str,), "str | None": (str, type(None)),
           "bool": (bool,), "tuple[str, ...]": (tuple,), "dict[str, Any]": (dict,),
           "tuple[dict[str, Any], ...]": (tuple,)}


def _fits(value: Any, annotation: str) -> bool:
    """Whether ``value`` read from a file has the type its field declares."""
    types = _SIMPLE.get(annotation)
    if types is None:
        return True
    if not isinstance(value, types):
        return False
    element = {"tuple[str, ...]": str, "tuple[dict[str, Any], ...]": dict}.get(annotation)
    items: Any = value
    return element is None or all(isinstance(v, element) for v in items)


@dataclass(frozen=True)
class Source(_Record):
    """One file or folder the profile's rows were read from.

    Attributes:
        path: where it was read from (absolute).
        kind: see :data:`SourceKind`.
        label: the label its unlabelled rows were given (a shape or run name), if any.
        gpu: the GPU(s) it was recorded on, as the report names them.
        ncu_version: the Nsight Compute version that wrote it.
        reader_version: the ``ncu_report`` version that read it.
        metric_set: ``roofline``, ``lean``, ``full`` or ``custom``.
        missing_metrics: declared metrics it lacks (their columns are NaN).
        has_module_ranges: whether any of its kernels ran inside a module range.
        note: what the user should know about it (one sentence), if anything.
    """

    path: str
    kind: SourceKind = "ncu-report"
    label: str | None = None
    gpu: tuple[str, ...] = ()
    ncu_version: str | None = None
    reader_version: str | None = None
    metric_set: str | None = None
    missing_metrics: tuple[str, ...] = ()
    has_module_ranges: bool = True
    note: str | None = None

    _TUPLES: ClassVar[tuple[str, ...]] = ("gpu", "missing_metrics")


@dataclass(frozen=True)
class CollectionRecord(_Record):
    """What one collection was asked to do and how each item ended: a
    :func:`torch_nsight.sweep`, a :func:`torch_nsight.timeline` (``options["profiler"]`` is
    ``"torch.profiler"``) or a profiled script (``torch-nsight profile``). Kept in
    ``ProfileMeta.sweeps`` (the field's name is the saved format's).

    Attributes:
        shapes: shape labels, in sweep order.
        variants: variant labels, in order (``""`` for a single model).
        options: the sweep's options (backward, dtype, metric set, ...).
        items: one dict per (variant, shape): ``status`` (``ok``, ``failed``, ``timeout``,
            ``stopped``, ``skipped``), ``error``, ``elapsed_s``, ``replication`` verdict,
            ``outputs``, ``child``.
        problems: children whose report could not be used (one dict each: child, error).
        commands: the command line of each child.
        output_dir: the sweep's output directory, or None when it was temporary.
        dry_run: no profiler ran.
        created: when the sweep ended.
        timing: where its time went: ``total_s``, ``phases_s`` (phase -> seconds, see
            :mod:`torch_nsight.collect.shared.timing`), ``other_s`` and per child.
    """

    shapes: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    items: tuple[dict[str, Any], ...] = ()
    problems: tuple[dict[str, Any], ...] = ()
    commands: dict[str, Any] = field(default_factory=dict)
    output_dir: str | None = None
    dry_run: bool = False
    created: str | None = None
    timing: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[dict[str, Any]]:
        """Items that did not end ``ok``, plus children without a usable report."""
        failed = [{"variant": i.get("variant") or None, "shape": i.get("shape"),
                   "status": i.get("status"), "error": i.get("error"),
                   "child": i.get("child")}
                  for i in self.items if i.get("status") != "ok"]
        return failed + [{"variant": None, "shape": None, "status": "no report",
                          "error": p.get("error"), "child": p.get("child")}
                         for p in self.problems]

    _TUPLES: ClassVar[tuple[str, ...]] = ("shapes", "variants", "items", "problems")


@dataclass(frozen=True)
class ProfileMeta:
    """What a profile holds besides its tables.

    Attributes:
        sources: every file or folder its rows came from.
        sweeps: the sweeps and timelines that made it (none for reports recorded by hand).
        settings: the global PyTorch settings the profiled process ran with (TF32,
            cuDNN, SDPA backends), where known.
        created: when this record was built.
    """

    sources: tuple[Source, ...] = ()
    sweeps: tuple[CollectionRecord, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=now)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what :meth:`Profile.save` stores)."""
        return {"sources": [s.to_dict() for s in self.sources],
                "sweeps": [s.to_dict() for s in self.sweeps],
                "settings": dict(self.settings), "created": self.created}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, version: int = FORMAT_VERSION
                  ) -> ProfileMeta:
        """Read :meth:`to_dict` output, or the untyped dict of format 1.

        Args:
            data: the stored metadata.
            version: the format it was stored in.

        Returns:
            The metadata.
        """
        if version >= 2:
            return cls(sources=tuple(Source.from_dict(s) for s in data.get("sources", [])),
                       sweeps=tuple(CollectionRecord.from_dict(s) for s in data.get("sweeps", [])),
                       settings=dict(data.get("settings") or {}),
                       created=data.get("created") or now())
        return _from_format1(data)

    @classmethod
    def merge(cls, metas: Iterable[ProfileMeta]) -> ProfileMeta:
        """One record for profiles joined together: sources and sweeps in order, deduplicated;
        the settings of the first that has any."""
        metas = list(metas)
        sources: list[Source] = []
        for meta in metas:
            sources.extend(s for s in meta.sources if s not in sources)
        sweeps: list[CollectionRecord] = []
        for meta in metas:
            sweeps.extend(s for s in meta.sweeps if s not in sweeps)
        known = [m.settings for m in metas if m.settings]
        summaries = {stored_settings_summary(s) for s in known}
        if len(summaries) > 1:
            logger.warning("these profiles ran with different PyTorch settings (%s); the "
                           "profile states the first one's", " vs ".join(
                               sorted(s or "defaults" for s in summaries)))
        return cls(tuple(sources), tuple(sweeps), dict(known[0]) if known else {})


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _from_format1(data: Mapping[str, Any]) -> ProfileMeta:
    """The untyped ``meta`` dict of format 1 (commit a56250f and before) as a record."""
    gpu = tuple(_as_list(data.get("gpu")))
    sources = tuple(Source(path=str(path), kind="legacy", gpu=gpu,
                           ncu_version=_first(data.get("ncu_version")),
                           reader_version=data.get("reader_version"),
                           metric_set=_first(data.get("metric_set")),
                           missing_metrics=tuple(data.get("missing_metrics") or ()))
                    for path in data.get("sources", []))
    sweeps: tuple[CollectionRecord, ...] = ()
    if "results" in data or "sweep" in data:
        sweep = dict(data.get("sweep") or {})
        sweeps = (CollectionRecord(
            shapes=tuple(data.get("shapes") or ()), variants=tuple(data.get("variants") or ()),
            options={k: v for k, v in sweep.items() if k not in ("commands", "output_dir")},
            items=tuple(data.get("results") or ()), commands=sweep.get("commands") or {},
            output_dir=sweep.get("output_dir"), dry_run=bool(data.get("dry_run")),
            created=data.get("created")),)
    for record in (*sources, *sweeps):
        record.checked()
    return ProfileMeta(sources, sweeps, {}, data.get("created") or now())


def _first(value: Any) -> Any:
    values = _as_list(value)
    return values[0] if values else None


def stored_settings_summary(settings: Mapping[str, Any]) -> str:
    """The one-line summary of non-default PyTorch settings stored with them (``summary``:
    written where torch was at hand, so that reading it needs no torch)."""
    summary = settings.get("summary") if settings else None
    return summary if isinstance(summary, str) else ""
