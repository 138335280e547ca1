"""Timeline wording: what to try per verdict, the evidence sentences and the fix per finding.

English only, made here and nowhere else, from the numbers
:mod:`~torch_nsight.analyze.steps` measured and the codes the rules of
:mod:`~torch_nsight.analyze.verdicts` gave (:func:`~torch_nsight.analyze.timeline_summary`,
:func:`~torch_nsight.analyze.timeline_findings`): :func:`word_summary` and
:func:`word_step_findings` add the ``evidence``, ``advice``/``fix`` and ``largest_gaps`` texts.
Durations and byte counts are written by :mod:`torch_nsight.units`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from torch_nsight.analyze.steps import SMALL_KERNEL_NS
from torch_nsight.analyze.timeline_analysis import STEP_FINDING_COLUMNS, SUMMARY_COLUMNS
from torch_nsight.analyze.verdicts import (
    COPY_BUSY_PCT,
    COPY_WALL_PCT,
    DATA_WAIT_PCT,
    LAUNCH_BUSY_PCT,
    bare_uncertain,
    judged_busy_pct,
    judges_unprofiled,
    profiler_lengthened,
)
from torch_nsight.units import format_bytes, format_duration

ADVICE: dict[str, str] = {
    "data-bound": "Feed the GPU faster: give the DataLoader more workers (num_workers), keep "
                  "batches prefetched (prefetch_factor, persistent_workers=True) and move "
                  "per-sample preprocessing out of the training loop.",
    "copy-bound": "Overlap or avoid the copies: load batches into pinned memory "
                  "(DataLoader(pin_memory=True)), copy with .to(device, non_blocking=True) "
                  "and keep tensors on the GPU between steps.",
    "launch-bound": "Cut launch overhead: capture the step in a CUDA graph "
                    "(torch.compile(mode=\"reduce-overhead\")), fuse small ops with "
                    "torch.compile, or give each kernel more work with a larger batch.",
    "GPU-bound": "The GPU is the limit: find the slowest modules and kernels with Nsight "
                 "Compute (torch_nsight.sweep) and speed them up (bf16 tensor cores, fused "
                 "kernels such as scaled_dot_product_attention, torch.compile).",
    "cpu": "The GPU waits on CPU work between long kernels: find it in largest_gaps and "
           "take it off the step (avoid synchronizing calls such as .item() or .cpu(), "
           "precompute or overlap Python work).",
    "pageable": "Copy from pinned memory (DataLoader(pin_memory=True) or tensor.pin_memory()) "
                "with .to(device, non_blocking=True), so the copy overlaps compute.",
    "module": "Compile or graph-capture this module (torch.compile(module, "
              "mode=\"reduce-overhead\")) so its small kernels fuse or launch together.",
}
#: What to try, per advice code (:func:`~torch_nsight.analyze.verdicts.decide_advice`): a
#: verdict's own, and a GPU-bound step's that still idles a finding's share of it.
VERDICT_ADVICE: dict[str, str] = {
    "data-bound": ADVICE["data-bound"], "copy-bound": ADVICE["copy-bound"],
    "launch-bound": ADVICE["launch-bound"], "CPU-bound": ADVICE["cpu"],
    "GPU-bound": ADVICE["GPU-bound"],
    "gpu_bound_idle": "The GPU is busy most of the step: speed up its slowest modules and "
                      "kernels (Nsight Compute: torch_nsight.sweep; bf16 tensor cores, fused "
                      "kernels such as scaled_dot_product_attention, torch.compile), and take "
                      "the idle time the findings below name off the step.",
}
#: The fix, per finding.
FINDING_FIXES: dict[str, str] = {
    "data_wait": ADVICE["data-bound"], "copy_bound": ADVICE["copy-bound"],
    "pageable_copies": ADVICE["pageable"], "launch_bound": ADVICE["launch-bound"],
    "gpu_idle": ADVICE["cpu"], "small_kernels": ADVICE["module"],
}



def _time(duration_ns: float) -> str:
    """A duration as the timeline's sentences write it: ``1160.0 ms``, ``845 µs``, ``n/a``."""
    return format_duration(duration_ns, largest="ms", decimals=1, missing="n/a")

def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _copies(n: float) -> str:
    return f"{n:g} {'copy' if n == 1 else 'copies'}"


def _gap(gap: pd.Series) -> str:
    """``812 µs before h.0.attn (CPU: aten::linear)``."""
    after, before, cpu = (_text(gap[c]) for c in ("prev_module", "next_module", "cpu"))
    where = (f"before {before}" if before else f"after {after}" if after
             else "with no GPU work in the step")
    return f"{_time(gap['gap_ns'])} {where} (CPU: {cpu or 'outside any op'})"


def largest_gaps_text(gaps: Any) -> str:
    """A shape's largest gaps (the summary's ``largest_gaps``: one dict per gap) as one
    line: ``812 µs before h.0.attn (CPU: aten::linear); ...``."""
    if not isinstance(gaps, (list, tuple)):
        return ""
    return "; ".join(_gap(pd.Series(gap)) for gap in gaps)


def _judged_step(row: pd.Series) -> str:
    """The step the verdict's busy share is of: ``1.2 ms step`` or ``... timed without the
    profiler``."""
    if judges_unprofiled(row):
        return f"{_time(row['bare_wall_ns'])} step timed without the profiler"
    return f"{_time(row['wall_ns'])} step"


def _counts(row: pd.Series, *, final_and: bool = False) -> str:
    """``1234 kernels, 88% of them under 10 µs, [and ]12.3 launches per ms``; ``no kernel
    (copies and memsets only), ...`` for a step without kernels (no share of none)."""
    kernels = (f"{row['kernels']:g} kernels, {row['small_kernel_pct']:.0f}% of them under "
               f"{SMALL_KERNEL_NS / 1e3:g} µs" if row["kernels"] > 0 else
               "no kernel (copies and memsets only)")
    return f"{kernels}, {'and ' if final_and else ''}{row['launches_per_ms']:.1f} launches per ms"


def _busy(row: pd.Series, *, only: bool = False, under: bool = True) -> str:
    """``The GPU was busy [only ]23.4%[ (under 50%)] of the 1.2 ms step``, ``under`` naming
    the launch-bound threshold."""
    threshold = f" (under {LAUNCH_BUSY_PCT:g}%)" if under else ""
    return (f"The GPU was busy {'only ' if only else ''}{judged_busy_pct(row):.1f}%{threshold} "
            f"of the {_judged_step(row)}")


def _copy_share(row: pd.Series) -> str:
    """``Copies took 4.6% of the 1.2 ms step and 7.9% of GPU busy time``."""
    return (f"Copies took {row['copy_pct']:.1f}% of the {_time(row['wall_ns'])} "
            f"step and {row['copy_busy_pct']:.1f}% of GPU busy time")


def _idle(found: Mapping[str, Any], shape: pd.Series) -> str:
    """``The GPU was idle 45.6% of the 1.2 ms step outside data loading``."""
    return (f"The GPU was idle {found['idle_pct']:.1f}% of the {_judged_step(shape)} outside "
            "data loading")


def _data_bound(row: pd.Series) -> str:
    return (f"The GPU waited on data loading for {row['data_wait_pct']:.1f}% of the "
            f"{_time(row['wall_ns'])} step (data-bound from {DATA_WAIT_PCT:g}%).")


def _copy_bound(row: pd.Series) -> str:
    moved = (f"of {format_bytes(row['copy_bytes'])} at {row['copy_gb_per_s']:.1f} GB/s"
             if pd.notna(row["copy_bytes"]) and pd.notna(row["copy_gb_per_s"])
             else "whose bytes are not known")
    return (f"{_copy_share(row)} ({_copies(row['copies'])} {moved}; copy-bound from "
            f"{COPY_WALL_PCT:g}% or {COPY_BUSY_PCT:g}%).")


def _launch_bound(row: pd.Series) -> str:
    return f"{_busy(row)}, with {_counts(row)}."


def _cpu_bound(row: pd.Series) -> str:
    if not row["kernels"] > 0:
        return f"{_busy(row, only=True)}, with {_counts(row)}: the CPU side sets the pace."
    return (f"{_busy(row, only=True)} although most of its kernels are long "
            f"({_counts(row)}): the CPU side sets the pace.")


def _gpu_bound(row: pd.Series) -> str:
    return (f"{_busy(row, under=False)}; data waits ({row['data_wait_pct']:.1f}%) and copies "
            f"({row['copy_pct']:.1f}%) are under their thresholds.")


#: The evidence sentence, per verdict.
_VERDICT_EVIDENCE: dict[str, Callable[[pd.Series], str]] = {
    "data-bound": _data_bound, "copy-bound": _copy_bound, "launch-bound": _launch_bound,
    "CPU-bound": _cpu_bound, "GPU-bound": _gpu_bound,
}


def verdict_evidence(row: pd.Series) -> str:
    """The evidence for a shape's ``verdict``, with what module ranges (``distorted``) and
    the profiler added to the step."""
    caveats = []
    if row["distorted"]:
        caveats.append(f"module ranges lengthened the step by {row['distortion_pct']:.1f}%, "
                       "so the idle share (and a launch-bound verdict) may be overstated")
    if bare_uncertain(row):
        caveats.append(f"the steps timed without the profiler varied by "
                       f"{row['bare_spread_pct']:.0f}% of their median, so the busy share "
                       "is uncertain: time more steps after the chosen ones")
    if profiler_lengthened(row):
        caveats.append(f"the profiler made the step {row['profiler_pct']:.0f}% longer than "
                       f"without it (the GPU is busy {row['bare_busy_pct']:.0f}% of the "
                       "unprofiled step)")
    return "; ".join([_VERDICT_EVIDENCE[row["verdict"]](row)[:-1], *caveats]) + "."


def _data_wait(found: Mapping[str, Any], shape: pd.Series) -> str:
    return (f"The GPU idled {shape['data_wait_pct']:.1f}% of the "
            f"{_time(shape['wall_ns'])} step "
            f"({_time(shape['data_ns'])}) while the CPU loaded data "
            f"(mostly in {found['cpu']}).")


def _copy_finding(found: Mapping[str, Any], shape: pd.Series) -> str:
    return f"{_copy_share(shape)} ({_time(shape['copy_ns'])} per step)."


def _pageable_copies(found: Mapping[str, Any], shape: pd.Series) -> str:
    return (f"{_copies(found['copies'])} per step ({format_bytes(found['bytes'])}, "
            f"{_time(found['time_ns'])}) use pageable host memory, which the "
            "launching thread waits for.")


def _launch_finding(found: Mapping[str, Any], shape: pd.Series) -> str:
    return f"{_idle(found, shape)} with {_counts(shape, final_and=True)}."


def _gpu_idle(found: Mapping[str, Any], shape: pd.Series) -> str:
    module, before = found["next_module"], _time(found["before_ns"])
    if not module:
        where = ""
    elif module == found["module"]:
        where = f", {before} per step of it just before {module}"
    else:
        where = f"; spread over the step, its largest share ({before} per step) is just before {module}"
    return f"{_idle(found, shape)}{where}."


def _small_kernels(found: Mapping[str, Any], shape: pd.Series) -> str:
    return (f"{found['module']} issues {found['launches']:g} launches per step with a median "
            f"kernel of {_time(found['median_kernel_ns'])}; the GPU idles "
            f"{_time(found['idle_ns'])} per step just before its work.")


#: The evidence sentence, per finding: from the finding's numbers and its shape's medians.
_FINDING_EVIDENCE: dict[str, Callable[[Mapping[str, Any], pd.Series], str]] = {
    "data_wait": _data_wait, "copy_bound": _copy_finding, "pageable_copies": _pageable_copies,
    "launch_bound": _launch_finding, "gpu_idle": _gpu_idle, "small_kernels": _small_kernels,
}


def finding_evidence(found: Mapping[str, Any], shape: pd.Series) -> str:
    """The evidence sentence of a finding of
    :func:`~torch_nsight.analyze.verdicts.label_findings`, of the shape ``shape``."""
    return _FINDING_EVIDENCE[found["finding"]](found, shape)


#: The columns of :func:`word_summary`: the summary's, its verdict's evidence and advice
#: (in place of ``advice_code``) beside the verdict, ``largest_gaps`` in words.
WORDED_SUMMARY_COLUMNS = tuple(
    c for column in SUMMARY_COLUMNS if column not in ("facts", "advice_code")
    for c in ((column, "evidence", "advice") if column == "verdict" else (column,)))
#: The columns of :func:`word_step_findings`: the findings' with their evidence and fix in
#: place of the numbers they are written from.
WORDED_STEP_FINDING_COLUMNS = tuple(
    c for column in STEP_FINDING_COLUMNS
    for c in (("evidence", "fix") if column == "facts" else (column,)))


def word_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`~torch_nsight.analyze.timeline_summary` with its words: each verdict's
    evidence and what to try (``advice``), the largest gaps as one line.

    Returns:
        :data:`WORDED_SUMMARY_COLUMNS`, the rows of ``summary``.
    """
    out = summary.copy()
    out["evidence"] = pd.Series([verdict_evidence(pd.Series(f)) for f in out["facts"]],
                                index=out.index, dtype=object)
    out["advice"] = pd.Series([VERDICT_ADVICE[code] for code in out["advice_code"]],
                              index=out.index, dtype=object)
    out["largest_gaps"] = pd.Series([largest_gaps_text(g) for g in out["largest_gaps"]],
                                    index=out.index, dtype=object)
    return out.loc[:, list(WORDED_SUMMARY_COLUMNS)]


def step_finding_words(facts: Mapping[str, Any], finding: str) -> tuple[str, str]:
    """The evidence and the fix of a timeline finding, from its ``facts`` (its numbers and
    its shape's medians)."""
    found = {**facts["found"], "finding": finding}
    return finding_evidence(found, pd.Series(facts["shape"])), FINDING_FIXES[finding]


def word_step_findings(found: pd.DataFrame) -> pd.DataFrame:
    """:func:`~torch_nsight.analyze.timeline_findings` with each finding's evidence and fix.

    Returns:
        :data:`WORDED_STEP_FINDING_COLUMNS`, the rows of ``found``.
    """
    out = found.copy()
    words = [step_finding_words(row["facts"], row["finding"]) for _, row in out.iterrows()]
    out["evidence"] = pd.Series([w[0] for w in words], index=out.index, dtype=object)
    out["fix"] = pd.Series([w[1] for w in words], index=out.index, dtype=object)
    return out.loc[:, list(WORDED_STEP_FINDING_COLUMNS)]
