"""The findings gathered by the change a user makes: one row per switch of the whole model
(channels-last, TF32, ``cudnn.benchmark``, the optimizer's fused flag, the model's compile),
whatever the number of modules its rows name, and one per other fix and the module it
targets. A step whose 29 convolutions each list their layout conversions has one change to
make, not 29: its gain is theirs together.

The rows' gains add up within a change: each counts its own kernels (a module's conversions,
another module's conversions, the NCHW batch norms at the root). The sum is kept under the
kernels' time per run of the (variant, shape): a change cannot recover more kernel time than
the GPU ran. A ``step_idle`` row's gain is the GPU's idle time in the bare step, not kernel
time: it adds after the cap. Rows with only a bound (``gain_bound_ns``) add to the change's
bound, not to its gain. Changes rank as findings do
(:func:`~torch_nsight.analyze.findings.run_checks.ranked`: gains before bounds, gains under
``TINY_GAIN_NS`` last).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from torch_nsight.analyze.findings.run_checks import TINY_GAIN_NS
from torch_nsight.analyze.findings.step_idle import BARE_STEP_BASIS
from torch_nsight.analyze.findings.switch_fixes import fix_target, switch_fix
from torch_nsight.analyze.frames import keyed, per_run
from torch_nsight.vocabulary import LABELS

__all__ = ["CHANGE_COLUMNS", "by_change"]

#: One row per change: its labels, a key naming it (the switch ``--verify`` applies, as
#: :meth:`~torch_nsight.verify_exchange.FixSpec.describe` writes it, else ``fix_code@module``),
#: the fix of its largest row (code, parameters, target module, ``""`` for the whole model),
#: whether ``--verify`` can switch it, how many findings and distinct modules it gathers, the
#: first (largest) row's module, and its gain and bound per run (ns).
CHANGE_COLUMNS = ("variant", "shape", "change", "fix_code", "fix_params", "target", "switch",
                  "findings", "modules", "first_module", "est_gain_ns", "gain_bound_ns",
                  "capped")


def _key(row: pd.Series) -> tuple[str, str, bool]:
    """(the change's key, the module it targets, whether a switch applies it)."""
    spec = switch_fix(row)
    if spec is not None:
        return spec.describe(), spec.target, True
    target = fix_target(row.get("module_path"))
    return f"{row['fix_code']}@{target}" if target else str(row["fix_code"]), target, False


def _kernel_ns(kernels: pd.DataFrame | None) -> dict[tuple[Any, ...], float]:
    """The kernels' time per run of each (variant, shape)."""
    if kernels is None or kernels.empty or "duration_ns" not in kernels:
        return {}
    sums = keyed(kernels, LABELS, ["duration_ns"]).groupby(list(LABELS), sort=False)[
        "duration_ns"].sum().reset_index()
    out = per_run(sums, kernels, LABELS, ["duration_ns"])
    return {tuple(row[list(LABELS)]): float(row["duration_ns"]) for _, row in out.iterrows()}


def by_change(found: pd.DataFrame, kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """The changes to make, largest first (gains before bounds), from a finding table.

    Args:
        found: :func:`~torch_nsight.analyze.findings.findings` rows, folded or not, worded or
            not (a folded row's gain is already its blocks').
        kernels: the kernel table they come from: each change's gain is kept under its
            (variant, shape)'s kernel time per run (``capped`` True where that cut it).

    Returns:
        :data:`CHANGE_COLUMNS`; findings whose cause has no known fix (``none_known``) or no
        fix code (a timeline finding) are left out.
    """
    if found.empty or "fix_code" not in found:
        return pd.DataFrame(columns=list(CHANGE_COLUMNS))
    fixable = found[found["fix_code"].notna() & found["fix_code"].ne("none_known")]
    limits = _kernel_ns(kernels)
    changes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for _, row in fixable.iterrows():
        change, target, switched = _key(row)
        labels = tuple(row.get(c) if isinstance(row.get(c), str) else "" for c in LABELS)
        entry = changes.setdefault((*labels, change), {
            **{c: (v or None) for c, v in zip(LABELS, labels, strict=True)},
            "change": change, "fix_code": row["fix_code"], "fix_params": row.get("fix_params"),
            "target": target, "switch": switched, "findings": 0, "_modules": set(),
            "first_module": row.get("module"), "_gains": [], "_idle": [], "_bounds": [],
            "_limit": limits.get(labels, math.inf)})
        blocks = row.get("blocks")  # a folded row stands for its blocks' findings
        entry["findings"] += int(blocks) if _number(blocks) and blocks >= 1 else 1
        entry["_modules"].add(fix_target(row.get("module_path")) or row.get("module"))
        gain, bound = row.get("est_gain_ns"), row.get("gain_bound_ns")
        if _number(gain):
            entry["_idle" if row.get("gain_basis") == BARE_STEP_BASIS else "_gains"].append(
                float(gain))
        elif _number(bound):
            entry["_bounds"].append(float(bound))
    return _ranked([_totals(entry) for entry in changes.values()])


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def _totals(entry: dict[str, Any]) -> dict[str, Any]:
    """A change's gain and bound from its rows': kernel-time gains capped, idle time added."""
    gains, idle, bounds = entry.pop("_gains"), entry.pop("_idle"), entry.pop("_bounds")
    limit = entry.pop("_limit")
    entry["capped"] = bool(sum(gains) > limit)
    entry["est_gain_ns"] = (min(sum(gains), limit) + sum(idle)) if gains or idle else math.nan
    entry["gain_bound_ns"] = min(sum(bounds), limit) if bounds else math.nan
    entry["modules"] = len(entry.pop("_modules"))
    return entry


def _ranked(rows: list[dict[str, Any]]) -> pd.DataFrame:
    out = pd.DataFrame(rows, columns=list(CHANGE_COLUMNS))
    out = out.astype({"est_gain_ns": "float64", "gain_bound_ns": "float64"})
    order = out.assign(_tiny=out["est_gain_ns"].lt(TINY_GAIN_NS),
                       _bound=out["gain_bound_ns"]).sort_values(
        ["_tiny", "est_gain_ns", "_bound"], ascending=[True, False, False],
        na_position="last", kind="stable")
    return order.drop(columns=["_tiny", "_bound"]).reset_index(drop=True)
