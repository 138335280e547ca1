"""``layout_conversion``: cuDNN's NCHW <-> NHWC transposes in a convolution's module; gain:
their measured time. The fix is channels-last for the model and its inputs (``channels_last_3d``
where the convolution's tensors are 5-D, ``fix_params["ndim"]`` 5), unless the
network already runs channels-last (:func:`runs_channels_last`): then the conversions are
cuDNN's own (a squeeze-excitation's N x C x 1 x 1 tensor, which is both layouts at once) and
no switch removes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from torch_nsight.analyze.findings.prepare import contains, full_names, in_groups_with, per_run
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.registry import Context, finding_check
from torch_nsight.analyze.findings.sites import Site, flat_rows, layout_params
from torch_nsight.vocabulary import LABELS, SITE_KEYS

LAYOUT_NAMES = ("nchwToNhwc", "nhwcToNchw")
#: ``gain_basis`` of a gain that is the measured time of the kernels the fix removes (not a
#: fix timed: ``measured`` is ``findings --benchmark``'s, ``steps`` ``profile --verify``'s).
REMOVED_BASIS = "removed"
#: PyTorch's own kernels for channels-last input (batch norm, pooling, upsampling): words of
#: their functors. cuDNN's NHWC kernels are no sign: it converts NCHW input to run them.
CHANNELS_LAST_KERNELS = ("channels_last", "_nhwc")


def runs_channels_last(work: pd.DataFrame,
                       sites: Mapping[tuple[Any, ...], Site] | None = None) -> pd.Series:
    """For each row, whether any of PyTorch's own kernels for channels-last input ran in its
    variant and shape (a sweep may hold an NCHW variant beside a channels-last one); with
    ``sites`` (by :data:`~torch_nsight.vocabulary.JOIN_KEYS`, missing keys ``""`` as the
    checks' prepared table has them: :attr:`Context.sites`), not counting a site whose
    recorded calls lay nothing out (:attr:`Site.planar` False: a batch norm over
    N x C x 1 x 1, both layouts at once, runs channels-last kernels in an NCHW model)."""
    names = full_names(work)
    ran = names.str.contains("at::native::", regex=False) & contains(names,
                                                                     CHANNELS_LAST_KERNELS)
    if sites is not None:
        ran &= ~flat_rows(work, sites, ran)
    keys = [work[k].astype(str) for k in LABELS if k in work]
    return ran.groupby(keys, sort=False, dropna=False).transform("any").astype(bool) \
        if keys else ran


@finding_check("layout_conversion")
def layout_conversion(context: Context) -> list[Finding]:
    """One finding per site where a convolution ran beside layout conversion kernels."""
    work = context.work
    found: list[Finding] = []
    already_all = runs_channels_last(work, context.sites)
    layout = contains(work["kernel"], LAYOUT_NAMES)
    for _, group in work[in_groups_with(work, SITE_KEYS, layout)].groupby(list(SITE_KEYS),
                                                                         sort=False):
        rows = group[layout[group.index]]
        already = bool(already_all[group.index].any())
        site = context.site(group)
        conv = (group["is_conv"].any() or site.kind == "conv"
                or context.calls_of(group)["aten_op"].str.contains("conv").any())
        if rows.empty or not conv:
            continue
        gain = per_run(rows)
        counts = rows["kernel"].value_counts(sort=False) / rows["runs"].iloc[0]
        # channels-last lays out 4-D tensors, channels_last_3d 5-D ones (a Conv3d's): a
        # Conv1d cuDNN converts has no switch
        calls = context.calls_of(group)
        params = {} if calls.empty else layout_params(calls["shapes"])
        found.append(Finding(
            "layout_conversion", rows, gain, REMOVED_BASIS, "medium",
            "channels_last" if params is not None and not already else "none_known",
            module_kind="conv", aten_ops=site.ops,
            layout=("channels_last" if already else "nchw") if params is not None else None,
            fix_params=params or {},
            facts={"kernels_per_run": len(rows) / rows["runs"].iloc[0],
                   "counts": dict(counts.items()), "gain_ns": gain,
                   "module_ns": per_run(group)}))
    return found
