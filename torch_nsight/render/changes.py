"""The findings gathered by change (:func:`torch_nsight.analyze.findings.by_change.by_change`),
printed under the findings table where a change gathers several of its rows: one switch of
the whole model that 29 convolutions' rows each name is one change, with their gain together.
Importing this module does not import pandas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch_nsight.render.fit import fit_table, terminal_width
from torch_nsight.render.readable_numbers import format_us, is_missing, printable_rows

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CHANGES_TITLE", "change_words", "render_changes"]

CHANGES_TITLE = "By change (the findings of one change together; gain per run)"
#: How many changes the section lists.
CHANGES_SHOWN = 5
#: A change whose fix is a switch of the whole model, in words (``change``: the switch).
_SWITCH_SAID = {"tf32": "TF32 tensor cores (or bf16)", "cudnn_benchmark": "cudnn.benchmark",
                "compile": "torch.compile the model"}

#: Another fix in words (its module after a colon, where it has one).
_FIX_SAID = {"pad_channels": "pad the channels", "pad_features": "pad the features",
             "pad_operands": "pad the operands", "cast_to_half": "cast to 16 bits",
             "larger_batch": "a larger batch", "sdpa_backend": "another attention backend",
             "fixed_shapes": "fixed-size ops", "use_rms_norm": "one fused RMSNorm",
             "use_layer_norm": "one fused LayerNorm", "use_gelu_tanh": "the tanh GELU as one op",
             "use_sdpa": "scaled_dot_product_attention", "compile_loss": "compile the loss",
             "compile_rotary": "compile the rotary embedding",
             "compile_function": "compile the code outside modules",
             "cuda_graphs": "CUDA graphs", "cast_then_compile": "cast, then compile",
             "optimizer_foreach": "the optimizer's foreach=True",
             "compile_optimizer_step": "torch.compile(optimizer.step)",
             "pad_gemm_dims": "pad the GEMM's dimensions", "tf32_matmul": "TF32 for matmuls",
             "tf32_conv": "TF32 for convolutions", "cudnn_benchmark": "cudnn.benchmark",
             "channels_last": "channels-last", "optimizer_fused": "the optimizer's fused=True",
             "compile_module": "torch.compile", "compile_model": "torch.compile the model"}


def change_words(row: Mapping[str, Any]) -> str:
    """A change in a few words: the whole model's switch, else its fix code and module."""
    params = row.get("fix_params")
    params = params if isinstance(params, Mapping) else {}
    change, target = str(row["change"]), row.get("target") or ""
    if row.get("fix_code") == "channels_last":
        return ("channels-last 3-D (torch.channels_last_3d)" if params.get("ndim") == 5
                else "channels-last (torch.channels_last)")
    if row.get("fix_code") == "optimizer_fused" and params.get("optimizer"):
        return f"{params['optimizer']}(..., fused=True)"
    if change in _SWITCH_SAID:
        return _SWITCH_SAID[change]
    if row.get("fix_code") in ("compile_module", "compile_model") and target:
        return f"torch.compile {target}"
    said = _FIX_SAID.get(str(row.get("fix_code")), str(row.get("fix_code")))
    return f"{said}: {target}" if target else said


def _said(value: object) -> str:
    """A label or a module's name; ``-`` where missing (None, NaN)."""
    return str(value) if isinstance(value, str) else "-" if is_missing(value) else str(value)


def _gain(row: Mapping[str, Any]) -> str:
    gain, bound = row["est_gain_ns"], row["gain_bound_ns"]
    if is_missing(gain):
        return "-" if is_missing(bound) else f"≤ {format_us(bound)}"
    more = "" if is_missing(bound) else f" (+ ≤ {format_us(bound)})"
    return f"{format_us(gain)}{more}"


def render_changes(changes: pd.DataFrame, fmt: str = "plain", top: int = CHANGES_SHOWN) -> str:
    """The section, or ``""`` where no change among the first ``top`` gathers more than one
    finding (the findings table then says it all).

    Args:
        changes: :func:`~torch_nsight.analyze.findings.by_change.by_change` rows.
        fmt: ``markdown``/``github`` for a pipe table, else text.
        top: how many changes to list.
    """
    from tabulate import tabulate

    shown = changes.head(top)
    if shown.empty or not (shown["findings"] > 1).any():
        return ""
    labels = [c for c in ("variant", "shape") if shown[c].nunique(dropna=False) > 1]
    # (a change at one module names it: its first module is only said for the whole model's)
    cells = [[str(i + 1), *(_said(row[c]) for c in labels),
              change_words(row), _gain(row), str(row["findings"]),
              "" if row["target"] else _said(row["first_module"]),
              "yes" if row["switch"] else "no"]
             for i, (_, row) in enumerate(shown.iterrows())]
    headers = ["#", *labels, "change", "gain µs", "findings", "first module", "--verify"]
    aligns = ["right", *("left",) * (len(labels) + 1), "right", "right", "left", "left"]
    if fmt in ("markdown", "github"):
        table = tabulate(printable_rows(cells), headers=headers, tablefmt="pipe",
                         disable_numparse=True, colalign=aligns)
        return f"## {CHANGES_TITLE}\n\n{table}"
    table = fit_table(headers, printable_rows(cells), aligns, terminal_width(), beneath="",
                      cut=("change", "first module"), keep_end=("change", "first module"))
    return f"{CHANGES_TITLE}:\n\n{table}"
