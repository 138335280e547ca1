"""The evidence of each finding, one function per finding code, from its codes and facts
(:data:`EVIDENCE`); the fixes' words and the front door are
:mod:`torch_nsight.render.finding_words`'s."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from torch_nsight.render.code_words import CHAIN_SAID, IMPL_SAID, OP_SAID, ROLE_SAID
from torch_nsight.render.readable_numbers import format_rate
from torch_nsight.render.reason_words import describe_cause
from torch_nsight.units import format_bytes, format_duration

__all__ = ["CAUSE_SAID", "EVIDENCE", "KIND_SAID", "given"]


def _time(duration_ns: Any) -> str:
    """A duration as the evidence sentences write it: ``1.23 ms``, ``845.3 µs``, ``n/a``."""
    return format_duration(duration_ns, largest="ms", decimals=2, missing="n/a")


def _at_roof(pct: Any) -> str:
    """`` at 12% of its roofline`` (nothing where the roofline is not known: no ``nan``)."""
    return "" if not isinstance(pct, (int, float)) or pct != pct \
        else f" at {pct:.0f}% of its roofline"


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def given(row: Mapping[str, Any], key: str) -> Any:
    """``row[key]``, None where it is missing or NaN (a code column of a concatenated
    table)."""
    value = row.get(key)
    return None if value is None or (isinstance(value, float) and value != value) else value


# --- evidence, by finding ----------------------------------------------------------------

def _gemm_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    ran = f"{_at_roof(facts.get('roof_pct'))} ({_time(facts.get('time_ns'))} per run)"
    if "bad" in facts:  # a GEMM call's shapes
        shapes = "; ".join(dict.fromkeys(
            f"{b['dtype']} {b['op']} {b['M']}x{b['K']} @ {b['K']}x{b['N']}: {b['dim']} = "
            f"{b['value']} ({ROLE_SAID.get(b['role'], b['role'])}) is not a multiple of "
            f"{b['align']}" for b in facts["bad"]))
        return f"{shapes}; the GEMM ran {facts['kernel']}{ran}."
    if given(row, "module_kind") == "conv" and given(row, "dim"):
        dim, value, role = row["dim"], row["dim_value"], row.get("dim_role")
        if role == "spatial":
            return (f"a 1x1 convolution in NCHW runs as a GEMM over the output's H x W = "
                    f"{value} positions, not a multiple of {facts.get('align', 8)}: cuBLAS "
                    f"chose {facts['kernel']}, a kernel for operands aligned to 1 or 2 "
                    f"elements{ran}; its channels are aligned.")
        return (f"{given(row, 'dtype') or ''} convolution: {dim} = {value} "
                f"({ROLE_SAID.get(str(role), role)}) is not a multiple of "
                f"{facts.get('align', 8)}; it ran {facts['kernel']}{ran}.").lstrip()
    why = (f"a pre-Hopper (sm75) kernel on {facts['gpu']}" if facts.get("old_arch")
           else "a kernel for operands aligned to 1 or 2 elements")
    return (f"cuBLAS chose {facts['kernel']}, {why}: a GEMM dimension is not a multiple of 8;"
            f" it ran{ran}.")


def _fp32_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    conv, tf32 = facts["conv"], facts["tf32"]
    setting = "cudnn.allow_tf32" if conv else "cuda.matmul.allow_tf32"
    state = "unknown" if tf32 is None else "False"
    what = "convolution" if conv else "GEMM"
    if facts.get("by_name"):
        return (f"fp32 {what} on CUDA cores: {facts['kernel']} is a CUDA-core (SIMT/FFMA) "
                f"kernel ({_time(facts.get('time_ns'))} per run; the profile has no FLOP "
                f"counters to say more); {setting} is {state}.")
    peak = {"bfloat16": "bf16", "float16": "fp16"}.get(str(facts.get("roof_precision")), "TF32")
    roof = facts.get("roof_ns", facts.get("tf32_roof_ns"))  # (named so before 2026-11-28)
    return (f"fp32 {what} on CUDA cores, no tensor-core FLOPs: "
            f"{format_rate(facts['flops_per_run'], 'FLOP')} per run at "
            f"{format_rate(facts['flops_per_ns'] * 1e9, 'FLOP/s')}; {setting} is {state}; at "
            f"the {peak} "
            f"tensor peak ({facts['peak_flops_per_s'] / 1e12:.0f} TFLOP/s) its roofline "
            f"is {_time(roof)} per run.")


def _conv_cores_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    dtype = given(row, "dtype") or "16-bit"
    pipe = _number(facts.get("tensor_pipe_pct"))
    busy = f"its tensor pipe {pipe:.2f}% busy" if not math.isnan(pipe) else "no tensor-core kernel"
    return (f"{dtype} convolution on CUDA cores: {facts['kernel']} is cuDNN's direct kernel "
            f"({busy}; {_time(facts['time_ns'])} per run, "
            f"{format_rate(facts['flops_per_run'], 'FLOP')}); at the {dtype} tensor peak "
            f"({facts['peak_flops_per_s'] / 1e12:.0f} TFLOP/s) its roofline is "
            f"{_time(facts['tensor_roof_ns'])} per run.")


def _chain_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    time, traffic = facts["time_ns"], facts["traffic_bytes"]
    return (f"{facts['kernels_per_run']:g} memory-bound elementwise kernels in a row per "
            f"run{CHAIN_SAID.get(str(row.get('cause')), '')} ({_time(time)}, "
            f"{format_bytes(traffic)} of DRAM traffic at {traffic / time / 1e3:.2f} TB/s); "
            f"one fused pass moves about {format_bytes(facts['one_pass_bytes'])}, the "
            "traffic of its largest kernel.")


def _layout_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    gain, total = facts["gain_ns"], facts["module_ns"]
    listed = ", ".join(f"{k} x{n:g}" if n != 1 else k for k, n in facts["counts"].items())
    return (f"{facts['kernels_per_run']:g} layout conversions ({listed}) around the "
            f"convolution take {_time(gain)} per run, {100 * gain / total:.0f}% of the "
            f"module's {_time(total)}.")


def _nchw_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    family = "depthwise-convolution" if given(row, "cause") == "depthwise" else "batch-norm"
    return (f"{facts['kernels_per_run']:g} NCHW {family} kernels take "
            f"{_time(facts['time_ns'])} per run; channels-last kernels did the same work in "
            f"{100 * facts['left_share']:.0f}% of the time on a recorded NCHW/channels-last "
            "pair of the same network.")


def _optimizer_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    who = f"{row['optimizer']}'s step" if given(row, "optimizer") else \
        "The optimizer's step (multi-tensor kernels outside a step range)"
    traffic = facts.get("traffic_bytes")
    moved = ("" if traffic is None else f", {format_bytes(traffic)} of DRAM traffic; one "
             f"fused pass moves about {format_bytes(facts['one_pass_bytes'])}")
    return (f"{who} ran {IMPL_SAID.get(str(row.get('optimizer_impl')), 'unfused')}: "
            f"{facts['passes']:g} passes over the parameters, {facts['kernels_per_run']:g} "
            f"kernels per run ({_time(facts['time_ns'])}{moved}).")


#: A kind of module in words, for a finding over many of them.
KIND_SAID = {"batch_norm": "batch norm", "layer_norm": "layer norm", "group_norm": "group norm",
             "rms_norm": "RMSNorm", "conv": "convolution", "linear": "Linear",
             "matmul": "matmul", "gemm": "GEMM", "attention": "attention",
             "activation": "activation", "elementwise": "elementwise", "pool": "pooling",
             "loss": "loss", "embedding": "embedding", "indexing": "indexing"}
#: A launch's cause in words, for a finding over many launches.
CAUSE_SAID = {"one_block": "one block on one SM", "small_grid": "under one wave",
              "tail": "a partial last wave",
              "registers": "occupancy limited by registers",
              "shared_memory": "occupancy limited by shared memory",
              "block_size": "occupancy limited by the block size",
              "blocks_per_sm": "blocks too small to fill an SM",
              "launch_overhead": "launches of a few µs", "few_warps": "too few warps",
              "waiting_warps": "warps waiting on memory or a dependency",
              "memory_latency": "warps waiting on global memory",
              "synchronization": "warps waiting at barriers",
              "instruction_issue": "instruction issue",
              "shared_memory_access": "warps waiting on shared memory", "None": "no single cause"}


def _many_sites_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    kind = KIND_SAID.get(str(given(row, "module_kind")), "other")
    causes = ", ".join(f"{CAUSE_SAID.get(c, c)} {pct:.0f}%"
                       for c, pct in facts.get("causes", {}).items())
    return (f"Latency-bound launches in {facts['sites']} {kind} modules, none 5% of the run "
            f"alone, hold {facts['share_pct']:.1f}% of the run's GPU time together "
            f"({_time(facts['time_ns'])} per run{_at_roof(facts.get('roof_pct'))}; the "
            f"largest kernel {facts['kernel']}); by cause: {causes}.")


def _latency_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    if "sites" in facts:
        return _many_sites_evidence(row, facts)
    cause, launch = given(row, "cause"), facts.get("launch") or {}
    clause = describe_cause(dict(launch), cause) if launch else ""
    if not clause:
        waves = _number(facts.get("waves"))
        clause = (f"a grid of {waves:.2f} waves (under one: SMs left idle)" if waves < 1
                  else "a small grid")
    return (f"{facts['kernel']} is latency-bound: {clause}; it ran"
            f"{_at_roof(facts.get('roof_pct'))} ({_time(facts['time_ns'])} per run, "
            f"{facts['share_pct']:.1f}% of the run's GPU time).")


def _idle_why(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    cause = given(row, "cause")
    if cause == "data_dependent":
        params = row.get("fix_params")
        ops = params.get("ops") if isinstance(params, Mapping) else None
        said = [OP_SAID.get(op, op) for op in ops or ()]
        return (f"it ran {' and '.join(said or ('ops',))}, whose output size the GPU decides: "
                "the CPU waits for the GPU at each call to learn it, and torch.compile breaks "
                "its graph there; how much of the wait they cost is not measured")
    if cause == "launch_overhead":
        return (f"{facts['small_kernel_pct']:.0f}% of its {facts['launches_per_run']:.0f} "
                f"launches are shorter than {_time(facts['small_kernel_ns'])}, less than eager "
                "PyTorch takes to launch one")
    return ("its launches are not mostly short: the CPU's own work between them (data, a "
            "synchronization, Python) holds it")


def _idle_evidence(row: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    why = _idle_why(row, facts)
    return (f"The step took {_time(facts['bare_step_ns'])} without the profiler (--verify's "
            f"steps with no fix), its kernels {_time(facts['kernel_ns'])}: the GPU waited for "
            f"the CPU {_time(facts['idle_ns'])} ({facts['idle_pct']:.0f}% of the step); "
            f"{why}.")


EVIDENCE: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], str]] = {
    "step_idle": _idle_evidence,
    "gemm_misaligned": _gemm_evidence, "fp32_no_tensor_cores": _fp32_evidence,
    "conv_no_tensor_cores": _conv_cores_evidence, "elementwise_chain": _chain_evidence, "layout_conversion": _layout_evidence,
    "nchw_kernels": _nchw_evidence,
    "optimizer_not_fused": _optimizer_evidence, "small_grid": _latency_evidence,
    "latency_bound": _latency_evidence,
}
