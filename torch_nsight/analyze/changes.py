"""What a comparison changed, for a pull request: the called rows only, repeated blocks
folded as hotspots fold them (modules of one structure, on both sides), the largest changes
first, regressions before everything else.

:func:`changed_rows` reshapes the output of
:func:`torch_nsight.analyze.regress.compare_profiles`::

    module                    dir  baseline_ns  current_ns  verdict          module                   dir  baseline_ns  current_ns  verdict    blocks
    GPT2LMHeadModel           fwd      4407740     7300100  regressed  ->   lm_head                  fwd       429690     3331360  regressed       1
    transformer.h.0.ln_1      fwd        11880       11710  unchanged       GPT2LMHeadModel          fwd      4407740     7300100  regressed       1
    ...                                                                     transformer.h.{0-11}.x   fwd          ...         ...  improved       12
    lm_head                   fwd       429690     3331360  regressed

:func:`largest_change` names the row a one-line verdict quotes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from torch_nsight.analyze.fold import (
    FOLD_COLUMN,
    PARENT_COLUMN,
    STRUCTURE_COLUMN,
    fold_rows,
    with_parent_groups,
    with_structure,
)
from torch_nsight.analyze.regress import as_compared
from torch_nsight.vocabulary import PATH_SEP

__all__ = ["CHANGED", "changed_rows", "with_structures", "largest_change", "CHANGE_COLUMN"]

#: Verdicts a reader of a pull request needs to see: everything but unchanged and noise.
CHANGED: tuple[str, ...] = ("regressed", "improved", "only in current", "only in baseline",
                            "fused")
#: The magnitude the rows are ordered by: the change in ns, or a one-sided row's own time.
CHANGE_COLUMN = "magnitude_ns"
_SUMS = ("baseline_ns", "current_ns", "change_ns", "baseline_headroom_ns",
         "current_headroom_ns")
_KEYS = ("variant", "shape", "direction", "depth", "op", "kernel", "verdict")
#: The structure of a row's module in each profile (:func:`with_structure`): rows fold only
#: where both agree.
_STRUCTURES = ("baseline_structure", "current_structure")


def with_structures(rows: pd.DataFrame, baseline: pd.DataFrame,
                    current: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the structure of each row's module in the baseline and in the current
    profile (:func:`torch_nsight.analyze.fold.with_structure`, the current side labelled as
    ``compare_profiles`` compared it)::

        module_path       direction  ...      module_path       baseline_structure  current_structure
        Net/stem.0        fwd                 Net/stem.0        #3                  #3
        Net/stem.1        fwd         ->      Net/stem.1        #5                  #5
    """
    current = as_compared(baseline, current)
    return rows.assign(**{
        side: with_structure(rows, kernels)[STRUCTURE_COLUMN]
        for side, kernels in zip(_STRUCTURES, (baseline, current), strict=True)})


def changed_rows(rows: pd.DataFrame, baseline: pd.DataFrame,
                 current: pd.DataFrame) -> pd.DataFrame:
    """The rows whose verdict is in :data:`CHANGED`, folded and ordered.

    Rows that differ only by a block index (``h.3`` and ``h.7``), share their verdict and
    whose modules launched the same kernels, in the baseline and in the current profile
    (:func:`with_structures`, as hotspots and the module tree fold), fold into one
    (:func:`torch_nsight.analyze.fold.fold_rows`): times, changes and headroom add up,
    ``change_pct`` is recomputed from the sums, and the spread columns of a folded row are
    blank (the blocks' runs are not independent). A Conv2d, a BatchNorm and a ReLU
    (``stem.0``, ``stem.1``, ``stem.2``) never share a row. Regressions come first, then
    improvements, then every other row, each part by :data:`CHANGE_COLUMN` (largest first).

    Args:
        rows: the output of ``compare_profiles``.
        baseline: the baseline's kernel table, as given to ``compare_profiles``.
        current: the current kernel table, as given to ``compare_profiles``.

    Returns:
        The changed rows with :data:`torch_nsight.analyze.fold.FOLD_COLUMN` and
        :data:`CHANGE_COLUMN` added, index 0..n-1.
    """
    changed = rows[rows["verdict"].isin(CHANGED)]
    if changed.empty:
        return changed.assign(**{FOLD_COLUMN: pd.Series(dtype="int64"),
                                 CHANGE_COLUMN: pd.Series(dtype="float64")})
    nested, keys = with_parent_groups(with_structures(changed, baseline, current),
                                      [*(k for k in _KEYS if k in changed), *_STRUCTURES])
    folded = fold_rows(nested, keys=keys, sums=_SUMS, rank="baseline_ns", name="module",
                       path="module_path").drop(columns=[*_STRUCTURES, PARENT_COLUMN])
    several = folded[FOLD_COLUMN] > 1
    for column in ("baseline_ci95_ns", "current_ci95_ns", "baseline_std_ns",
                   "current_std_ns", "p_value"):
        if column in folded:
            folded[column] = folded[column].astype("float64").where(~several)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = 100.0 * folded["change_ns"] / folded["baseline_ns"]
    folded["change_pct"] = folded["change_pct"].where(~several, pct)
    one_sided = folded["current_ns"].fillna(0) - folded["baseline_ns"].fillna(0)
    magnitude = folded["change_ns"].where(folded["change_ns"].notna(), one_sided)
    folded[CHANGE_COLUMN] = magnitude.abs().astype("float64")
    # regressed, improved, then the rest (new, gone, unchanged): the headline's largest change
    # (a regression or an improvement) heads its part, above modules found on one side only
    part = folded["verdict"].map({"regressed": 0, "improved": 1}).fillna(2).astype(int)
    order = np.lexsort((-folded[CHANGE_COLUMN].fillna(0).to_numpy(), part.to_numpy()))
    return folded.iloc[order].reset_index(drop=True)


def largest_change(changed: pd.DataFrame) -> pd.Series | None:
    """The regressed or improved row with the largest change in ns, leaving out a row
    when a descendant with its verdict carries half its change or more (``lm_head``
    rather than the model around it).

    Args:
        changed: the output of :func:`changed_rows`.

    Returns:
        That row, or None when nothing regressed or improved.
    """
    called = changed[changed["verdict"].isin(("regressed", "improved"))]
    if called.empty:
        return None
    paths = [str(p) for p in called["module_path"]]
    keys = list(zip(called["direction"].astype(str), called["verdict"], strict=True))
    sizes = called[CHANGE_COLUMN].to_numpy()
    inner = [not any(other.startswith(path + PATH_SEP) and keys[j] == keys[i]
                     and sizes[j] >= sizes[i] / 2 for j, other in enumerate(paths))
             for i, path in enumerate(paths)]
    best = called[inner] if any(inner) else called
    return best.loc[best[CHANGE_COLUMN].idxmax()]
