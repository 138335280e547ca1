"""``small_grid``: latency-bound kernels under one wave holding :data:`SMALL_GRID_PCT` of
their label's time; gain: their roofline headroom. Registered last: a kernel an earlier
check reported (``Context.claimed``) is not reported again here."""

from __future__ import annotations

import torch_nsight.analyze.findings.wording as wording
from torch_nsight.analyze.findings.prepare import per_run, roof_pct
from torch_nsight.analyze.findings.registry import Context, Found, finding_check
from torch_nsight.vocabulary import LABELS, SITE_KEYS

#: A kernel site holding at least this share (%) of its label's time.
SMALL_GRID_PCT = 5.0


@finding_check("small_grid", says=wording.small_grid)
def small_grid(context: Context) -> list[Found]:
    """One finding per site and kernel name."""
    work = context.work
    label_time = (work["duration_ns"] / work["runs"]).groupby(
        [work[c] for c in LABELS]).transform("sum")
    small = (work["waves"] < 1) | work["reason"].str.startswith("small grid")
    candidates = work[(work["bound"] == "latency") & small & ~work.index.isin(context.claimed)
                      & work["headroom_ns"].notna()]
    found: list[Found] = []
    for _, rows in candidates.groupby([*SITE_KEYS, "kernel"], sort=False):
        time, gain = per_run(rows), per_run(rows, rows["headroom_ns"])
        share = 100.0 * time / label_time[rows.index].iloc[0]
        if share < SMALL_GRID_PCT or not gain > 0:
            continue
        found.append(Found(rows, gain, "roofline", "low", {
            "kernel": rows.iloc[0]["kernel"], "waves": rows["waves"].min(),
            "roof_pct": roof_pct(rows), "time_ns": time, "share_pct": share}))
    return found
