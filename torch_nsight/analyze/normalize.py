"""Compare variants: each module's and kernel's speedup over a baseline variant, per shape."""

from __future__ import annotations

import pandas as pd

from torch_nsight.analyze.frames import blank_to_none, filled
from torch_nsight.analyze.hotspots import kernel_hotspots
from torch_nsight.analyze.rollup import module_tree

NORMALIZED_COLUMNS = ("shape", "level", "direction", "module", "module_path", "op", "kernel",
                      "variant", "duration_ns", "baseline_ns", "speedup")


def normalize(df: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Return each module's and kernel's time per run and speedup over ``baseline``.

    Modules are matched by (shape, direction, path); kernels by (shape, direction, module
    path, op, kernel name), summed over their launches. ``speedup`` is ``baseline_ns /
    duration_ns``: above 1 the variant is faster. A row with no counterpart in the baseline
    (a kernel that a compiled variant fused away, say) has NaN ``baseline_ns`` and
    ``speedup``; baseline rows themselves are included (speedup 1).

    Args:
        df: an attributed, classified kernel table with a ``variant`` column.
        baseline: the variant label to compare against.

    Returns:
        A long table with :data:`NORMALIZED_COLUMNS`; ``level`` is ``module`` or ``kernel``.

    Raises:
        ValueError: ``baseline`` is not one of the table's variants.
    """
    variants = [] if "variant" not in df else sorted(df["variant"].dropna().unique().tolist())
    if baseline not in variants:
        raise ValueError(f"baseline variant {baseline!r} is not in this profile; its "
                         f"variants are {variants or 'none (no measure ranges)'}")
    modules = module_tree(df).rename(columns={"inclusive_ns": "duration_ns"})
    modules["level"] = "module"
    modules["kernel"] = None
    modules["op"] = None
    kernels = kernel_hotspots(df)
    kernels["level"] = "kernel"
    rows = pd.concat([modules, kernels], ignore_index=True)
    rows = rows.reindex(columns=[c for c in NORMALIZED_COLUMNS if c not in
                                 ("baseline_ns", "speedup")])
    keys = ["shape", "level", "direction", "module_path", "op", "kernel"]
    for column in keys:
        rows[column] = filled(rows[column])
    base = (rows[rows["variant"] == baseline].loc[:, [*keys, "duration_ns"]]
            .rename(columns={"duration_ns": "baseline_ns"}))
    out = rows.merge(base, on=keys, how="left")
    out["speedup"] = out["baseline_ns"] / out["duration_ns"]
    for column in keys:
        out[column] = blank_to_none(out[column])
    return out.loc[:, list(NORMALIZED_COLUMNS)]
