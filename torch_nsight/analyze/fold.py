"""Repeated structure folded: rows that differ only by the index of a repeated block (the
``3`` of ``model.layers.3.self_attn``) become one row for all the blocks.

A decoder's eight identical layers otherwise fill a table with the same kernel eight times,
each with an eighth of its time, and push every other row out of the top ten::

    module                       kernel               time µs        module                    kernel           time µs  blocks
    model.layers.0.self_attn     elementwise_kernel    145.47   ->   model.layers.{0-7}.self_attn  elementwise_kernel  1163.76       8
    model.layers.1.self_attn     elementwise_kernel    145.47
    ...

A numeric component of a dotted module name is an index. Rows whose names read the same with
every index replaced, and whose other keys agree, fold: their times and gains add up, the
other facts come from the row with the most time, and ``blocks`` counts the rows folded.

Only structurally identical blocks fold. Given the kernel table, each module gets a
:data:`STRUCTURE_COLUMN`: the set of kernels (name, grid, block) its subtree launched. Two
stages of a CNN of different widths launch their kernels on other grids, so
``features.5.{0-8}.block.0`` and ``features.6.{0-2}.block.0`` stay two rows instead of one
``features.{5-6}.{0-8}.block.0`` that says nowhere where it is. A Sequential's children
(``stem.0``, ``stem.1``, ``stem.2``: a Conv2d, a BatchNorm and a ReLU) read like a repeated
block too, and launch different kernels: every table that folds module names passes the
structure (hotspots, the module tree, findings with their codes, the top module of
``by_kernel``/``by_shape``), so they never share a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight.analyze.frames import filled
from torch_nsight.analyze.spread import RUNS_COLUMN, sum_runs, with_spread
from torch_nsight.vocabulary import LABELS, join_path, path_leaf, path_parent, split_path

__all__ = ["fold_rows", "fold_tree", "index_template", "format_indices", "folded_name",
           "parent_groups", "with_parent_groups", "with_structure", "FOLD_COLUMN",
           "PARENT_COLUMN", "STRUCTURE_COLUMN"]

FOLD_COLUMN = "blocks"
#: What a module launched (its subtree's kernels: name, grid, block): blocks fold only where
#: it agrees.
STRUCTURE_COLUMN = "structure"
#: The fold group of a row's parent module (:func:`parent_groups`), a key while folding.
PARENT_COLUMN = "__parent_group"
_KERNEL_SHAPE = ("kernel", "grid", "block")
_SLOT = "{}"


def index_template(name: object) -> tuple[str, tuple[int, ...]]:
    """``("model.layers.{}.self_attn", (3,))`` for ``"model.layers.3.self_attn"``; names
    without an index (or not text) come back whole, with no index."""
    if not isinstance(name, str):
        return (name, ())  # type: ignore[return-value]
    parts = name.split(".")
    indices = tuple(int(p) for p in parts if p.isdigit())
    if not indices:
        return name, ()
    return ".".join(_SLOT if p.isdigit() else p for p in parts), indices


def format_indices(values: Sequence[int]) -> str:
    """``0-7``, ``0-3,5``, ``2``: sorted distinct values, runs as ranges."""
    ordered = sorted(set(values))
    runs: list[str] = []
    start = previous = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        runs.append(str(start) if start == previous else f"{start}-{previous}")
        if value is not None:
            start = previous = value
    return ",".join(runs)


def folded_name(template: str, indices: Sequence[tuple[int, ...]]) -> str:
    """The template with each slot showing the indices folded there
    (``model.layers.{0-7}.self_attn``; a slot where all agree shows that one index)."""
    pieces = template.split(_SLOT)
    out = [pieces[0]]
    for slot, rest in enumerate(pieces[1:]):
        values = [ix[slot] for ix in indices]
        out.append("{" + format_indices(values) + "}" if len(set(values)) > 1
                   else str(values[0]))
        out.append(rest)
    return "".join(out)


def fold_rows(rows: pd.DataFrame, *, keys: Sequence[str], sums: Sequence[str] = (),
              weighted: dict[str, str] | None = None, rank: str = "duration_ns",
              name: str = "module", path: str | None = "module_path") -> pd.DataFrame:
    """Fold rows that differ only by block indices in ``name`` (see the module docstring).

    Args:
        rows: a table with a ``name`` column (dotted module names).
        keys: the other columns that must agree for rows to fold.
        sums: columns added up over the folded rows.
        weighted: columns averaged over the folded rows, weighted by another column
            (``{"pct_of_roof": "duration_ns"}``).
        rank: the column whose largest row gives the folded row its other facts.
        name: the column of module names; ``path`` (if present) folds the same way.

    Returns:
        The rows, folded, in the order of their first row, with :data:`FOLD_COLUMN`: how
        many rows each stands for (1 for a row that folded with none).
    """
    if rows.empty:
        return rows.assign(**{FOLD_COLUMN: pd.Series(dtype="int64")})
    work = rows.reset_index(drop=True)
    group_id, templates = _fold_groups(work, keys, name)
    size = group_id.map(group_id.value_counts()).to_numpy()
    alone = work[size == 1].assign(**{FOLD_COLUMN: 1})
    folding = size > 1
    if not folding.any():
        return alone.reset_index(drop=True)
    members = work[folding]
    groups = group_id[folding].to_numpy()
    # each group's facts from its largest row (the first of equals), then its sums and
    # weighted means, summed as pandas sums a group's own Series (the same last digit)
    ranked = members[rank].astype("float64").fillna(-np.inf)
    top = ranked.groupby(groups, sort=False).idxmax()
    indices = pd.Series(members.index).groupby(groups, sort=False).agg(list).tolist()
    rows = work.loc[top.to_numpy()].copy()
    for column in sums:
        if column not in members:
            continue
        values = work[column]
        if column == RUNS_COLUMN:  # per-run arrays, run by run
            arrays = values.to_numpy(dtype=object)
            rows[column] = pd.Series([sum_runs(arrays[ix]) for ix in indices],
                                     index=rows.index, dtype=object)
        else:
            rows[column] = _group_sums(values, indices)
    for column, weight in (weighted or {}).items():
        if column in members and weight in members:
            rows[column] = _weighted_means(work[column], work[weight].astype("float64"),
                                           indices)
    rows[name] = [folded_name(templates[ix[0]][0], [templates[i][1] for i in ix])
                  for ix in indices]
    if path is not None and path in members:
        paths = work[path].to_numpy()
        rows[path] = [_fold_path(list(paths[ix])) for ix in indices]
    rows[FOLD_COLUMN] = [len(ix) for ix in indices]
    rows.index = [ix[0] for ix in indices]  # where each group's first row stood
    out = [alone, rows] if len(alone) else [rows]
    return pd.concat(out).sort_index(kind="stable").reset_index(drop=True)


def _fold_groups(rows: pd.DataFrame, keys: Sequence[str], name: str
                 ) -> tuple[pd.Series, list[tuple[str, tuple[int, ...]]]]:
    """Each row's fold group (a number, in the order of the groups' first rows): its
    ``keys`` (those it has) and its ``name``'s index template, a row without an index a
    group of its own; and each name's template with its indices. ``rows`` indexed 0..n-1."""
    templates = [index_template(value) for value in rows[name]]
    group_keys = pd.DataFrame({k: filled(rows[k], "\0") for k in keys if k in rows})
    # a row without an index folds with none
    group_keys["__template"] = [template if indices else f"\0row{i}"
                                for i, (template, indices) in enumerate(templates)]
    group_id = group_keys.groupby(list(group_keys.columns), sort=False, dropna=False).ngroup()
    return group_id, templates


def _group_sums(values: pd.Series, indices: list[list[int]]) -> list[Any]:
    """Each group's ``values.iloc[rows].sum(min_count=1)``, worked out on the column's
    array where it holds float64 (no Series a group): NaN skipped, the rest summed by
    numpy as pandas sums it (the same last digit); NaN for a group of NaN alone."""
    if values.dtype != np.float64:
        return [values.iloc[ix].sum(min_count=1) for ix in indices]
    array = values.to_numpy()
    sums: list[Any] = []
    for ix in indices:
        part = array[ix]
        known = ~np.isnan(part)
        sums.append(part.sum() if known.all() else
                    np.where(known, part, 0.0).sum() if known.any() else np.nan)
    return sums


def _weighted_means(values: pd.Series, weights: pd.Series, indices: list[list[int]]
                    ) -> list[float]:
    """:func:`_weighted_mean` of each group, on the columns' arrays where both hold
    float64."""
    if values.dtype != np.float64:
        return [_weighted_mean(values.iloc[ix], weights.iloc[ix]) for ix in indices]
    value_array, weight_array = values.to_numpy(), weights.to_numpy()
    means: list[float] = []
    for ix in indices:
        value, weight = value_array[ix], weight_array[ix]
        valid = ~np.isnan(value) & ~np.isnan(weight)
        total = weight[valid].sum()
        means.append(float((value[valid] * weight[valid]).sum() / total) if total
                     else np.nan)
    return means


def _weighted_mean(values: pd.Series, weights: pd.Series) -> float:
    """The mean of ``values`` weighted by ``weights``, over the rows where both are known;
    NaN where their weights add up to nothing."""
    valid = values.notna() & weights.notna()
    total = weights[valid].sum()
    return float((values[valid] * weights[valid]).sum() / total) if total else np.nan


def _fold_path(paths: list[object]) -> object:
    """A module path folded component by component."""
    if not all(isinstance(p, str) for p in paths):
        return paths[0]
    split = [split_path(str(p)) for p in paths]
    if len({len(s) for s in split}) != 1:
        return paths[0]
    parts = []
    for column in zip(*split, strict=True):
        templates = [index_template(c) for c in column]
        if len({t for t, _ in templates}) == 1 and templates[0][1]:
            parts.append(folded_name(templates[0][0], [ix for _, ix in templates]))
        else:
            parts.append(column[0])
    return join_path(parts)


def with_structure(rows: pd.DataFrame, kernels: pd.DataFrame,
                   path: str = "module_path") -> pd.DataFrame:
    """``rows`` with :data:`STRUCTURE_COLUMN`: for each row's (variant, shape, direction,
    module path), a code for what its module and the modules inside it launched: the
    kernels (name, grid, block; a blank text where the kernel table lacks them) each module
    of its subtree launched, the modules named relative to their parent. Two rows have the
    same code exactly where their subtrees launched the same kernels from the same places::

        module_path          direction  ...      module_path          direction  structure
        Net/features.5.0     fwd                 Net/features.5.0     fwd        #3
        Net/features.6.0     fwd         ->      Net/features.6.0     fwd        #5
        Net/features.6.1     fwd                 Net/features.6.1     fwd        #5

    Time and memory are linear in the distinct kernels and the depth of the tree: each
    module's code is built once from its own kernels and its children's codes
    (:class:`_Structures`), never as the list of every kernel below it.

    Args:
        rows: rows with the label columns, ``direction`` and ``path``.
        kernels: the kernel table the rows come from.
        path: the column of module paths in ``rows``.

    Returns:
        A copy of ``rows`` with the column added.
    """
    keys = [*LABELS, "direction"]
    # each distinct kernel once (the runs repeat them; dropped before they are made text,
    # then again after), walked as lists: quicker than Series
    table = kernels.reindex(columns=[*keys, "module_path", *_KERNEL_SHAPE]).drop_duplicates()
    distinct = pd.DataFrame({c: filled(table[c]).astype(str)
                             for c in [*keys, "module_path", *_KERNEL_SHAPE]}).drop_duplicates()
    structures = _Structures()
    for values in zip(*(distinct[c].tolist() for c in distinct.columns), strict=True):
        structures.add(values[:len(keys)], values[len(keys)], values[len(keys) + 1:])
    del distinct
    # each value its own text (``str`` of a str is itself): a deep tree's paths are not
    # copied into pandas' text type
    row_keys = zip(*[[str(v) for v in filled(rows[c])] if c in rows else [""] * len(rows)
                     for c in [*keys, path]], strict=True)
    return rows.assign(**{STRUCTURE_COLUMN: [
        structures.code(key[:-1], key[-1]) for key in row_keys]})


class _Node:
    """A module of the tree of one label: what it launched itself, its children by name."""

    __slots__ = ("children", "code", "own")

    def __init__(self) -> None:
        self.own: set[tuple[str, ...]] = set()
        self.children: dict[str, _Node] = {}
        self.code: int | None = None


class _Structures:
    """The module trees of a kernel table (one per label), each module's structure coded
    as a number: equal subtrees, equal numbers. A module's key is its own kernels and its
    children's (name relative to it, code) pairs, so the keys hold each kernel and each
    module once: linear, where a list of every kernel under every ancestor is quadratic
    in the depth and in the number of names."""

    def __init__(self) -> None:
        self._roots: dict[tuple[str, ...], _Node] = {}
        self._codes: dict[tuple[frozenset[object], frozenset[object]], int] = {}
        self._asked: dict[tuple[tuple[str, ...], str], _Node | None] = {}

    def add(self, label: tuple[str, ...], module: str, kernel: tuple[str, ...]) -> None:
        node = self._asked.get((label, module))  # a module's kernels: its node walked once
        if node is None:
            node = self._roots.setdefault(label, _Node())
            for part in split_path(module):
                node = node.children.get(part) or node.children.setdefault(part, _Node())
            self._asked[(label, module)] = node
        node.own.add(kernel)

    def code(self, label: tuple[str, ...], module: str) -> str:
        """The code of ``module``'s structure (``"#0"`` for a module that launched none)."""
        node = self._node(label, module)
        if node is None:
            return "#0"
        return f"#{self._coded(node, path_leaf(module))}"

    def _node(self, label: tuple[str, ...], module: str) -> _Node | None:
        """The node of ``module``: one step from its parent's where that was asked for
        (rows come parents first), else walked from the root; a path asked for is kept
        (a walk from the root for each row of a deep tree is quadratic in its depth)."""
        if (label, module) in self._asked:
            return self._asked[(label, module)]
        parent = path_parent(module)
        if parent is not None and (label, parent) in self._asked:
            above = self._asked[(label, parent)]
            node = above.children.get(path_leaf(module)) if above is not None else None
        else:
            node = self._roots.get(label)
            for part in split_path(module):
                if node is None:
                    break
                node = node.children.get(part)
        self._asked[(label, module)] = node
        return node

    def _coded(self, top: _Node, top_name: str) -> int:
        """The code of ``top``, its subtree coded first (a stack, not recursion: a tree
        may be 100,000 deep)."""
        stack: list[tuple[_Node, str, bool]] = [(top, top_name, False)]
        while stack:
            node, name, ready = stack.pop()
            if node.code is not None:
                continue
            if not ready:
                stack.append((node, name, True))
                stack.extend((child, part, False) for part, child in node.children.items()
                             if child.code is None)
                continue
            prefix = name + "."
            key = (frozenset(node.own), frozenset(
                (part.removeprefix(prefix), child.code) for part, child in
                node.children.items()))
            node.code = self._codes.setdefault(key, len(self._codes) + 1)
        assert top.code is not None
        return top.code


#: The module tree's columns that add up over folded blocks.
TREE_SUMS = ("inclusive_ns", "exclusive_ns", "pct_of_total", "kernels", "exclusive_kernels",
             "headroom_ns", "exclusive_headroom_ns", "flops", "dram_bytes", RUNS_COLUMN)


def fold_tree(tree: pd.DataFrame, kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """The module tree (:func:`torch_nsight.analyze.module_tree` with ``keep_runs=True``)
    with each repeated block folded: ``h.{0-11}`` in the place of ``h.0``, its children
    ``h.{0-11}.attn`` ... under it, the other blocks' rows gone; times, counts and
    per-run times summed, the spread taken over the summed runs, ``blocks`` counting.
    Given the kernel table, only blocks that launched the same kernels fold
    (:func:`with_structure`)."""
    if RUNS_COLUMN not in tree:
        raise ValueError("fold_tree needs the per-run times: build the tree with "
                         "module_tree(df, depth, keep_runs=True)")
    keys = ["variant", "shape", "direction", "depth"]
    if kernels is not None:
        tree, keys = with_structure(tree, kernels), [*keys, STRUCTURE_COLUMN]
    tree, keys = with_parent_groups(tree, keys)
    folded = fold_rows(tree, keys=keys, sums=TREE_SUMS, rank="inclusive_ns",
                       path="module_path")
    return with_spread(folded.drop(columns=[STRUCTURE_COLUMN, PARENT_COLUMN], errors="ignore"))



def parent_groups(rows: pd.DataFrame, keys: Sequence[str], name: str = "module",
                  path: str = "module_path") -> list[int]:
    """Each row's parent module's fold group (-1 for a row whose parent is not among the
    rows): a row folds only with rows whose parents folded together, so in a module tree
    ``layer1.0.bn1`` stays under ``layer1.0`` where ``layer1.0`` did not fold with
    ``layer1.{1-2}``, though the three BatchNorms launch the same kernels. Rows are walked
    parents first (by the depth of their path); a row's group is its group in
    :func:`fold_rows` by ``keys`` (its keys and its index template) and its parent's group;
    its parent is the row of its path's parent with the same labels and direction."""
    tree = [k for k in (*LABELS, "direction") if k in rows]
    label_of = (list(zip(*[[str(v) for v in filled(rows[k])] for k in tree], strict=True))
                if tree else [()] * len(rows))
    own_groups = _fold_groups(rows.reset_index(drop=True), keys, name)[0].tolist()
    paths = rows[path].tolist()
    depths = [len(split_path(p)) if isinstance(p, str) else 0 for p in paths]
    group_of: dict[tuple[tuple[str, ...], object], int] = {}
    codes: dict[tuple[int, int], int] = {}
    parents = [-1] * len(rows)
    for i in np.argsort(depths, kind="stable").tolist():
        label, at = label_of[i], paths[i]
        above = path_parent(at) if isinstance(at, str) else None
        parent = group_of.get((label, above), -1) if above is not None else -1
        own = (own_groups[i], parent)
        group_of.setdefault((label, at), codes.setdefault(own, len(codes)))
        parents[i] = parent
    return parents


def with_parent_groups(rows: pd.DataFrame, keys: Sequence[str], name: str = "module",
                       path: str = "module_path") -> tuple[pd.DataFrame, list[str]]:
    """``rows`` with their parents' fold groups (:func:`parent_groups`) in a column, and
    ``keys`` with that column: what :func:`fold_rows` takes to fold a tree's rows only under
    parents that folded together (drop the column after)."""
    return (rows.assign(**{PARENT_COLUMN: parent_groups(rows, keys, name, path)}),
            [*keys, PARENT_COLUMN])
