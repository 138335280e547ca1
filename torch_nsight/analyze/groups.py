"""The kernel table grouped three more ways: by kernel name, by shape and by rank.

The module tree answers "which module"; these answer "which kernel, across every module that
launches it", "how do the shapes compare" and "how do the ranks of a distributed run
compare". Times are per run, as in :mod:`torch_nsight.analyze.rollup`.
"""

from __future__ import annotations

import pandas as pd

from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.fold import (
    STRUCTURE_COLUMN,
    folded_name,
    index_template,
    with_structure,
)
from torch_nsight.analyze.frames import blank_to_none, filled, keyed, known_sums, per_run
from torch_nsight.analyze.rollup import BOUNDS, whole_counts
from torch_nsight.analyze.spread import SPREAD_COLUMNS, add_runs, with_spread
from torch_nsight.vocabulary import LABELS, UNATTRIBUTED, in_module_range

KERNEL_GROUP_COLUMNS = (
    "variant", "shape", "kernel", "launches", "duration_ns", "mean_ns", "pct_of_total",
    "modules", "top_module", "headroom_ns", "bound", *SPREAD_COLUMNS,
)
SHAPE_COLUMNS = (
    "variant", "shape", "runs", "launches", "duration_ns", "coverage_pct", "top_module",
    "top_module_pct", *(f"{b}_pct" for b in BOUNDS), "headroom_ns", *SPREAD_COLUMNS[1:],
)
RANK_COLUMNS = (
    "rank", "variant", "shape", "launches", "duration_ns", "nccl_ns", "nccl_pct",
    "top_module", "top_module_pct",
)
#: Name prefix of NCCL's communication kernels (``ncclDevKernel_AllReduce_...``).
NCCL_PREFIX = "nccl"


def _top(work: pd.DataFrame, keys: list[str], column: str,
         kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per group, the value of ``column`` holding the most time, and its share (%). Module
    names that differ only by a block index count as one (``h.{0-11}.mlp.act ×12``): the
    twelve blocks' time together, not one twelfth of it; given the kernel table, only blocks
    that launched the same kernels count as one (a Conv2d, a BatchNorm and a ReLU at
    ``stem.0``, ``stem.1`` and ``stem.2`` are three modules, not one repeated three times)."""
    values = filled(work[column], UNATTRIBUTED)
    if column == "module":
        templates = values.map(lambda v: index_template(v)[0])
        if kernels is not None and "module_path" in work:
            # what each module launched, in every pass: its forward and backward count as one
            structure = with_structure(work, kernels)[STRUCTURE_COLUMN]
            paths = [work[c] for c in (*LABELS, "module_path")]
            launched = structure.groupby(paths, sort=False).transform(
                lambda s: "|".join(sorted(set(s))))
            indexed = templates != values
            templates = templates.where(~indexed, templates + "\0" + launched)
        values = templates
    sums = (work.assign(_v=values).groupby([*keys, "_v"], sort=False)["duration_ns"].sum()
            .reset_index())
    totals = sums.groupby(keys, sort=False)["duration_ns"].transform("sum")
    sums["share"] = 100.0 * sums["duration_ns"] / totals
    best = sums.sort_values("duration_ns", ascending=False, kind="stable")
    best = best.drop_duplicates(subset=keys)
    if column == "module":  # the template named by the blocks it stands for, in its group
        names = filled(work[column], UNATTRIBUTED)
        found = {}
        for key, group in names.groupby([*(work[k] for k in keys), values], sort=False):
            members = sorted(set(group), key=str)
            indices = [index_template(m)[1] for m in members]
            template = index_template(members[0])[0]  # the name's, without the structure
            found[key if isinstance(key, tuple) else (key,)] = (
                members[0] if len(members) == 1
                else f"{folded_name(template, indices)} ×{len(members)}")
        best["_v"] = [found[key] for key in best[[*keys, "_v"]].itertuples(index=False,
                                                                             name=None)]
    return best.rename(columns={"_v": f"top_{column}", "share": f"top_{column}_pct"})[
        [*keys, f"top_{column}", f"top_{column}_pct"]]


def _finish(out: pd.DataFrame, keys: list[str], columns: tuple[str, ...]) -> pd.DataFrame:
    for column in keys:
        out[column] = blank_to_none(out[column])
    return whole_counts(out.loc[:, list(columns)].reset_index(drop=True), ("launches",))


@needs("kernel", "module", "duration_ns")
def by_kernel(df: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel name and (variant, shape), across every module that launches it.

    Args:
        df: an attributed, classified kernel table.

    Returns:
        :data:`KERNEL_GROUP_COLUMNS`, most time first: launches and time per run, mean time
        per launch, share of the (variant, shape)'s GPU time, how many modules launch it,
        the one holding most of its time, headroom, the bound holding most of its time,
        and the spread of its time over the runs (:mod:`torch_nsight.analyze.spread`).
    """
    keys = [*LABELS, "kernel"]
    work = keyed(df, keys, ["module", "module_path", "direction", "duration_ns", "headroom_ns",
                            "bound"])
    groups = work.groupby(keys, sort=False)
    out = groups.agg(launches=("duration_ns", "size"), duration_ns=("duration_ns", "sum"))
    out[["headroom_ns"]] = known_sums(groups, ["headroom_ns"])
    out = out.assign(modules=groups["module"].nunique()).reset_index()
    out = out.merge(_top(work, keys, "module", df), on=keys, how="left")
    out = out.merge(_top(work, keys,
                         "bound").rename(columns={"top_bound": "bound"}), on=keys, how="left")
    out["bound"] = out["bound"].where(out["bound"] != UNATTRIBUTED)
    out = per_run(out, df, list(LABELS), ["launches", "duration_ns", "headroom_ns"])
    out = with_spread(add_runs(out.drop(columns="runs"), df, keys))
    out["mean_ns"] = out["duration_ns"] / out["launches"]
    totals = out.groupby(list(LABELS), sort=False)["duration_ns"].transform("sum")
    out["pct_of_total"] = 100.0 * out["duration_ns"] / totals
    out = out.sort_values([*LABELS, "duration_ns"], ascending=[True, True, False],
                          kind="stable")
    out = _label_order(out, df)
    return _finish(out, list(keys), KERNEL_GROUP_COLUMNS)


def _label_order(out: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Labels in the order they ran (first launch), rows within a label kept in order."""
    first = keyed(df, list(LABELS)).drop_duplicates().reset_index(drop=True)
    first["_order"] = range(len(first))
    out = out.merge(first, on=list(LABELS), how="left")
    return out.sort_values("_order", kind="stable").drop(columns="_order")


@needs("module", "duration_ns")
def by_shape(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, shape), in the order they ran.

    Args:
        df: an attributed, classified kernel table.

    Returns:
        :data:`SHAPE_COLUMNS`: runs, launches and GPU time per run, the share of time inside
        module ranges, the module (innermost) holding most time and its share, the share of
        time per bound, headroom, and the spread of the time over the runs.
    """
    keys = list(LABELS)
    work = keyed(df, keys, ["module", "module_path", "direction", "duration_ns", "headroom_ns",
                            "bound"])
    inside = work["module"].map(in_module_range).astype(bool)
    work["_inside"] = work["duration_ns"].where(inside, 0.0)
    for bound in BOUNDS:
        work[f"_{bound}"] = work["duration_ns"].where(work["bound"] == bound, 0.0)
    groups = work.groupby(keys, sort=False)
    out = groups.agg(launches=("duration_ns", "size"), duration_ns=("duration_ns", "sum"),
                     inside=("_inside", "sum"))
    out[["headroom_ns"]] = known_sums(groups, ["headroom_ns"])
    out = out.assign(**{f"{b}_pct": groups[f"_{b}"].sum() for b in BOUNDS}).reset_index()
    out["coverage_pct"] = 100.0 * out["inside"] / out["duration_ns"]
    for bound in BOUNDS:
        out[f"{bound}_pct"] = 100.0 * out[f"{bound}_pct"] / out["duration_ns"]
    out = out.merge(_top(work, keys, "module", df), on=keys, how="left")
    out = per_run(out, df, keys, ["launches", "duration_ns", "headroom_ns"])
    out = with_spread(add_runs(out.drop(columns="runs"), df, keys))
    return _finish(out, keys, SHAPE_COLUMNS)


def has_ranks(df: pd.DataFrame) -> bool:
    """Whether the table holds kernels of at least one known distributed rank."""
    return "rank" in df and bool(df["rank"].notna().any())


@needs("rank", "kernel", "module", "duration_ns")
def by_rank(df: pd.DataFrame) -> pd.DataFrame:
    """One row per rank and (variant, shape): compare the processes of a distributed run.

    Args:
        df: an attributed kernel table with a ``rank`` column (reports named
            ``report-rank<R>``, as ``torch-nsight profile --ranks`` writes them).

    Returns:
        :data:`RANK_COLUMNS`, by rank: launches and GPU time per run, the time and share in
        NCCL communication kernels, and the module holding most of the time outside them
        (its share of that time).

    Raises:
        ValueError: no row has a rank.
    """
    if not has_ranks(df):
        raise ValueError("no kernel has a rank: load the report-rank<R> files that "
                         "`torch-nsight profile --ranks` writes")
    keys = ["rank", *LABELS]
    ranked = df[df["rank"].notna()]
    work = keyed(ranked, keys, ["kernel", "module", "module_path", "direction",
                                "duration_ns"])
    is_nccl = work["kernel"].astype(str).str.lower().str.startswith(NCCL_PREFIX)
    work["_nccl"] = work["duration_ns"].where(is_nccl, 0.0)
    out = work.groupby(keys, sort=False).agg(
        launches=("duration_ns", "size"), duration_ns=("duration_ns", "sum"),
        nccl_ns=("_nccl", "sum")).reset_index()
    out["nccl_pct"] = 100.0 * out["nccl_ns"] / out["duration_ns"]
    # the module that holds most of the rank's own work: an NCCL kernel's time is mostly
    # waiting for the other ranks, in whichever module's backward launched it
    compute = work[~is_nccl]
    out = out.merge(_top(compute, keys, "module", ranked) if len(compute)
                    else _top(work, keys, "module", ranked), on=keys, how="left")
    out = per_run(out, ranked, keys, ["launches", "duration_ns", "nccl_ns"])
    out["rank"] = out["rank"].astype(int)
    out = out.sort_values("rank", kind="stable")
    return _finish(out, list(LABELS), RANK_COLUMNS)
