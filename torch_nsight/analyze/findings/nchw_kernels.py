"""``nchw_kernels``: PyTorch's NCHW batch-norm and depthwise-convolution kernels in a network
whose 4-D activations are NCHW; gain: the share of their time the channels-last kernels that
replace them saved on the calibration pair. The fix is channels-last for the model and its
inputs, the same switch :mod:`.layout_conversion` gives: ``--verify`` measures them together.

**Calibrated** on the zoo's EfficientNet-B0 (a calibration model), its training step profiled
NCHW and channels-last in one run (``bench/channels_last_costs.py``, H100, 2026-11-28; the
two reports are ``tests/data/channels_last/``): the NCHW batch-norm kernels' 8.46 ms became
4.28 ms of channels-last batch-norm kernels (the time left: 0.505), PyTorch's NCHW depthwise
kernels' 5.72 ms became 1.44 ms of cuDNN's NHWC depthwise kernels (0.25). What else moved
(1x1 convolutions run as GEMMs, cuDNN's transposes) is other checks' rows.
"""

from __future__ import annotations

import pandas as pd

from torch_nsight.analyze.findings.codes import Cause
from torch_nsight.analyze.findings.layout_conversion import runs_channels_last
from torch_nsight.analyze.findings.prepare import (
    contains,
    full_names,
    per_run,
)
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.registry import Context, finding_check
from torch_nsight.analyze.findings.sites import flat_rows
from torch_nsight.vocabulary import LABELS, split_path

#: Kernel family -> (functor words in its full name, words that mark the channels-last
#: kernel, the share of its NCHW time channels-last took on the calibration pair).
NCHW_FAMILIES: dict[Cause, tuple[tuple[str, ...], tuple[str, ...], float]] = {
    "batch_norm": (("batch_norm_",), ("channels_last",), 0.505),
    "depthwise": (("conv_depthwise2d_",), (), 0.25),
}


def _family_rows(work: pd.DataFrame, words: tuple[str, ...], not_words: tuple[str, ...]
                 ) -> pd.Series:
    """The kernels of one family: its functor words, none of the channels-last words."""
    names = full_names(work)
    mask = contains(names, words)
    return mask & ~contains(names, not_words) if not_words else mask


@finding_check("nchw_kernels")
def nchw_kernels(context: Context) -> list[Finding]:
    """One finding per variant, shape and family where NCHW kernels ran, in a profile that
    ran convolutions (a 1-D or 2-D batch norm with no convolution anywhere has no layout) and
    none of PyTorch's channels-last kernels (:func:`.layout_conversion.runs_channels_last`);
    the kernels of many modules are gathered at the model's root (``facts["sites"]``): one
    switch, one row."""
    work = context.work
    if work.empty or not work["is_conv"].any():
        return []
    # (channels-last already: an NCHW kernel left is some tensor's own layout)
    nchw = ~runs_channels_last(work, context.sites)
    families = {family: _family_rows(work, words, not_words) & nchw
                for family, (words, not_words, _) in NCHW_FAMILIES.items()}
    # a BatchNorm1d or Conv1d over (N, C, L): nothing for channels-last to lay out
    planar = ~flat_rows(work, context.sites, pd.concat(families.values(), axis=1).any(axis=1))
    found: list[Finding] = []
    for family, mask in families.items():
        for _, rows in work[mask & planar].groupby([work[k].astype(str) for k in LABELS],
                                                   sort=False, dropna=False):
            found.append(_finding(context, rows, family, NCHW_FAMILIES[family][2]))
    return found


def _finding(context: Context, rows: pd.DataFrame, family: Cause, left: float) -> Finding:
    """The family's kernels of one variant and shape: at their module, or gathered at the
    root when they ran in several."""
    modules = rows["module_path"].nunique()
    ops = context.site(rows).ops if modules == 1 else ()
    facts = {"kernels_per_run": len(rows) / rows["runs"].iloc[0], "time_ns": per_run(rows),
             "left_share": left}
    if modules > 1:
        root = split_path(str(rows["module_path"].iat[0]))[0]
        first = rows.iloc[:1].assign(module=root, module_path=root, direction="", op="")
        rows = pd.concat([first, rows.iloc[1:]])
        facts["sites"] = int(modules)
    return Finding(
        "nchw_kernels", rows, facts["time_ns"] * (1 - left), "calibrated", "medium",
        "channels_last", cause=family,
        module_kind="batch_norm" if family == "batch_norm" else "conv",
        aten_ops=ops, layout="nchw", facts=facts)
