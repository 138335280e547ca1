"""``layout_conversion``: cuDNN's NCHW <-> NHWC transposes in a convolution's module; gain:
their measured time. The fix is channels-last for the model and its inputs."""

from __future__ import annotations

from torch_nsight.analyze.findings.prepare import contains, in_groups_with, per_run
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.registry import Context, finding_check
from torch_nsight.analyze.findings.sites import takes_4d
from torch_nsight.vocabulary import SITE_KEYS

LAYOUT_NAMES = ("nchwToNhwc", "nhwcToNchw")


@finding_check("layout_conversion")
def layout_conversion(context: Context) -> list[Finding]:
    """One finding per site where a convolution ran beside layout conversion kernels."""
    work = context.work
    found: list[Finding] = []
    layout = contains(work["kernel"], LAYOUT_NAMES)
    for _, group in work[in_groups_with(work, SITE_KEYS, layout)].groupby(list(SITE_KEYS),
                                                                         sort=False):
        rows = group[layout[group.index]]
        site = context.site(group)
        conv = (group["is_conv"].any() or site.kind == "conv"
                or context.calls_of(group)["aten_op"].str.contains("conv").any())
        if rows.empty or not conv:
            continue
        gain = per_run(rows)
        counts = rows["kernel"].value_counts(sort=False) / rows["runs"].iloc[0]
        # channels-last lays out 4-D tensors: a Conv1d or Conv3d cuDNN converts has no switch
        calls = context.calls_of(group)
        planar = calls.empty or any(takes_4d(shapes) for shapes in calls["shapes"])
        found.append(Finding(
            "layout_conversion", rows, gain, "measured", "medium",
            "channels_last" if planar else "none_known",
            module_kind="conv", aten_ops=site.ops, layout="nchw" if planar else None,
            facts={"kernels_per_run": len(rows) / rows["runs"].iloc[0],
                   "counts": dict(counts.items()), "gain_ns": gain,
                   "module_ns": per_run(group)}))
    return found
