"""The HTML a :class:`~torch_nsight.Profile` shows in a notebook (``_repr_html_``): what it
holds, its notes, and the answers (top folded hotspots, findings) in readable units.
Everything is escaped. Importing this module registers :func:`profile_html` with the Profile
record (:func:`torch_nsight.profile.set_html_renderer`), and with it the findings' words
(:mod:`torch_nsight.render.finding_words`); the package imports it along with ``load``,
``sweep``, ``timeline`` and ``Profile``."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import torch_nsight.render.finding_words  # noqa: F401 - registers the findings' words
from torch_nsight.errors import MissingMetricError
from torch_nsight.profile import set_html_renderer
from torch_nsight.render.findings import gain_cell

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.profile import Profile

__all__ = ["profile_html"]


def profile_html(profile: Profile) -> str:
    """The HTML a notebook shows for ``profile``: what it holds, its notes, the top
    folded hotspots and findings in readable units."""
    try:
        coverage = f"{100 * profile.coverage:.1f}%"
    except MissingMetricError:
        coverage = "n/a"
    rows = [("GPU", ", ".join(profile.gpus) or "unknown"), ("kernels", len(profile.kernels)),
            ("shapes", ", ".join(map(str, profile.shapes)) or "unlabelled"),
            ("coverage", coverage if coverage != "nan%" else "n/a"),
            ("sources", len(profile.meta.sources)), ("failures", len(profile.failures))]
    if profile.variants:
        rows.insert(3, ("variants", ", ".join(profile.variants)))
    body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                   f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>"
                   for k, v in rows)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in profile.notes)
    return (f"<div><b>torch_nsight Profile</b><table>{body}</table>"
            + (f"<ul>{notes}</ul>" if notes else "") + _answers(profile) + "</div>")


def _answers(profile: Profile) -> str:
    """The top folded hotspots and findings as HTML tables, in readable units."""
    if not len(profile.kernels):
        return ""
    parts = []
    try:
        top = profile.hotspot_table(n=5, order="time")
        parts.append(("Top kernel sites (repeated blocks folded)", _rows(top, {
            "module": lambda r: str(r["module"]) + (f" ×{int(r['blocks'])}"
                                                    if r.get("blocks", 1) > 1 else ""),
            "dir": lambda r: r["direction"] or "", "kernel": lambda r: r["kernel"],
            "time µs": lambda r: f"{r['duration_ns'] / 1e3:,.2f}" + (
                f" ±{r['ci95_ns'] / 1e3:,.2f}" if r.get("runs", 1) > 1
                and r["ci95_ns"] == r["ci95_ns"] else ""),
            "share %": lambda r: f"{r['pct_of_total']:.1f}",
            "bound": lambda r: r["bound"] or "", "next step": lambda r: r["next_step"]})))
        found = profile.finding_table().head(5)
        if len(found):
            parts.append(("Findings: what to change", _rows(found, {
                "module": lambda r: str(r["module"]) + (f" ×{int(r['blocks'])}"
                                                        if r.get("blocks", 1) > 1 else ""),
                "finding": lambda r: r["finding"],
                "gain µs": gain_cell,
                "fix": lambda r: r["fix"]})))
    except MissingMetricError:
        return ""
    return "".join(f"<p><b>{html.escape(title)}</b></p>{table}" for title, table in parts)


def _rows(frame: pd.DataFrame, cells: dict[str, Any]) -> str:
    """An HTML table of ``frame``'s rows, one column per ``cells`` entry (header -> a function
    of the row giving its text), escaped."""
    head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in cells)
    body = "".join("<tr>" + "".join(
        f"<td style='text-align:left'>{html.escape(str(cell(row)))}</td>"
        for cell in cells.values()) + "</tr>" for _, row in frame.iterrows())
    return f"<table><tr>{head}</tr>{body}</table>"


set_html_renderer(profile_html)
