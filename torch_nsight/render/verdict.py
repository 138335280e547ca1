"""The timeline's verdict per shape as text: what bounds the step, the evidence, what to try,
and the findings with the module where each happens."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from torch_nsight.render.fit import terminal_width, wrap_text
from torch_nsight.render.readable_numbers import printable
from torch_nsight.units import NAME_CHARS, format_duration, shortened

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.profile import Profile

#: A word no line shows whole (a module or kernel name from a hostile trace).
_LONG_WORD = re.compile(rf"\S{{{NAME_CHARS + 1},}}")
#: Findings shown per shape under its verdict.
FINDINGS_SHOWN = 3
#: Shapes (variant, shape) given a verdict; a trace of more says how many it leaves out.
SHAPES_SHOWN = 20


def _step_noise(row: pd.Series) -> str:
    """How much the profiled steps' times vary (torch_nsight.analyze.spread)."""
    from torch_nsight.analyze.spread import STABLE_CI_PCT

    text = (f"  Profiled steps (timed under the profiler): "
            f"{format_duration(row['wall_mean_ns'], unit='ms', decimals=3)} "
            f"±{format_duration(row['wall_ci95_ns'], unit='ms', decimals=3)} (mean of "
            f"{int(row['steps'])} steps, 95% interval)")
    if row["stable"] is False:
        text += (f": not stable (over {STABLE_CI_PCT:g}% of the mean; a step that compiles, "
                 "allocates or syncs runs slower): record more steps before comparing")
    return text


def render_verdicts(profile: Profile, fmt: str = "plain") -> str:
    """Return the verdict section of a profile that has a timeline ('' when it has none).

    Args:
        profile: the profile.
        fmt: ``markdown`` (and ``github``) for a pull request, anything else for a terminal.

    Returns:
        One block per (variant, shape): the verdict and its evidence, what to try, the
        largest idle gaps and the top findings with the time each could recover per step.
    """
    if profile.timeline is None or profile.timeline.empty:
        return ""

    markdown = fmt in ("markdown", "github")
    timeline = profile.timeline
    lines = profile.computed_once(("verdict_lines", markdown),
                                  lambda: _verdict_lines(profile, timeline, markdown))
    if markdown:
        return "\n".join(lines)
    width = terminal_width()  # a terminal or a log: wrapped at spaces, nothing cut
    return "\n".join(wrap_text(line, width) for line in lines)


def _verdict_lines(profile: Profile, timeline: pd.DataFrame, markdown: bool) -> list[str]:
    """The verdict section's lines, unwrapped."""
    from torch_nsight.analyze import timeline_findings, timeline_summary
    from torch_nsight.analyze.steps import step_table
    from torch_nsight.render.timeline_words import word_step_findings, word_summary

    traced = set(timeline["source"].dropna())
    if profile.kernels.empty:
        return ["Timeline verdict: none: the trace holds no GPU activity (recorded without a "
                "CUDA device?); its CPU ops and step times are in the trace, for Perfetto"]
    if "deep_profiled" in profile.kernels and not traced & set(profile.kernels["source"]):
        folders = sorted({str(Path(s).parent) for s in traced})
        return ["Timeline verdict: the timeline of this focused sweep is in "
                f"{', '.join(folders)}: `torch-nsight report` it for the verdict per shape"]
    kernels, timeline, left_out = _first_shapes(profile.kernels, timeline)
    tables = step_table(kernels, timeline, "timeline_summary")  # the two share it
    summary = word_summary(timeline_summary(kernels, timeline, tables))
    findings = word_step_findings(timeline_findings(kernels, timeline, tables))
    lines = ["## Timeline verdict" if markdown else "Timeline verdict (PyTorch profiler):"]
    if left_out:
        lines.append(f"(the first {SHAPES_SHOWN} of {SHAPES_SHOWN + left_out} shapes; every "
                     "shape's verdict in Python: torch_nsight.analyze.timeline_summary("
                     "profile.kernels, profile.timeline))")
    for _, row in summary.iterrows():
        label = " ".join(shortened(v) for v in (row["variant"], row["shape"])
                         if isinstance(v, str) and v) or "all steps"
        head = f"**{label}: {row['verdict']}**" if markdown else f"{label}: {row['verdict']}"
        lines += ["", head, f"  {row['evidence']}", f"  Try: {row['advice']}"]
        if row["steps"] > 1 and row["wall_ci95_ns"] == row["wall_ci95_ns"]:
            lines.append(_step_noise(row))
        if row["largest_gaps"]:
            lines.append(f"  Largest idle gaps: {row['largest_gaps']}")
        mine = findings[(findings["variant"].fillna("") == (row["variant"] or ""))
                        & (findings["shape"].fillna("") == (row["shape"] or ""))]
        for _, finding in mine.head(FINDINGS_SHOWN).iterrows():
            where = (f" in {shortened(finding['module'])}" if isinstance(finding["module"], str)
                     else "")
            share = finding.get("pct_of_step")
            share_text = f", {share:.0f}% of it" if share == share and share else ""
            lines.append(f"  - {finding['finding']}{where} (up to "
                         f"{format_duration(finding['est_gain_ns'])} per step{share_text}): "
                         f"{finding['fix']}")
    # names from the trace, one line each; a name longer than a line cut in its middle
    return [_LONG_WORD.sub(lambda m: shortened(m.group()), printable(line)) for line in lines]


def _first_shapes(kernels: pd.DataFrame, timeline: pd.DataFrame
                  ) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The kernels and the timeline of the first :data:`SHAPES_SHOWN` (variant, shape)
    labels of the timeline's steps, and how many labels are left out (a trace of thousands
    of shapes would print and judge each)."""
    def labels(frame: pd.DataFrame) -> pd.Series:
        return (frame["variant"].astype(object).fillna("").astype(str) + "\x1f"
                + frame["shape"].astype(object).fillna("").astype(str))

    steps = timeline[timeline["kind"] == "step"]
    order = list(dict.fromkeys(labels(steps)))
    if len(order) <= SHAPES_SHOWN:
        return kernels, timeline, 0
    kept = set(order[:SHAPES_SHOWN])
    return (kernels[labels(kernels).isin(kept)], timeline[labels(timeline).isin(kept)],
            len(order) - SHAPES_SHOWN)
