"""Run-to-run spread: each per-run time with its noise.

A (variant, shape) measured in several runs (``sweep(runs=N)``, the steps of
``torch-nsight profile --steps A:B``, reports loaded under one label) gives every row of a
table one time per run: the sum of its kernels in that run, 0 in a run that did not launch
it. The table's time is their mean (as before, the sum over runs divided by the runs); the
spread columns say how far it can be trusted:

* ``runs``: how many runs the row's label holds;
* ``std_ns``: the sample standard deviation of the per-run times (``ddof=1``);
* ``ci95_ns``: the half-width of the 95% confidence interval of the mean, Student's t with
  ``runs - 1`` degrees of freedom: ``t(0.975, n-1) * std / sqrt(n)``; the mean lies in
  ``time ± ci95_ns``;
* ``stable``: the half-width is at most :data:`STABLE_CI_PCT` percent of the mean.

With one run the spread is unknown: ``std_ns`` and ``ci95_ns`` are NaN and ``stable`` None.
Rows copied from a measured block (``replicated_from``) copy its runs, so they carry its
spread. The per-run times travel in a ``run_ns`` column (one array per row) while a table is
built and folded, and are dropped from the tables users read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight.analyze.frames import filled, own
from torch_nsight.vocabulary import LABELS

__all__ = ["STABLE_CI_PCT", "SPREAD_COLUMNS", "RUNS_COLUMN", "run_times", "spread",
           "with_spread", "add_runs", "group_runs", "sum_runs", "t_quantile", "t_two_sided"]

#: A row is ``stable`` when its 95% interval's half-width is at most this percent of its
#: mean. Chosen from the noise measured on the H200 (docs/noise.md): module times of one
#: profile repeat within 1-2% for kernels over ~20 µs, small kernels move by more.
STABLE_CI_PCT = 5.0
SPREAD_COLUMNS = ("runs", "std_ns", "ci95_ns", "stable")
#: The column of per-run times (one float array per row, one value per run of its label).
RUNS_COLUMN = "run_ns"
_LABELS = list(LABELS)
_RUN = ["source", "run"]


def _placeheld(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``columns`` of ``df`` (absent ones empty) as text, missing values ``""``."""
    out = df.reindex(columns=list(columns))
    return pd.DataFrame({c: _as_text(out[c]) for c in out.columns}, index=out.index)


def _as_text(values: pd.Series) -> pd.Series:
    """``filled(values).astype(str)``; text without a missing value as it is, and whole
    numbers (a run) made text once per distinct value, not once per row."""
    if values.dtype == "str" and not values.isna().any():
        return values
    if values.dtype in ("Int64", object):
        codes, uniques = pd.factorize(values)  # a missing value: -1, the last text
        distinct = uniques.tolist()
        # each distinct value is one text: whole numbers, or text (1 and True, which
        # factorize takes for one value, are never both there)
        if values.dtype == "Int64" or all(type(v) is str for v in distinct):
            texts = np.array([str(v) for v in distinct] + [""], dtype=object)
            return pd.Series(texts[codes], index=values.index, dtype="str")
    return filled(values).astype(str)


def run_times(df: pd.DataFrame, keys: Sequence[str], value: str = "duration_ns",
              group_keys: pd.DataFrame | None = None) -> pd.Series:
    """Per group of ``keys``, the sum of ``value`` in each run of the group's label.

    Args:
        df: a kernel table with ``variant``, ``shape``, ``source``, ``run`` (absent or
            missing ones count as one value) and ``value``.
        keys: the grouping columns; they must include ``variant`` and ``shape`` when the
            table holds several labels. Missing keys group as ``""``.
        value: the column summed.
        group_keys: the key values to group by, if not ``df[keys]`` (a module path cut to a
            depth, a folded name): one row per row of ``df``.

    Returns:
        A Series indexed by the keys (``""`` for missing ones), each value a float array
        with one sum per run of the row's label, in the order the runs first appear: 0
        where the run did not launch the group. Where a label's rows come from several
        distributed ranks, a run is one step of every rank and its time the mean over the
        ranks: ranks differ by their role (one waits for the other in an all-reduce), not
        by noise, so they are not runs to take a spread over.
    """
    keys = list(keys)
    labels = _placeheld(df, _LABELS)
    runs = _placeheld(df, _RUN)
    ranks_per_label = _ranks_per_label(df, labels)
    if (ranks_per_label > 1).any():  # a run of a ranked label: the same step of each rank
        runs = runs.assign(source=runs["source"].mask(ranks_per_label > 1, ""))
    label_id = labels.groupby(_LABELS, sort=False).ngroup().to_numpy()
    run_id = pd.concat([labels, runs], axis=1).groupby([*_LABELS, *_RUN], sort=False).ngroup()
    # each run's position inside its label: 0, 1, ... in order of first appearance
    first = pd.DataFrame({"label": label_id, "run": run_id.to_numpy()}).drop_duplicates("run")
    first["pos"] = first.groupby("label").cumcount()
    position = first.set_index("run")["pos"].reindex(run_id.to_numpy()).to_numpy()
    count = first.groupby("label").size().to_numpy()
    key_frame = (group_keys.reset_index(drop=True) if group_keys is not None
                 else df[keys].reset_index(drop=True))
    key_frame = filled(key_frame)
    work = key_frame.assign(_pos=position, _label=label_id,
                            _value=pd.to_numeric(df[value], errors="coerce")
                            .fillna(0.0).to_numpy() / ranks_per_label.clip(lower=1).to_numpy())
    sums = work.groupby([*keys, "_label", "_pos"], sort=False, dropna=False)["_value"].sum()
    wide = sums.unstack("_pos", fill_value=0.0)
    matrix = wide.to_numpy(dtype="float64")
    labels_of = wide.index.get_level_values("_label").to_numpy()
    arrays = [matrix[i, :count[label]].copy() for i, label in enumerate(labels_of)]
    index = wide.index.droplevel("_label")
    return pd.Series(arrays, index=index, dtype=object, name=RUNS_COLUMN)


def runs_and_ranks(kernels: pd.DataFrame) -> tuple[int, int]:
    """The most runs any label holds and how many ranks the table holds; a run of a ranked
    table is one step of every rank (see :func:`run_times`)."""
    if kernels.empty:
        return 0, 0
    ranks = int(kernels["rank"].nunique()) if "rank" in kernels else 0
    keys = kernels.reindex(columns=[*_LABELS, *_RUN])
    if ranks > 1:
        keys = keys.assign(source="")
    runs = filled(keys).drop_duplicates().groupby(_LABELS, sort=False).size()
    return int(runs.max()), ranks


def _ranks_per_label(df: pd.DataFrame, labels: pd.DataFrame) -> pd.Series:
    """For each row, how many distinct ranks the rows of its label come from (0: none)."""
    if "rank" not in df:
        return pd.Series(0, index=labels.index)
    ranks = pd.Series(df["rank"].to_numpy(), index=labels.index)
    return ranks.groupby([labels[c] for c in _LABELS], sort=False).transform("nunique")


#: The 97.5th percentile of Student's t for 1 to 32 degrees of freedom, to the last digit
#: of ``scipy.special.stdtrit(dof, 0.975)`` (tests/analyze/test_spread.py checks each): a
#: table of a few runs needs no scipy, whose import costs a fifth of a second.
T_975 = (12.706204736174694, 4.302652729749462, 3.1824463052837078, 2.7764451051977934,
         2.5705818356363146, 2.4469118511449786, 2.364624251592784, 2.306004135204166,
         2.262157162798205, 2.228138851986274, 2.200985160091639, 2.1788128296672284,
         2.1603686564627913, 2.144786687917804, 2.131449545559776, 2.1199052992212546,
         2.1098155778333156, 2.1009220402410382, 2.0930240544083087, 2.085963447265864,
         2.0796138447276795, 2.0738730679040254, 2.0686576104190486, 2.0638985616280245,
         2.0595385527532972, 2.0555294386428735, 2.0518305164802846, 2.0484071417952454,
         2.045229642132703, 2.0422724563012378, 2.039513446396408, 2.0369333434601016)


def t_quantile(dof: np.ndarray) -> np.ndarray:
    """The 97.5th percentile of Student's t for each number of degrees of freedom (>= 1)."""
    dof = np.asarray(dof)
    if dof.dtype.kind in "iu" and dof.size and dof.min() >= 1 and dof.max() <= len(T_975):
        return np.asarray(T_975, dtype="float64")[dof - 1]
    from scipy import special  # (scipy.stats would cost three times the import)

    return special.stdtrit(dof, 0.975)


def t_two_sided(t: float, dof: float) -> float:
    """The two-sided p-value of Student's t statistic ``t`` with ``dof`` degrees of freedom."""
    from scipy import special

    return float(2.0 * special.stdtr(dof, -abs(t)))


def spread(run_ns: pd.Series, stable_pct: float = STABLE_CI_PCT) -> pd.DataFrame:
    """The spread columns (:data:`SPREAD_COLUMNS`) of per-run times.

    Args:
        run_ns: one float array of per-run times per row (:func:`run_times`).
        stable_pct: the largest half-width of the 95% interval, in percent of the mean, of a
            ``stable`` row.

    Returns:
        ``runs``, ``std_ns``, ``ci95_ns`` and ``stable`` (None where one run, or no time),
        on ``run_ns``'s index.
    """
    arrays = list(run_ns)
    n = np.array([len(v) if isinstance(v, np.ndarray) else 0 for v in arrays], dtype="int64")
    std = np.full(len(n), np.nan)
    mean = np.full(len(n), np.nan)
    for count in np.unique(n[n > 0]):  # the rows of one number of runs, as one matrix
        rows = np.flatnonzero(n == count)
        matrix = np.stack([arrays[i] for i in rows]).astype("float64", copy=False)
        mean[rows] = matrix.mean(axis=1)
        if count > 1:
            std[rows] = matrix.std(axis=1, ddof=1)
    half = np.full(len(n), np.nan)
    several = n > 1
    if several.any():
        half[several] = t_quantile(n[several] - 1) * std[several] / np.sqrt(n[several])
    stable = [None if not several[i] or not mean[i] > 0 else
              bool(100.0 * half[i] / mean[i] <= stable_pct) for i in range(len(n))]
    out = pd.DataFrame({"runs": pd.array(n, dtype="Int64"), "std_ns": std, "ci95_ns": half},
                       index=run_ns.index)
    out["stable"] = pd.Series(stable, index=run_ns.index, dtype=object)
    return out


def with_spread(table: pd.DataFrame, keep_runs: bool = False) -> pd.DataFrame:
    """``table`` with :data:`SPREAD_COLUMNS` computed from its ``run_ns`` column (dropped
    unless ``keep_runs``)."""
    if RUNS_COLUMN not in table:
        return table
    out = own(table)
    columns = spread(out[RUNS_COLUMN].reset_index(drop=True))
    for column in SPREAD_COLUMNS:
        out[column] = columns[column].to_numpy()
    return out if keep_runs else out.drop(columns=RUNS_COLUMN)


def add_runs(table: pd.DataFrame, df: pd.DataFrame, keys: Sequence[str],
             value: str = "duration_ns", group_keys: pd.DataFrame | None = None,
             on: Sequence[str] | None = None) -> pd.DataFrame:
    """``table`` (one row per group of ``keys``) with the ``run_ns`` of each row.

    Args:
        table: rows keyed by ``keys`` (or by ``on``); missing keys are matched as ``""``.
        df: the kernel table the rows were built from.
        keys: the key columns of ``df``.
        value: the column summed per run.
        group_keys: see :func:`run_times`.
        on: the table's key columns, one per key, where they are named otherwise.

    Returns:
        A copy of ``table`` with ``run_ns`` (None where no kernel matched).
    """
    times = run_times(df, keys, value, group_keys)
    lookup = table.reindex(columns=list(on or keys)).astype(object)
    lookup = filled(lookup)
    index = (pd.MultiIndex.from_frame(lookup) if len(keys) > 1
             else pd.Index(lookup.iloc[:, 0]))
    out = own(table)
    out[RUNS_COLUMN] = list(times.reindex(index).to_numpy())
    return out


def group_runs(df: pd.DataFrame, groups: np.ndarray, count: int,
               value: str = "duration_ns") -> list[np.ndarray | None]:
    """:func:`run_times` of the groups numbered ``groups`` (one number per row of ``df``,
    ``0 <= g < count``), in group order (None for a group without rows): a table of one
    row per group takes them as they are, with no alignment of keys (:func:`add_runs`)."""
    times = run_times(df, ["_group"], value, group_keys=pd.DataFrame({"_group": groups}))
    return list(times.reindex(range(count)).to_numpy())


def sum_runs(values: Iterable[Any]) -> np.ndarray | None:
    """The element-wise sum of per-run arrays of one label (a folded row's runs)."""
    arrays = [v for v in values if isinstance(v, np.ndarray)]
    if not arrays or len({len(a) for a in arrays}) != 1:
        return None
    return np.sum(arrays, axis=0)
