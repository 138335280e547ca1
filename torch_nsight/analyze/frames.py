"""The pandas moves every analysis pass makes, written once.

- :func:`filled` and :func:`blank_to_none`: key columns with their missing values as ``""``
  while a table is built, so that keys compare equal as tuples (dict lookups, a
  ``MultiIndex`` reindex, ``==`` between two key columns), and back to None at the end
  (a ``groupby`` alone needs neither: it takes ``dropna=False``);
- :func:`runs_per_group` and :func:`per_run`: a table sums every run it holds; a time per
  run divides by the distinct (report, run) pairs of its group;
- :func:`dominant`: per group, the value holding the most time;
- :func:`each_distinct`: a function of a row, worked out once per distinct row;
- :func:`own`: the copy a pass ``df = step(df)`` changes instead of its input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from pandas.core.groupby import DataFrameGroupBy

Frame = TypeVar("Frame", pd.Series, pd.DataFrame)
Result = TypeVar("Result")

#: pandas 3 copies a column when it is written and shared (Copy-on-Write, always on): a
#: copy that shares the columns until then is enough.
_COPY_ON_WRITE = int(pd.__version__.split(".")[0]) >= 3
#: A frame of more blocks than this (a column added at a time) is copied whole, into one
#: block per type: pandas slows down and warns past 100.
_FRAGMENTED = 80


def own(df: Frame) -> Frame:
    """A copy of ``df`` that a pass may change without changing its caller's: it shares the
    data under pandas 3 (copied on write, see :data:`_COPY_ON_WRITE`) unless the frame is
    fragmented, a deep copy otherwise. A deep copy of a wide kernel table costs as much as
    the pass itself."""
    blocks = getattr(getattr(df, "_mgr", None), "nblocks", 0)
    return df.copy(deep=not _COPY_ON_WRITE or blocks > _FRAGMENTED)


def filled(values: Frame, fill: object = "") -> Frame:
    """``values`` as objects with their missing entries replaced by ``fill``."""
    missing = values.isna()
    if not missing.to_numpy().any():  # most key columns: nothing to replace, nothing to copy
        return values.astype(object)
    return values.astype(object).mask(missing, fill)


def blank_to_none(values: pd.Series) -> pd.Series:
    """The inverse of :func:`filled`: ``values`` as objects with ``""`` made None, for the
    key columns of a finished table."""
    array = np.array(values.to_numpy(dtype=object), dtype=object)  # a copy of its own
    array[array == ""] = None
    return pd.Series(array, index=values.index, dtype=object)


def keyed(df: pd.DataFrame, keys: Sequence[str], extra: Sequence[str] = ()) -> pd.DataFrame:
    """The columns ``keys`` then ``extra`` of ``df`` (absent ones empty), a copy, with the
    keys' missing values as ``""``::

        variant  shape  module      duration_ns          variant  shape  module  duration_ns
        None     4x128  attn        10.0        ->       ""       4x128  attn    10.0
    """
    work = own(df.reindex(columns=list(dict.fromkeys([*keys, *extra]))))
    for column in keys:
        work[column] = filled(work[column])
    return work


def runs_per_group(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per group of ``keys`` (missing keys ``""``), how many distinct (report, run) pairs its
    kernels come from: columns ``keys`` and ``runs``."""
    pairs = keyed(df, [*keys, "source", "run"]).drop_duplicates()
    return pairs.groupby(list(keys), sort=False).size().rename("runs").reset_index()


def per_run(out: pd.DataFrame, df: pd.DataFrame, keys: Sequence[str],
            columns: Sequence[str]) -> pd.DataFrame:
    """``out`` (one row per group of ``keys``, keys ``""`` where missing) with ``columns``,
    sums over all runs of ``df``, divided by each group's runs; adds ``runs``."""
    out = out.merge(runs_per_group(df, keys), on=list(keys), how="left")
    out[list(columns)] = out[list(columns)].astype("float64").div(out["runs"], axis=0)
    return out


def known_sums(groups: DataFrameGroupBy, columns: Sequence[str]) -> pd.DataFrame:
    """Per group, the sums of ``columns``: NaN (not 0) where a group has no known value, as
    for a headroom no kernel of the group has (pandas' vectorized ``min_count=1``)."""
    return groups[list(columns)].sum(min_count=1)


def dominant(work: pd.DataFrame, keys: Sequence[str], column: str,
             weight: str = "duration_ns", groups: np.ndarray | None = None) -> pd.Series:
    """Per group of ``keys``, the value of ``column`` holding the most ``weight`` (ties: the
    first seen); a missing value counts as ``""``. Indexed by the keys.

    ``groups``: each row's group number (``ngroup()`` of ``keys`` with ``sort=False``),
    where the caller has it: a table asked for several columns groups its keys once.
    """
    if groups is None:
        groups = work.groupby(list(keys), sort=False, dropna=False).ngroup().to_numpy()
    group_of, value_of = _dominant_pairs(work, column, weight, groups)
    _, first_row = np.unique(groups, return_index=True)  # where each group first appears
    index = np.searchsorted(np.unique(groups), group_of)
    out = work[list(keys)].iloc[first_row[index]].reset_index(drop=True)
    out["_value"] = value_of
    return out.set_index(list(keys))["_value"]


def dominant_values(work: pd.DataFrame, column: str, groups: np.ndarray, count: int,
                    weight: str = "duration_ns") -> np.ndarray:
    """:func:`dominant` as an array in group order: the value of group ``g`` (its number in
    ``groups``, ``0 <= g < count``) at ``g``, NaN for a group with no row in ``work``. A
    table of one row per group in ``ngroup`` order takes it as it is, with no alignment
    of keys."""
    group_of, value_of = _dominant_pairs(work, column, weight, groups)
    out = np.full(count, np.nan, dtype=object)
    out[group_of] = value_of
    return out


def _dominant_pairs(work: pd.DataFrame, column: str, weight: str,
                    groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group numbers, their dominant values) for :func:`dominant`, largest sum first."""
    values, uniques = pd.factorize(filled(work[column]).to_numpy())
    pairs = groups.astype("int64") * max(len(uniques), 1) + values  # (group, value), as one
    sums = pd.Series(work[weight].to_numpy()).groupby(pairs, sort=False).sum()
    top = sums.sort_values(ascending=False, kind="stable")
    pair = top.index.to_numpy()
    group_of, value_of = np.divmod(pair, max(len(uniques), 1))
    keep = ~pd.Series(group_of).duplicated().to_numpy()  # each group's first, the largest
    return group_of[keep], np.asarray(uniques, dtype=object)[value_of[keep]]


def each_value(values: pd.Series, test: Callable[[Any], bool]) -> np.ndarray:
    """``test`` of each value of ``values`` as a boolean array, called once per distinct
    value (``values.map(test).astype(bool)`` without a call per row)."""
    items = values.tolist()
    known = {value: bool(test(value)) for value in set(items)}
    return np.array([known[value] for value in items], dtype=bool)


def first_values(frame: pd.DataFrame, column: str) -> list[Any]:
    """The values of ``column`` in the order they first appear, each once (empty where
    ``frame`` lacks it): a label or GPU column read without walking every row."""
    return frame[column].drop_duplicates().tolist() if column in frame else []


def with_columns(table: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """``table`` with exactly ``columns``, in that order: one absent is NaN, except
    ``blocks``, 1 where nothing was folded (each row is one block)::

        module  duration_ns  runs            variant  shape  module  ...  blocks  ...  runs
        mlp     17250        1        ->     NaN      NaN    mlp     ...  1       ...  1
    """
    if "blocks" not in table:
        table = table.assign(blocks=1)
    return table.reindex(columns=list(columns))


def each_distinct(rows: pd.DataFrame, compute: Callable[[dict[str, Any]], Result]
                  ) -> list[Result]:
    """``compute`` of each row of ``rows`` (a dict of its columns), called once per distinct
    row (missing values alike) and repeated for its copies: a kernel launched in every run
    and every block is worked out once::

        block_size  gpu                          block_size  gpu
        256.0       H100   -> compute({...}) ->  r1
        256.0       H100   (its copy)            r1
        128.0       NaN    -> compute({...}) ->  r2

    Returns:
        One result per row, in order.
    """
    if rows.columns.empty:  # (then ``rows.empty``, whatever its length)
        return [compute({}) for _ in range(len(rows))]
    if not len(rows):
        return []
    # a column missing in every row tells no row apart (a trace has no counters): grouped
    # by the others alone
    keys = [c for c in rows.columns if not rows[c].isna().all()]
    codes = (rows.groupby(keys, sort=False, dropna=False).ngroup().to_numpy() if keys
             else np.zeros(len(rows), dtype=np.int64))
    _, first = np.unique(codes, return_index=True)  # each group's first row, by group
    results = [compute(row) for row in rows.iloc[first].to_dict("records")]
    return [results[code] for code in codes]


def plain(value: Any) -> Any:
    """``value`` with numpy's scalars as Python's, through dicts, lists and tuples: codes
    that print, compare and serialize as the numbers they are."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(item) for item in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def label_keys(table: pd.DataFrame) -> set[tuple[str, ...]]:
    """(variant, shape, rank) of the rows: the reports of a distributed run's ranks share
    shape labels and are told apart by their ``rank`` column, not by file name."""
    keys = filled(table.reindex(columns=["variant", "shape", "rank"]).astype(object))
    return set(map(tuple, keys.drop_duplicates().to_numpy()))
