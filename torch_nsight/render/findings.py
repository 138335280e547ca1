"""The findings as a table: what to change, where, and the time it recovers.

Rows come from :meth:`torch_nsight.Profile.findings` (ranked by ``est_gain_ns``); text wraps
the fix to fit the terminal (never cut), markdown keeps it whole with the evidence.
Importing this module does not import pandas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from torch_nsight.render.columns import module_cell
from torch_nsight.render.fit import fit_table, terminal_width
from torch_nsight.render.readable_numbers import MISSING, format_us, is_missing, printable_rows
from torch_nsight.vocabulary import LABELS

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

    from torch_nsight.render.columns import Column

def _text(value: object) -> str:
    return MISSING if is_missing(value) and not isinstance(value, str) else str(value)


def _label_cell(label: str) -> Callable[[pd.Series], str]:
    """The cell of the ``label`` column (variant, shape)."""
    return lambda r: _text(r[label])


def _labels(kernels: pd.DataFrame) -> list[str]:
    """The labels (variant, shape) shown beside a finding: those the profile holds several of."""
    return [c for c in ("variant", "shape")
            if c in kernels and kernels[c].nunique(dropna=False) > 1]


#: Under a findings table with a bounded row whose fix also cuts launches.
LAUNCH_NOTE = ("≤: what those kernels could save at most; {fixes} also removes launches, "
               "whose CPU time a kernel profile does not see, so the step can gain more: "
               "torch-nsight profile --verify measures it on your steps{when}.")
#: The note's end where every such fix is ``cast_then_compile``: ``--verify`` has no switch for
#: it, and measures the compile once the grouped GEMMs are cast (a new profile).
CAST_FIRST_WHEN = ", once the cast those fixes ask for first is made"
#: The line under a table with a channels-last gain not timed (a model of the NCHW kernels).
LAYOUT_NOTE = ("channels-last: its gain is a model (what the NCHW kernels cost, the conversions "
               "it removes), and its sign "
               "is not known until it is timed (grouped, dilated or small-channel convolutions "
               "and batch norms can be slower channels-last): torch-nsight findings REPORT "
               "--benchmark times the step's convolutions and batch norms in both layouts on "
               "the GPU, torch-nsight profile --verify on your steps.")


def gain_cell(row: pd.Series) -> str:
    """A finding's gain: the one a model of its fix counts, else ``≤`` the bound on its
    kernels' time (``gain_bound_ns``: a small grid's time above its roofline), else ``-``."""
    gain, bound = row["est_gain_ns"], row.get("gain_bound_ns")
    if is_missing(gain) and not is_missing(bound):
        return f"≤ {format_us(bound)}"
    return format_us(gain)


def finding_module_cell(row: pd.Series) -> str:
    """A finding's module; for one that gathers launches of many modules at the root, how
    many modules of which kind (``LlamaBlock (4 Linear)``): such rows stay apart."""
    from torch_nsight.render.finding_evidence import KIND_SAID

    facts = row.get("facts")
    if not isinstance(facts, Mapping) or "sites" not in facts:
        return module_cell(row)
    kind = KIND_SAID.get(str(row.get("module_kind")), "modules")
    return f"{module_cell(row)} ({facts['sites']} {kind})"


def finding_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    """Columns of the ``findings`` table.

    A :data:`~torch_nsight.render.columns.ColumnsBuilder` over :meth:`Profile.findings` output rows.
    """
    columns: list[Column] = [("#", lambda r: str(int(r.name) + 1), "right")]
    columns += [(label, _label_cell(label), "left") for label in _labels(kernels)]
    measured = "measured_gain_ns" in frame
    gains: list[Column] = [("predicted µs" if measured else "gain µs",
                            gain_cell, "right")]
    if measured:  # profile --verify: the gain measured on the user's steps beside it
        gains.append(("measured µs", measured_cell, "right"))
    return [
        *columns,
        ("module", finding_module_cell, "left"),  # fitted: its distinguishing end kept
        ("dir", lambda r: _text(r["direction"]), "left"),
        ("finding", lambda r: _text(r["finding"]), "left"),
        *gains,
        ("basis", lambda r: _text(r["gain_basis"]), "left"),
        ("confidence", lambda r: _text(r["confidence"]), "left"),
        ("fix", lambda r: _text(r["fix"]), "left"),  # wrapped to fit, never cut
    ]


def measured_cell(row: pd.Series) -> str:
    """The gain ``profile --verify`` measured (``412.50 ±3.10``), or why it counts none
    (``fix_failed``, ``loss_changed``...); empty where it tried nothing."""
    status = row.get("verify_status")
    if status == "measured":
        return f"{format_us(row['measured_gain_ns'])} ±{format_us(row['measured_spread_ns'])}"
    return "" if is_missing(status) or status == "no_switch" else str(status)


def benchmark_lines(shown: pd.DataFrame, every: pd.DataFrame) -> list[str]:
    """``findings --benchmark``'s lines under the table: each shown row it timed (before ->
    after, per run), then the channels-last switch as a whole for each variant and shape,
    over ``every`` row it timed (its rows add up to every convolution and batch norm of the
    step, the part slower in channels-last included), with the calls it could not time."""
    if "benchmarked" not in every:
        return []

    def pair(before: float, after: float) -> str:
        return f"{format_us(before)} µs -> {format_us(after)} µs"

    lines = [f"measured: {row['finding']} in {finding_module_cell(row)}: "
             f"{pair(row['before_ns'], row['after_ns'])}"
             for _, row in shown[shown["benchmarked"].eq(True)
                                 & shown["before_ns"].notna()].iterrows()]
    switch = every[every["benchmarked"].eq(True) & every["fix_code"].eq("channels_last")]
    for labels, rows in switch.groupby(list(LABELS), dropna=False, sort=False):
        before, after = float(rows["before_ns"].sum()), float(rows["after_ns"].sum())
        verdict = "faster" if after < before else "slower" if after > before else "the same"
        tags = [_text(label) for label in labels if not is_missing(label)]
        where = f" ({', '.join(tags)})" if tags else ""
        untimed = int(rows["untimed_calls"].fillna(0).sum()) if "untimed_calls" in rows else 0
        lines.append(f"measured: channels-last as a whole{where}, {len(rows)} rows, the "
                     "step's convolutions and batch norms on fresh "
                     f"tensors: {pair(before, after)}, {format_us(abs(before - after))} µs "
                     f"{verdict} a run"
                     + (f" ({untimed} calls could not be timed and are left out)"
                        if untimed else "")
                     + "; profile --verify measures it on your steps")
    return lines


def _where(row: pd.Series, labels: list[str]) -> str:
    """The module, with the variant and shape where the profile holds several."""
    tags = [_text(row[label]) for label in labels]
    return finding_module_cell(row) + (f" ({', '.join(tags)})" if tags else "")


def render_findings(frame: pd.DataFrame, fmt: str = "plain",
                    kernels: pd.DataFrame | None = None) -> str:
    """The findings section printed under the main table.

    Args:
        frame: :meth:`Profile.findings` rows (already cut to the rows to show).
        fmt: ``markdown``/``github`` for a pull request (full fix and evidence), else text.
        kernels: the profile's kernel table: variant and shape are shown where it holds
            several (default: where the findings do).

    Returns:
        The section; a line saying so when there is no finding.
    """
    table = _findings_table(frame, fmt, kernels)
    notes = [note for note in (launch_note(frame), layout_note(frame)) if note]
    if not notes or frame.empty:
        return table
    if fmt not in ("markdown", "github"):
        import textwrap

        width = max(60, terminal_width())
        notes = [textwrap.fill(note, width=width, subsequent_indent="  ") for note in notes]
    return "\n\n".join([table, *notes])


def layout_note(frame: pd.DataFrame) -> str:
    """The line under a table whose channels-last gain was not timed (neither
    ``findings --benchmark`` nor ``--verify``): a model whose sign can be wrong."""
    if frame.empty or "fix_code" not in frame or "measured_gain_ns" in frame:
        return ""
    basis = frame.get("gain_basis")
    modelled = frame["fix_code"].eq("channels_last")
    if basis is not None:
        modelled &= ~basis.eq("measured")
    return LAYOUT_NOTE if modelled.any() else ""


def launch_note(frame: pd.DataFrame) -> str:
    """The line under a table with a bounded gain whose fix also removes launches (a
    compile, CUDA graphs): the bound holds for the kernels, not for the step."""
    from torch_nsight.analyze.findings.codes import CUTS_LAUNCHES

    needed = ("est_gain_ns", "gain_bound_ns", "fix_code")
    if frame.empty or any(c not in frame for c in needed) or "measured_gain_ns" in frame:
        return ""  # (after --verify, the measured column says it)
    bounded = frame["est_gain_ns"].isna() & frame["gain_bound_ns"].notna()
    cutting = frame["fix_code"].isin(CUTS_LAUNCHES)
    if not (bounded & cutting).any():
        return ""
    codes = set(frame.loc[bounded & cutting, "fix_code"])
    fixes = "CUDA graphs" if codes == {"cuda_graphs"} else "compiling"
    return LAUNCH_NOTE.format(fixes=fixes,
                              when=CAST_FIRST_WHEN if codes == {"cast_then_compile"} else "")


def _findings_table(frame: pd.DataFrame, fmt: str, kernels: pd.DataFrame | None) -> str:
    from tabulate import tabulate

    if "facts" in frame:  # worded from the codes here too: a table folded after its words
        from torch_nsight.render.finding_words import word_findings

        frame = word_findings(frame)
    markdown = fmt in ("markdown", "github")
    title = "## Findings" if markdown else "Findings (ranked by the time they recover):"
    if frame.empty:
        return f"{title}\n\nNo finding: nothing this profile shows has a known fix."
    kernels = frame if kernels is None else kernels
    labels = _labels(kernels)
    if markdown:
        measured = "measured_gain_ns" in frame
        cells = [[i + 1, _where(r, labels), _text(r["direction"]), f"`{r['finding']}`",
                  gain_cell(r), *([measured_cell(r)] if measured else []),
                  f"{r['gain_basis']}, {r['confidence']}", _text(r["evidence"]),
                  _text(r["fix"])]
                 for i, (_, r) in enumerate(frame.iterrows())]
        gains = ["predicted µs", "measured µs"] if measured else ["gain µs"]
        table = tabulate(printable_rows(cells), headers=["#", "module", "dir", "finding", *gains,
                                                         "basis", "evidence", "fix"],
                         tablefmt="pipe", disable_numparse=True)
        return f"{title}\n\n{table}"
    columns = finding_columns(frame.reset_index(drop=True), kernels)
    shown = frame.reset_index(drop=True)
    rows = printable_rows([[cell(row) for _, cell, _ in columns] for _, row in shown.iterrows()])
    table = fit_table(
        [h for h, _, _ in columns], rows, [a for _, _, a in columns], terminal_width(),
        beneath="fix", drop=("confidence", "basis"), wrap=("fix",), cut=("module",),
        keep_end=("module",), labels=("shape", "variant"), prefer={"fix": 60},
        tablefmt=fmt if fmt in ("plain", "simple", "grid", "rst") else "plain")
    return f"{title}\n\n{table}"
