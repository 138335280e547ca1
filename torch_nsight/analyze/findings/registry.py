"""The registry of finding checks, as ``torch/utils/flop_counter.py`` registers its formulas.

A check is a small function of the prepared :class:`Context` that returns its findings as
numbers (:class:`Found`: the kernel rows, the gain per run, the values its evidence cites);
one decorator line registers it with the function that words it::

    @finding_check("small_grid", says=wording.small_grid)
    def small_grid(context: Context) -> list[Found]: ...

Checks run in the order they were registered; each sees in ``context.claimed`` the kernel
rows the checks before it reported, so that a kernel is not reported twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from torch_nsight.analyze.findings.calls import CallsOf


@dataclass(frozen=True)
class Context:
    """What every check reads, prepared once by :func:`~torch_nsight.analyze.findings.findings`.

    Attributes:
        work: the kernel table of :func:`~torch_nsight.analyze.findings.prepare.prepare`.
        heavy: the GEMM and convolution calls (:func:`~.calls.heavy_calls`).
        calls_of: the calls made where a group of kernel rows ran.
        settings: the PyTorch settings recorded with the profile (TF32 switches).
        claimed: the rows of ``work`` reported by the checks registered before this one.
    """

    work: pd.DataFrame
    heavy: pd.DataFrame
    calls_of: CallsOf
    settings: Mapping[str, Any]
    claimed: pd.Index


@dataclass(frozen=True)
class Found:
    """One finding as numbers, before it is worded.

    Attributes:
        rows: the kernel rows it covers (the first names its site).
        gain_ns: the GPU time per run it may recover (NaN when unknown).
        basis: how the gain was estimated: ``roofline`` or ``measured``.
        confidence: ``high``, ``medium`` or ``low``.
        facts: the values its evidence and fix cite, by name (see the check's wording).
    """

    rows: pd.DataFrame
    gain_ns: float
    basis: str
    confidence: str
    facts: dict[str, Any]


#: The words of a finding: its facts -> (evidence, fix).
Says = Callable[[dict[str, Any]], tuple[str, str]]
Check = Callable[[Context], list[Found]]


@dataclass(frozen=True)
class Registered:
    """A registered check: its finding id, its function and its wording."""

    name: str
    check: Check
    says: Says


#: Every check by finding id, in the order they run.
CHECKS: dict[str, Registered] = {}


def finding_check(name: str, *, says: Says) -> Callable[[Check], Check]:
    """Register the decorated function as the check of finding ``name``.

    Args:
        name: the finding's stable id (the ``finding`` column).
        says: the function that turns a :class:`Found`'s facts into (evidence, fix).

    Returns:
        The decorator, which returns the function unchanged.

    Raises:
        ValueError: ``name`` is already registered.
    """
    if name in CHECKS:
        raise ValueError(f"finding check {name!r} is registered twice")

    def register(check: Check) -> Check:
        CHECKS[name] = Registered(name, check, says)
        return check

    return register


def run_checks(context: Context) -> list[tuple[Registered, Found]]:
    """Every registered check in order, each told the rows the ones before it claimed."""
    found: list[tuple[Registered, Found]] = []
    for registered in CHECKS.values():
        claimed = pd.Index([i for _, f in found for i in f.rows.index])
        found += [(registered, f) for f in
                  registered.check(dataclasses.replace(context, claimed=claimed))]
    return found
