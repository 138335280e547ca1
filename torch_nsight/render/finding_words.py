"""The words of each finding, written once, here, from its codes: its evidence sentence
(:mod:`torch_nsight.render.finding_evidence`, by finding code) and its fix (by fix code), put
together by :func:`word_findings`, which :meth:`torch_nsight.Profile.findings` applies.

Analysis returns findings as codes and numbers (:class:`torch_nsight.analyze.findings.Finding`:
what is wrong, the kind of module, why, the fix as a code with its parameters, ``facts``);
nothing there reads these sentences back, so rewording one changes only what is printed.
Importing this module registers :func:`word_findings` with the Profile record
(:func:`torch_nsight.profile.set_words`), and imports the hotspots' words
(:mod:`torch_nsight.render.hotspot_words`), which register theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

import torch_nsight.render.hotspot_words  # noqa: F401 - registers the hotspots' words
from torch_nsight.analyze.findings.run_checks import TIMELINE_FACTS
from torch_nsight.profile import set_words
from torch_nsight.render.code_words import OP_SAID, ROLE_SAID, SDPA_FOR_GEMM
from torch_nsight.render.finding_evidence import EVIDENCE, KIND_SAID, given
from torch_nsight.render.timeline_words import step_finding_words
from torch_nsight.vocabulary import FINDING_CODE_COLUMNS, FINDING_COLUMNS, OUTSIDE_PREFIX

#: Fixes that need no parameter.
FIX = {
    "tf32_matmul": "Turn on TF32 tensor cores with torch.backends.cuda.matmul.allow_tf32 = True "
                   "/ torch.set_float32_matmul_precision('high'), or run the model in bf16 "
                   "(torch.autocast('cuda', dtype=torch.bfloat16)).",
    "tf32_conv": "Turn on TF32 tensor cores with torch.backends.cudnn.allow_tf32 = True, or run "
                 "the model in bf16 (torch.autocast('cuda', dtype=torch.bfloat16)).",
    "use_rms_norm": "Use one fused RMSNorm: torch.nn.functional.rms_norm(x, (d,), weight, "
                    "eps) or nn.RMSNorm (torch >= 2.4) instead of pow/mean/rsqrt/mul, or "
                    "torch.compile the module.",
    "use_layer_norm": "Use torch.nn.functional.layer_norm / nn.LayerNorm (one fused kernel) "
                      "instead of the mean/var arithmetic, or torch.compile the module.",
    "compile_rotary": "Apply the rotary embedding in one kernel: torch.compile the function "
                      "that applies it (and compute cos/sin once per sequence length, not per "
                      "layer), or a fused RoPE kernel (e.g. flash-attn's apply_rotary_emb).",
    "use_gelu_tanh": "Use F.gelu(approximate='tanh') (nn.GELU(approximate='tanh')): one kernel "
                     "instead of the tanh formula's chain; or torch.compile the module.",
    "compile_loss": "Fuse the loss: torch.compile the function that computes it from the "
                    "logits (the upcast, log-softmax and NLL become a few kernels), or compute "
                    "it over chunks of the logits.",
    "use_sdpa": "Use F.scaled_dot_product_attention (masking, scaling and softmax fused "
                "into attention), or at least F.softmax over the masked scores; or "
                "torch.compile the module.",
    "channels_last": "Go channels-last: model.to(memory_format=torch.channels_last) and "
                     "channels-last inputs (x.to(memory_format=torch.channels_last)).",
    "cudnn_benchmark": "Let cuDNN time its algorithms for these shapes: "
                       "torch.backends.cudnn.benchmark = True (inputs of fixed shapes).",
    "cuda_graphs": "Cut the launches: capture the module in CUDA graphs "
                   "(torch.compile(module, mode='reduce-overhead')), or fuse it with its "
                   "neighbours (torch.compile).",
    "larger_batch": "Give the GEMM more rows: a larger batch, or more tokens per call (its "
                    "grid is its output tiles, too few to fill the GPU).",
    "sdpa_backend": "Try another attention backend: run it under "
                    "torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) (or "
                    "EFFICIENT_ATTENTION, CUDNN_ATTENTION) and keep the fastest.",
    "compile_function": "Fuse them: torch.compile the function that runs these ops (they ran "
                        "outside every module range, so no module names them).",
}


# --- fixes, by fix code ------------------------------------------------------------------

def _pad_features(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    said = []
    for pad in params.get("pads", ()):
        value, padded = pad["value"], pad["padded"]
        if pad["role"] == "out_features":
            linear = (f"nn.Linear({params['in_features']}, {padded})"
                      if "in_features" in params else "a wider nn.Linear")
            said.append(f"pad the output features from {value} to {padded}: {linear} and "
                        "slice the output, or pad the vocabulary")
        else:
            linear = (f"nn.Linear({padded}, {params['out_features']})"
                      if "out_features" in params else "a wider nn.Linear")
            said.append(f"pad the input features from {value} to {padded}: zero-pad the "
                        f"input and use {linear}")
    text = "; ".join(dict.fromkeys(said))
    return text[:1].upper() + text[1:] + "."


def _pad_operands(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    said = "; ".join(dict.fromkeys(
        f"{pad['value']} ({ROLE_SAID.get(pad['role'], pad['role'])}) to {pad['padded']}"
        for pad in params.get("pads", ())))
    return f"Pad {said}: zero-pad the matmul's operands and slice the result."


def _pad_gemm_dims(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    linear = (" (a Linear's output features: a wider nn.Linear and slice the output)"
              if row.get("module_kind") == "linear" else "")
    name = ("the calls table has no call at this site to name it (its kernels ran outside "
            "every recorded op)" if params.get("calls_recorded") else
            "record the calls table (sweep, or instrument(record_calls=...)) to name it")
    return (f"Pad the GEMM's dimensions (features, vocabulary, sequence) to multiples of "
            f"{params.get('multiple', 64)}{linear}; {name}.")


def _pad_channels(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    said = "; ".join(dict.fromkeys(
        f"the {ROLE_SAID.get(pad['role'], pad['role'])} from {pad['value']} to {pad['padded']}"
        for pad in params.get("pads", ())))
    layout = "torch.channels_last_3d" if params.get("ndim") == 5 else "torch.channels_last"
    return (f"Pad the convolution's channels to a multiple of 8: {said} (zero channels in "
            "the weight and the input), and run it channels-last "
            f"(model.to(memory_format={layout})).")


def _channels_last(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    if params.get("ndim") == 5:  # first: torch.channels_last refuses a 5-D tensor
        return ("Go channels-last in 3-D: model.to(memory_format=torch.channels_last_3d) and "
                "inputs x.to(memory_format=torch.channels_last_3d) (N x C x D x H x W).")
    if row.get("finding") == "gemm_misaligned":
        return ("Go channels-last: model.to(memory_format=torch.channels_last) and "
                "channels-last inputs; in NHWC the convolution's GEMM runs over the batch x "
                "positions and the channels, which are aligned.")
    return FIX["channels_last"]


def _compile_module(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    facts = row.get("facts")
    if isinstance(facts, Mapping) and "sites" in facts:
        kind = KIND_SAID.get(str(given(row, "module_kind")))
        return (f"Fuse each {kind + ' ' if kind else ''}module with its neighbours: "
                "torch.compile the model (their launches, not their work, are the limit).")
    if row.get("finding") == "elementwise_chain":
        return "Fuse them: torch.compile the module (one kernel for the chain)."
    return ("Fuse it with its neighbours: torch.compile the module (the launch is the limit, "
            "not its work).")


def _compile_model(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    if row.get("finding") == "step_idle":  # cast first: no switch until the cast is made
        after = ", after the cast" if row.get("fix_code") == "cast_then_compile" else ""
        return ("Launch fewer kernels: torch.compile the model (fused kernels, launched by "
                "generated code); mode=\"reduce-overhead\" also replays them as CUDA graphs. "
                "A graph break (an .item(), a data-dependent shape) can make it slower: "
                f"--verify measures it{after}.")
    facts = row.get("facts")
    cost = facts.get("compiled_call_ns") if isinstance(facts, Mapping) else None
    each = f" (about {cost / 1e3:.0f} µs of CPU time a call)" if cost else ""
    return ("Fuse them with their neighbours: torch.compile the model, or the block that holds "
            f"them; compiled on its own, this module would cost more per call{each} than its "
            "chain takes.")


def _cast_then_compile(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    ops = ", ".join(params.get("ops") or ()) or "the grouped GEMMs"
    modules = ", ".join(params.get("modules") or ()) or "the experts"
    half = params.get("dtype") or "the step's 16-bit dtype"
    compile_words = FIXES.get(str(params.get("compile")), _compile_model)
    return (compile_words(row, params) + f" But first cast {ops} in {modules} to {half} "
            "(the findings on them): compiled while they run float32, the model's graph "
            "breaks in every expert layer, and the compile gains nothing.")


def _optimizer_fused(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    optimizer = params.get("optimizer")
    if optimizer:
        return (f"Make the optimizer with fused=True: torch.optim.{optimizer}(..., "
                "fused=True) (one kernel per step for all its parameters).")
    classes = ", ".join(f"torch.optim.{c}" for c in params.get("classes", ()))
    return (f"Make the optimizer with fused=True if it is one of {classes} (one kernel per "
            "step for all its parameters), else torch.compile its step; its class was not "
            "recorded (instrument() names it with a step range).")


def _optimizer_foreach(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    optimizer = params.get("optimizer")
    return (f"Make the optimizer with foreach=True: torch.optim.{optimizer}(..., foreach=True) "
            f"(one kernel per op for all parameters; {optimizer} has no fused "
            "implementation), or torch.compile its step.")


def _compile_step(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    optimizer = params.get("optimizer") or "the optimizer"
    return (f"torch.compile the optimizer's step (torch.compile(optimizer.step)): {optimizer} "
            "has no fused implementation to switch on.")


def _compile_function(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    module = str(row.get("module") or "")
    if module.startswith(OUTSIDE_PREFIX):  # a call of the loop's own: name it
        call = module[len(OUTSIDE_PREFIX):]
        return (f"Fuse them: torch.compile the function of your loop that calls {call} "
                "(no module holds it).")
    return FIX["compile_function"]


def _none_known(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    kind = row.get("module_kind")
    if row.get("cause") == "one_block":
        ops = row.get("aten_ops")
        ran = ops.split(", ") if isinstance(ops, str) else ops  # joined once folded
        nms = " (fewer boxes into NMS)" if isinstance(ran, (list, tuple)) and "nms" in ran \
            else ""
        return ("No PyTorch-level fix known: one thread block does the launch's whole work, "
                "on one SM; a larger batch gives it more work, not more blocks. Its time "
                f"follows the op's input: fewer elements{nms} take less.")
    if kind in ("indexing", "embedding"):
        return ("No PyTorch-level fix known: a gather, scatter or index-add's grid and memory "
                "accesses follow its indices, not the batch; its time is the op's own.")
    if kind == "optimizer":
        return "No PyTorch-level fix known: the step already runs fused."
    if row.get("finding") == "step_idle":
        return ("No switch known: see where the GPU waits with torch-nsight profile --timeline "
                "(data loading, a synchronization such as .item(), Python between launches).")
    if row.get("finding") == "layout_conversion" and row.get("layout") == "channels_last":
        return ("No switch known: the model already runs channels-last; cuDNN converts "
                "these tensors itself (an N x C x 1 x 1 tensor is both layouts at once).")
    return ("No PyTorch-level fix known for this cause: the kernel's launch and memory "
            "accesses are the library's choice for this shape.")


def _cast_to_half(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    half = params.get("dtype") or "bfloat16"
    ops = ", ".join(params.get("ops") or ()) or "these ops"
    return (f"The step's other GEMMs ran {half} but these ran float32: autocast does not cast "
            f"{ops}. Cast their inputs and weights to {half} yourself (x.to(torch.{half}) "
            f"before the call, the weights kept in {half} or cast there); TF32 "
            f"(torch.backends.{params.get('setting', 'cuda.matmul.allow_tf32')} = True) "
            "reaches them too, for less.")


#: A fixed-size form of each data-dependent op (``step_idle.DATA_DEPENDENT_OPS``), where
#: PyTorch has one, and what it costs.
_FIXED_FORMS = {"nonzero": "torch.nonzero_static(x, size=k) for nonzero (it pads with "
                           "fill_value, -1 by default, and drops what is past k)",
                "argwhere": "torch.nonzero_static(x, size=k) for argwhere",
                "index_mask": "x * mask, or torch.where(mask, x, 0), for x[mask] where a sum "
                              "follows (not a mean, max or softmax)",
                "masked_select": "torch.where(mask, x, 0) for masked_select where a sum "
                                 "follows"}


def _fixed_shapes(row: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    ops = list(params.get("ops") or ())
    forms = [_FIXED_FORMS[op] for op in ops if op in _FIXED_FORMS]
    rest = ", ".join(OP_SAID.get(op, op) for op in ops if op not in _FIXED_FORMS)
    said = (f"Where the step allows, use fixed-size forms: {'; '.join(forms)}." if forms
            else "")
    left = (f" {rest} has no fixed-size form: its wait is the GPU's queue up to it." if rest
            else "")
    return (f"{said}{left} A compile cannot fuse across these calls (each breaks its graph, "
            "unless torch._dynamo.config.capture_dynamic_output_shape_ops = True), so it "
            "recovers little of this idle time; see where the CPU waits with torch-nsight "
            "profile --timeline.").strip()


def _said(text: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], str]:
    """A fix without parameters: its one sentence."""
    return lambda row, params: text


FIXES: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], str]] = {
    **{code: _said(text) for code, text in FIX.items()},  # first: the functions below win
    "pad_features": _pad_features, "pad_operands": _pad_operands,
    "pad_gemm_dims": _pad_gemm_dims, "pad_channels": _pad_channels,
    "channels_last": _channels_last, "compile_module": _compile_module,
    "compile_model": _compile_model, "cast_then_compile": _cast_then_compile,
    "optimizer_fused": _optimizer_fused, "optimizer_foreach": _optimizer_foreach,
    "compile_optimizer_step": _compile_step, "none_known": _none_known,
    "compile_function": _compile_function, "cast_to_half": _cast_to_half,
    "fixed_shapes": _fixed_shapes,
    "use_sdpa": lambda row, params: (SDPA_FOR_GEMM if row.get("finding") == "gemm_misaligned"
                                     else FIX["use_sdpa"]),
}


def _rules(facts: Mapping[str, Any]) -> str:
    """Nsight Compute's own diagnosis, as evidence."""
    rules = facts.get("ncu_rules") or ()
    return "".join(f" Nsight Compute's {r['rule']} rule: {r['title']} (up to "
                   f"{r['speedup_pct']:.0f}% of the kernel)." for r in rules)


def word_finding(row: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The evidence and the fix of one finding row, from its codes and facts.

    Args:
        row: a row of :func:`torch_nsight.analyze.findings.findings` (or of a folded or
            measured table), with ``blocks`` where folded.

    Returns:
        (evidence, fix); a timeline finding's from its numbers; None for a row with
        neither codes nor words.
    """
    facts = row.get("facts")
    facts = facts if isinstance(facts, Mapping) else {}
    if TIMELINE_FACTS in facts:  # a timeline finding: its numbers, worded as the timeline's
        evidence, fix = step_finding_words(facts[TIMELINE_FACTS], str(row["finding"]))
    elif given(row, "finding") in EVIDENCE and isinstance(given(row, "fix_code"), str):
        params = row.get("fix_params")
        params = params if isinstance(params, Mapping) else {}
        evidence = EVIDENCE[str(row["finding"])](row, facts) + _rules(facts)
        fix = FIXES[str(row["fix_code"])](row, params)
    else:
        return given(row, "evidence"), given(row, "fix")
    blocks = given(row, "blocks")
    if isinstance(blocks, (int, float)) and blocks > 1:  # the evidence is one block's
        evidence = (f"In each of the {int(blocks)} blocks (the gain is theirs together): "
                    f"{evidence}")
    return evidence, fix


def word_findings(found: pd.DataFrame) -> pd.DataFrame:
    """``found`` with ``evidence`` and ``fix`` written from its codes, in the columns of
    :data:`~torch_nsight.vocabulary.FINDING_COLUMNS`, its codes after them (and ``blocks``
    last, where folded)::

        finding          fix_code      fix_params              ->  finding          evidence                       fix
        gemm_misaligned  pad_features  {'pads': [...], ...}        gemm_misaligned  bf16 mm 4096x768 @ ...  Pad the output features ...

    Args:
        found: :func:`torch_nsight.analyze.findings.findings` rows (folded or not); rows
            that already have words and no codes (a fix asked for by name) keep theirs.

    Returns:
        A new frame, the same rows.
    """
    out = found.copy()
    words = [word_finding(row) for row in out.to_dict("records")]
    out["evidence"] = pd.Series([evidence for evidence, _ in words], index=out.index,
                                dtype=object)
    out["fix"] = pd.Series([fix for _, fix in words], index=out.index, dtype=object)
    first = [c for c in (*FINDING_COLUMNS, *FINDING_CODE_COLUMNS) if c in out]
    return out.loc[:, [*first, *(c for c in out.columns if c not in first)]]


set_words("findings", word_findings)
