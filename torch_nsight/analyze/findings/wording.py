"""The words of each finding: its evidence sentence and fix, from the facts its check found.

Each function here takes a :class:`~torch_nsight.analyze.findings.registry.Found`'s
``facts`` (numbers in the analysis units: ns, bytes, FLOPs, percent) and returns
(evidence, fix); the check's registration line names it. No function here computes a
number a decision depends on.
"""

from __future__ import annotations

from typing import Any

from torch_nsight.units import format_bytes, format_duration

FIX = {
    "fp32_matmul": "Turn on TF32 tensor cores with torch.backends.cuda.matmul.allow_tf32 = True "
                   "/ torch.set_float32_matmul_precision('high'), or run the model in bf16 "
                   "(torch.autocast('cuda', dtype=torch.bfloat16)).",
    "fp32_conv": "Turn on TF32 tensor cores with torch.backends.cudnn.allow_tf32 = True, or run "
                 "the model in bf16 (torch.autocast('cuda', dtype=torch.bfloat16)).",
    "elementwise_chain": "Fuse them: torch.compile the module (one kernel for the chain).",
    "chain_rms_norm": "Use one fused RMSNorm: torch.nn.functional.rms_norm(x, (d,), weight, "
                      "eps) or nn.RMSNorm (torch >= 2.4) instead of pow/mean/rsqrt/mul, or "
                      "torch.compile the module.",
    "chain_layer_norm": "Use torch.nn.functional.layer_norm / nn.LayerNorm (one fused kernel) "
                        "instead of the mean/var arithmetic, or torch.compile the module.",
    "chain_rotary": "Apply the rotary embedding in one kernel: torch.compile the function "
                    "that applies it (and compute cos/sin once per sequence length, not per "
                    "layer), or a fused RoPE kernel (e.g. flash-attn's apply_rotary_emb).",
    "chain_gelu": "Use F.gelu(approximate='tanh') (nn.GELU(approximate='tanh')): one kernel "
                  "instead of the tanh formula's chain; or torch.compile the module.",
    "chain_loss": "Fuse the loss: torch.compile the function that computes it from the "
                  "logits (the upcast, log-softmax and NLL become a few kernels), or compute "
                  "it over chunks of the logits.",
    "chain_optimizer": "Use the optimizer's fused implementation: e.g. torch.optim.AdamW(..., "
                       "fused=True) (one kernel per step for all parameters), or "
                       "torch.compile the optimizer's step.",
    "chain_softmax": "Use F.scaled_dot_product_attention (masking, scaling and softmax fused "
                     "into attention), or at least F.softmax over the masked scores; or "
                     "torch.compile the module.",
    "layout_conversion": "Go channels-last: model.to(memory_format=torch.channels_last) and "
                         "channels-last inputs (x.to(memory_format=torch.channels_last)).",
    "small_grid": "Give it more parallel work: a larger batch, fuse it with its neighbours "
                  "(torch.compile), or CUDA graphs (torch.compile(mode='reduce-overhead')).",
    "gemm_by_name": "Pad the GEMM's dimensions (features, vocabulary, sequence) to multiples "
                    "of 64 (a Linear's output features: a wider nn.Linear and slice the "
                    "output); record the calls table (sweep, or instrument(record_calls=...)) "
                    "to name the dimension.",
}
#: A GEMM dimension's role (:data:`~torch_nsight.analyze.findings.calls.ROLES`) in words.
SAID = {"tokens": "batch x sequence", "out_features": "output features",
        "in_features": "input features"}
#: What an elementwise chain computes (:func:`~.elementwise_chain.chain_kind`) in words.
CHAIN_SAID = {"rms_norm": " (an RMSNorm written out)", "layer_norm": " (a LayerNorm written "
              "out)", "rotary": " (a rotary embedding)", "gelu": " (a tanh GELU written out)",
              "softmax": " (masking and softmax)",
              "loss": " (the loss: upcast, log-softmax, NLL)",
              "optimizer": " (the optimizer's update, parameter by parameter)"}


def _time(duration_ns: float) -> str:
    """A duration as the evidence sentences write it: ``1.23 ms``, ``845.3 µs``, ``n/a``."""
    return format_duration(duration_ns, largest="ms", decimals=2, missing="n/a")


def _at_roof(pct: float) -> str:
    """`` at 12% of its roofline`` (nothing where the roofline is not known: no ``nan``)."""
    return "" if pct != pct else f" at {pct:.0f}% of its roofline"


def _dimension_fix(bad: dict[str, Any], known: dict[str, int]) -> str:
    op, role, value, padded = bad["op"], bad["role"], bad["value"], bad["padded"]
    linear = op in ("mm", "addmm", "linear")
    if linear and role == "out_features" and "in_features" in known:
        return (f"pad the output features from {value} to {padded}: "
                f"nn.Linear({known['in_features']}, {padded}) and slice the output, or pad "
                "the vocabulary")
    if linear and role == "in_features" and "out_features" in known:
        return (f"pad the input features from {value} to {padded}: zero-pad the input and "
                f"use nn.Linear({padded}, {known['out_features']})")
    if role == "tokens":
        return (f"pad the rows from {value} to {padded}: a batch x sequence length that is a "
                "multiple of 8, or padded rows")
    return f"pad {value} to {padded}: zero-pad the operands and slice the result"


def gemm_misaligned(facts: dict[str, Any]) -> tuple[str, str]:
    """From the calls' shapes (``bad``: one dict per dimension off alignment) where the
    calls table has them, else from the kernel's name."""
    if "bad" not in facts:
        why = (f"a pre-Hopper (sm75) kernel on {facts['gpu']}" if facts["old_arch"]
               else "a kernel for operands aligned to 1 or 2 elements")
        return (f"cuBLAS chose {facts['kernel']}, {why}: a GEMM dimension is not a multiple "
                f"of 8; it ran{_at_roof(facts['roof_pct'])} ({_time(facts['time_ns'])} per "
                "run).", FIX["gemm_by_name"])
    shapes = "; ".join(dict.fromkeys(
        f"{b['dtype']} {b['op']} {b['M']}x{b['K']} @ {b['K']}x{b['N']}: {b['dim']} = "
        f"{b['value']} ({SAID[b['role']]}) is not a multiple of {b['align']}"
        for b in facts["bad"]))
    fix = "; ".join(dict.fromkeys(_dimension_fix(b, facts["known"]) for b in facts["bad"]))
    return (f"{shapes}; the GEMM ran {facts['kernel']}{_at_roof(facts['roof_pct'])} "
            f"({_time(facts['time_ns'])} per run).",
            fix[0].upper() + fix[1:] + ".")


def fp32_no_tensor_cores(facts: dict[str, Any]) -> tuple[str, str]:
    conv, tf32 = facts["conv"], facts["tf32"]
    setting = "cudnn.allow_tf32" if conv else "cuda.matmul.allow_tf32"
    evidence = (f"fp32 {'convolution' if conv else 'GEMM'} on CUDA cores, no tensor-core "
                f"FLOPs: {facts['flops_per_run'] / 1e9:.1f} GFLOP per run at "
                f"{facts['flops_per_ns'] / 1e3:.1f} TFLOP/s; "
                f"{setting} is {'unknown' if tf32 is None else 'False'}; at the TF32 "
                f"tensor peak ({facts['peak_flops_per_s'] / 1e12:.0f} TFLOP/s) its roofline "
                f"is {_time(facts['tf32_roof_ns'])} per run.")
    return evidence, FIX["fp32_conv" if conv else "fp32_matmul"]


def elementwise_chain(facts: dict[str, Any]) -> tuple[str, str]:
    kind, time, traffic = facts["kind"], facts["time_ns"], facts["traffic_bytes"]
    evidence = (f"{facts['kernels_per_run']:g} memory-bound elementwise kernels in a row per "
                f"run{CHAIN_SAID.get(kind or '', '')} ({_time(time)}, "
                f"{format_bytes(traffic)} of DRAM traffic at {traffic / time / 1e3:.2f} TB/s); "
                f"one fused pass moves about {format_bytes(facts['one_pass_bytes'])}, the "
                "traffic of its largest kernel.")
    return evidence, FIX[f"chain_{kind}" if kind else "elementwise_chain"]


def layout_conversion(facts: dict[str, Any]) -> tuple[str, str]:
    gain, total = facts["gain_ns"], facts["module_ns"]
    listed = ", ".join(f"{k} x{n:g}" if n != 1 else k for k, n in facts["counts"].items())
    evidence = (f"{facts['kernels_per_run']:g} layout conversions ({listed}) around the "
                f"convolution take {_time(gain)} per run, {100 * gain / total:.0f}% of the "
                f"module's {_time(total)}.")
    return evidence, FIX["layout_conversion"]


def small_grid(facts: dict[str, Any]) -> tuple[str, str]:
    waves = facts["waves"]
    grid = (f"a grid of {waves:.2f} waves (under one: SMs left idle)" if waves < 1
            else "a small grid")
    evidence = (f"{facts['kernel']} is latency-bound with {grid},{_at_roof(facts['roof_pct'])}"
                f": {_time(facts['time_ns'])} per run, {facts['share_pct']:.1f}% of the run's "
                "GPU time.")
    return evidence, FIX["small_grid"]
