"""The registry of finding checks, as ``torch/utils/flop_counter.py`` registers its formulas.

A check is a small function of the prepared :class:`Context` that returns its findings as
typed records (:class:`~.record.Finding`: codes and numbers, no words); one decorator line
registers it::

    @finding_check("small_grid")
    def small_grid(context: Context) -> list[Finding]: ...

Checks run in the order they were registered; each sees in ``context.claimed`` the kernel
rows the checks before it reported, so that a kernel is not reported twice. Render words
each record from its codes (:mod:`torch_nsight.render.finding_words`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from torch_nsight.analyze.findings.call_shapes import CallsOf
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.sites import Site
from torch_nsight.vocabulary import JOIN_KEYS

__all__ = ["Context", "Finding", "Site", "finding_check", "run_checks", "CHECKS"]


@dataclass(frozen=True)
class Context:
    """What every check reads, prepared once by :func:`~torch_nsight.analyze.findings.findings`.

    Attributes:
        work: the kernel table of :func:`~torch_nsight.analyze.findings.prepare.prepare`.
        heavy: the GEMM and convolution calls (:func:`~.calls.heavy_calls`).
        calls_of: the GEMM and convolution calls made where a group of kernel rows ran.
        sites: each site's codes, by its join keys (missing keys ``""``).
        has_calls: whether the profile has a calls table at all.
        settings: the PyTorch settings recorded with the profile (TF32, cudnn.benchmark).
        claimed: the rows of ``work`` reported by the checks registered before this one.
    """

    work: pd.DataFrame
    heavy: pd.DataFrame
    calls_of: CallsOf
    sites: Mapping[tuple[Any, ...], Site]
    has_calls: bool
    settings: Mapping[str, Any]
    claimed: pd.Index

    def site(self, rows: pd.DataFrame) -> Site:
        """The codes of the site where ``rows`` ran (its first row's join keys)."""
        return self.site_at(tuple(rows[k].iat[0] for k in JOIN_KEYS))

    def site_at(self, key: tuple[Any, ...]) -> Site:
        """The codes of the site of these join keys' values."""
        return self.sites.get(key, Site((), None, None, recorded=False))


Check = Callable[[Context], list[Finding]]


@dataclass(frozen=True)
class Registered:
    """A registered check: its finding id and its function."""

    name: str
    check: Check


#: Every check by finding id, in the order they run.
CHECKS: dict[str, Registered] = {}


def finding_check(name: str) -> Callable[[Check], Check]:
    """Register the decorated function as the check of finding ``name``.

    Args:
        name: the check's stable id (the ``finding`` of most of its records).

    Returns:
        The decorator, which returns the function unchanged.

    Raises:
        ValueError: ``name`` is already registered.
    """
    if name in CHECKS:
        raise ValueError(f"finding check {name!r} is registered twice")

    def register(check: Check) -> Check:
        CHECKS[name] = Registered(name, check)
        return check

    return register


def run_checks(context: Context) -> list[Finding]:
    """Every registered check in order, each told the rows the ones before it claimed."""
    found: list[Finding] = []
    for registered in CHECKS.values():
        claimed = pd.Index([i for f in found for i in f.rows.index])
        found += registered.check(dataclasses.replace(context, claimed=claimed))
    return found
