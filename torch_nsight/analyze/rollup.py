"""The module tree rolled up like a profiler's call tree, and attribution coverage.

Times are per run: where a (variant, shape) was measured in several runs (or read from
several reports), sums are divided by the number of distinct (report, run) pairs.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.frames import (
    blank_to_none,
    each_value,
    filled,
    known_sums,
    runs_per_group,
)
from torch_nsight.analyze.spread import RUNS_COLUMN, SPREAD_COLUMNS, run_times, with_spread
from torch_nsight.vocabulary import (
    LABELS,
    UNATTRIBUTED,
    ancestors,
    in_module_range,
    join_path,
    path_depth,
    path_leaf,
    path_parent,
    path_prefix,
    split_path,
)

BOUNDS = ("memory", "compute", "latency")
MODULE_COLUMNS = (
    "variant", "shape", "direction", "module", "module_path", "depth", "inclusive_ns",
    "exclusive_ns", "pct_of_total", "kernels", "exclusive_kernels", "headroom_ns",
    "exclusive_headroom_ns", "flops", "dram_bytes", "bound", "bound_share", *SPREAD_COLUMNS,
)


def whole_counts(table: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """Counts per run (``launches``, ``kernels``) as integers (``Int64``) where every run
    launched the same number; a column with a fractional mean stays float."""
    for column in columns:
        if column in table:
            values = pd.to_numeric(table[column], errors="coerce").astype("float64")
            known = values.dropna()
            if len(known) == 0 or bool((known - known.round()).abs().max() < 1e-9):
                table[column] = values.round().astype("Int64")
    return table


@needs("module", "duration_ns")
def coverage(df: pd.DataFrame) -> float:
    """Return the share of GPU time (0..1) spent in kernels inside a module range (an
    optimizer's step counts; a named call outside every module, such as the loss, does not).

    Args:
        df: an attributed kernel table (``module``, ``duration_ns``).

    Returns:
        The share; NaN for an empty table or one without durations.
    """
    total = df["duration_ns"].sum()
    if not total or pd.isna(total):
        return float("nan")
    inside = df.loc[each_value(df["module"], in_module_range), "duration_ns"].sum()
    return float(inside / total)


def module_paths(df: pd.DataFrame, depth: int | None = None) -> pd.Series:
    """Each kernel's module path, cut to ``depth`` (``(unattributed)`` where it has none)."""
    paths = df.reindex(columns=["module_path"])["module_path"].fillna(UNATTRIBUTED).astype(str)
    if depth is not None:  # each distinct path cut once
        paths = paths.map({p: path_prefix(p, depth) for p in paths.unique()})
    return paths


def path_keys(df: pd.DataFrame, keys: list[str], depth: int | None = None) -> pd.DataFrame:
    """``df``'s ``keys`` columns with ``module_path`` cut to ``depth`` (the grouping keys of
    per-run module times: :func:`torch_nsight.analyze.spread.run_times`)."""
    return df.reindex(columns=keys).assign(module_path=module_paths(df, depth).to_numpy())


def _base(df: pd.DataFrame, depth: int | None) -> pd.DataFrame:
    """Kernel facts per (variant, shape, direction, truncated path)."""
    base = df.reindex(columns=[*LABELS, "direction", "module_path", "duration_ns",
                               "headroom_ns", "flops", "dram_bytes", "bound"]).copy()
    for column in (*LABELS, "direction"):
        base[column] = filled(base[column])
    base["module_path"] = module_paths(df, depth)
    base["order"] = np.arange(len(base))
    for bound in BOUNDS:
        base[f"t_{bound}"] = base["duration_ns"].where(base["bound"] == bound, 0.0)
    keys = [*LABELS, "direction", "module_path"]
    groups = base.groupby(keys, sort=False)
    out = groups.agg(duration_ns=("duration_ns", "sum"), kernels=("duration_ns", "size"))
    out[["headroom_ns", "flops", "dram_bytes"]] = known_sums(
        groups, ["headroom_ns", "flops", "dram_bytes"])
    out["order"] = groups["order"].min()
    out[[f"t_{b}" for b in BOUNDS]] = groups[[f"t_{b}" for b in BOUNDS]].sum()
    return out.reset_index()


@needs("module", "module_path", "duration_ns")
def module_tree(df: pd.DataFrame, depth: int | None = None, keep_runs: bool = False
                ) -> pd.DataFrame:
    """Roll kernels up the module tree, per variant, shape and direction.

    Args:
        df: an attributed, classified kernel table.
        depth: deepest level kept (root = 0); deeper modules fold into their ancestor at
            that level. None keeps every level.
        keep_runs: keep the per-run inclusive times (``run_ns``, see
            :mod:`torch_nsight.analyze.spread`).

    Returns:
        One row per module node in call-tree order (parents before children, siblings in
        order of first launch), with :data:`MODULE_COLUMNS`: inclusive and exclusive time
        per run, share of the (variant, shape)'s total GPU time, kernel counts per run,
        headroom, FLOPs and DRAM bytes (inclusive), the bound holding most of the inclusive
        time and that bound's share, and the spread of the inclusive time over the runs.
        Kernels outside any module form the ``(unattributed)`` row.

    Raises:
        ValueError: ``depth`` is negative.
    """
    if depth is not None and depth < 0:
        raise ValueError(f"depth must be None or >= 0, got {depth}")
    if df.empty:
        return pd.DataFrame(columns=[*MODULE_COLUMNS, RUNS_COLUMN] if keep_runs
                            else list(MODULE_COLUMNS))
    base = _base(df, depth)
    inclusive_runs = _inclusive_runs(df, depth)
    sums = ["duration_ns", "kernels", "headroom_ns", "flops", "dram_bytes",
            *(f"t_{b}" for b in BOUNDS)]
    nodes, paths = _per_ancestor(base)
    keys = [*LABELS, "direction", "node"]
    for column in sums:
        nodes[f"x_{column}"] = nodes[column].where(nodes["leaf"], 0)
    grouped = nodes.groupby(keys, sort=False)
    tree = known_sums(grouped, [*sums, "x_headroom_ns"]).rename(
        columns={"x_headroom_ns": "exclusive_headroom_ns"})
    tree["exclusive_ns"] = grouped["x_duration_ns"].sum()
    tree["exclusive_kernels"] = grouped["x_kernels"].sum()
    tree["order"] = grouped["order"].min()
    tree = tree.reset_index().rename(columns={"duration_ns": "inclusive_ns"})
    # the path strings themselves, not a copy in pandas' text type per column operation:
    # the paths of a deep tree are its largest part (O(depth²) characters)
    tree["module_path"] = pd.Series([paths[node] for node in tree.pop("node")],
                                    index=tree.index, dtype=object)
    tree = tree.merge(runs_per_group(df, LABELS), on=list(LABELS), how="left")
    per_run = ["inclusive_ns", "exclusive_ns", "kernels", "exclusive_kernels", "headroom_ns",
               "exclusive_headroom_ns", "flops", "dram_bytes", *(f"t_{b}" for b in BOUNDS)]
    tree[per_run] = tree[per_run].astype("float64").div(tree["runs"], axis=0)
    tree["module"] = tree["module_path"].map(path_leaf)
    tree["depth"] = tree["module_path"].map(path_depth)
    roots = tree["depth"] == 0
    total = tree[roots].groupby(list(LABELS))["inclusive_ns"].sum().rename("total")
    tree = tree.join(total, on=list(LABELS))
    tree["pct_of_total"] = 100.0 * tree["inclusive_ns"] / tree["total"]
    times = tree[[f"t_{b}" for b in BOUNDS]].to_numpy()
    best = times.argmax(axis=1)
    known = times.sum(axis=1) > 0
    tree["bound"] = np.where(known, np.array(BOUNDS, dtype=object)[best], None)
    tree["bound_share"] = np.where(known, times.max(axis=1) / tree["inclusive_ns"], np.nan)
    tree = _call_tree_order(tree, _model_order(df, depth))
    tree[RUNS_COLUMN] = [inclusive_runs.get(key) for key in zip(
        *(tree[c] for c in (*LABELS, "direction", "module_path")), strict=True)]
    tree = with_spread(tree, keep_runs=keep_runs)
    for column in (*LABELS, "direction"):
        tree[column] = blank_to_none(tree[column])
    columns = [*MODULE_COLUMNS, RUNS_COLUMN] if keep_runs else list(MODULE_COLUMNS)
    return whole_counts(tree.loc[:, columns].reset_index(drop=True),
                        ("kernels", "exclusive_kernels"))


def _per_ancestor(base: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Each row of ``base`` once per ancestor of its module (itself last), in the rows'
    order, with ``leaf`` (the row's own module) and ``node`` (the ancestor's number in the
    returned paths): no path string is copied per (row, ancestor), O(rows x depth)."""
    rows, node_ids, leaves = [], [], []
    numbers: dict[str, int] = {}
    for row, leaf in enumerate(base["module_path"]):
        for path in ancestors(leaf):
            rows.append(row)
            node_ids.append(numbers.setdefault(path, len(numbers)))
            leaves.append(path is leaf or path == leaf)
    nodes = base.drop(columns="module_path").iloc[rows].reset_index(drop=True)
    nodes["leaf"] = leaves
    nodes["node"] = node_ids
    return nodes, list(numbers)


def _inclusive_runs(df: pd.DataFrame, depth: int | None) -> dict[tuple[str, ...], object]:
    """Per (variant, shape, direction, path) of every module node, its inclusive time in
    each run: the per-run times of the leaf paths added up to each of their ancestors."""
    keys = [*LABELS, "direction", "module_path"]
    leaves = run_times(df, keys, group_keys=path_keys(df, keys, depth))
    nodes: dict[tuple[str, ...], object] = {}
    for (variant, shape, direction, path), times in leaves.items():
        for node in ancestors(path):
            key = (variant, shape, direction, node)
            nodes[key] = times + nodes[key] if key in nodes else times.copy()
    return nodes


def _source_path(path: str, module: str, source: str) -> str:
    """The path of the block a replicated row copies: each component of ``path`` that is a
    prefix of the row's ``module`` name is cut from ``source`` at the same depth
    (``.../transformer.h.1/transformer.h.1.attn`` from ``transformer.h.0.attn`` gives
    ``.../transformer.h.0/transformer.h.0.attn``)."""
    parts = []
    for part in split_path(path):
        if part == module or module.startswith(part + "."):
            parts.append(".".join(source.split(".")[: part.count(".") + 1]))
        else:
            parts.append(part)
    return join_path(parts)


def _model_order(df: pd.DataFrame, depth: int | None) -> dict[tuple[str, str, str], int]:
    """Per (variant, shape, path prefix), where the module first ran in the forward pass (in
    any pass where it has no forward), measured rows only; a replicated block takes the place
    of the block it copies, so ``h.0 ... h.11`` list in model order, not measured-first."""
    work = df.reindex(columns=[*LABELS, "direction", "module", "replicated_from"])
    work = filled(work)
    paths = module_paths(df, depth).tolist()
    anchors: dict[tuple[str, str, str], int] = {}
    copies: list[tuple[str, str, str, str]] = []
    for order, (variant, shape, direction, module, source, path) in enumerate(zip(
            work["variant"], work["shape"], work["direction"], work["module"],
            work["replicated_from"], paths, strict=True)):
        if source:
            copies.append((variant, shape, path, _source_path(path, str(module), str(source))))
            continue
        rank = order if direction == "fwd" else len(work) + order  # forward first
        for node in ancestors(path):
            key = (variant, shape, node)
            anchors[key] = min(anchors.get(key, rank), rank)
    for variant, shape, path, source in copies:
        # a source shallower than the copy anchors the copy's deeper levels with its own
        sources = ancestors(source)
        for level, node in enumerate(ancestors(path)):
            key = (variant, shape, node)
            found = anchors.get((variant, shape, sources[min(level, len(sources) - 1)]))
            if key not in anchors and found is not None:
                anchors[key] = found
    return anchors


def _natural(name: str) -> tuple[object, ...]:
    """``h.10`` after ``h.9``: numbers compared as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _call_tree_order(tree: pd.DataFrame,
                     model: dict[tuple[str, str, str], int] | None = None) -> pd.DataFrame:
    """Sort labels by first launch (a sweep's shapes in the order they ran, not as strings:
    ``4x256`` before ``4x1024``), then parents before children and siblings in model order
    (where they first ran in the forward pass, a replicated block in the place of the block
    it copies, ties by name with numbers as numbers; else by first launch): a depth-first
    walk, the same for the forward and the backward pass."""
    model = model or {}
    columns = [*LABELS, "direction", "module_path", "order"]
    rows = list(zip(*(tree[c] for c in columns), strict=True))
    first: dict[tuple[Any, ...], Any] = {((v, s, d), path): order
                                         for v, s, d, path, order in rows}
    label_first = tree.groupby(list(LABELS), sort=False)["order"].min().to_dict()
    steps: dict[tuple[Any, ...], tuple[object, object]] = {}  # one per node, not per row

    def step(group: tuple[Any, ...], prefix: str) -> tuple[object, object]:
        if (group, prefix) not in steps:
            anchor = model.get((str(group[0]), str(group[1]), prefix))
            steps[(group, prefix)] = (anchor if anchor is not None
                                      else first.get((group, prefix), 0),
                                      _natural(path_leaf(prefix)))
        return steps[(group, prefix)]

    def walk(group: tuple[Any, ...], paths: list[str]) -> dict[str, int]:
        """Each path's place in the depth-first walk of its group's tree (its ancestors
        joined as nodes where they have no row): a node's rank, not its chain of
        ancestors, so that the keys are linear in the depth."""
        children: dict[str, list[str]] = {}
        seen: set[str] = set()
        roots: list[str] = []
        for path in paths:
            while path not in seen:
                seen.add(path)
                parent = path_parent(path)
                if parent is None:
                    roots.append(path)
                    break
                children.setdefault(parent, []).append(path)
                path = parent
        rank: dict[str, int] = {}
        stack = sorted(roots, key=lambda p: (step(group, p), p), reverse=True)
        while stack:
            node = stack.pop()
            rank[node] = len(rank)
            stack.extend(sorted(children.get(node, ()), key=lambda p: (step(group, p), p),
                                reverse=True))
        return rank

    groups: dict[tuple[Any, ...], list[str]] = {}
    for variant, shape, direction, path, _ in rows:
        groups.setdefault((variant, shape, direction), []).append(str(path))
    ranks = {group: walk(group, paths) for group, paths in groups.items()}

    def key(row: tuple[object, ...]) -> tuple[object, ...]:
        variant, shape, direction, path = row[:4]
        group = (variant, shape, direction)
        direction_rank = {"fwd": 0, "bwd": 1}.get(str(direction), 2)
        label = (variant, shape)
        return (label_first.get(label, 0), label, direction_rank, path == UNATTRIBUTED,
                ranks[group][str(path)])

    order = sorted(range(len(tree)), key=lambda i: key(rows[i]))
    return tree.iloc[order]
