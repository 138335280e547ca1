"""The model zoo: do the answers hold on models nobody tuned them on? (GPU machine)

    PYTHONPATH=/tmp/site:$PWD python bench/zoo.py --out OUT [--models a,b] [--compiled-profile a,b]

For each model of ``bench/zoo_app.py`` (random weights, its own training or decode loop,
``instrument(model)`` and ``torch_nsight.step()`` as a user writes them), in one run on one
machine, every process timed from outside:

* **bare**: the script alone, 30 steps, eager and ``torch.compile``'d; each step's CUDA
  period; the warm step is the median of steps 10-29, given as two repeats (10-19, 20-29);
* **profile**: ``torch-nsight profile --steps 12:13`` (the fast default) and
  ``--metric-set duration``: exit status, the script's own last line, wall time, the share of
  GPU time inside module ranges, kernels above their roofline ceiling, the bound per kernel;
* **SOL sample**: plain ``ncu`` on the same step with the SpeedOfLight section beside the fast
  set, one launch per launch configuration (``--filter-mode per-launch-config -c 1``): the
  share of the sampled GPU time on which the fast tier's bound is Nsight Compute's;
* **timeline**: ``profile --timeline --steps 12:15`` of 26 steps: the verdict, the busy share
  it judged against the busy share of the bare step (the recorded GPU work over the bare
  script's own step), and a launch-bound gain against the measured effect of compiling;
* **stalls**: ``profile --steps 12:13 --stalls`` (the focused second pass), its wall time
  beside the fast default's, and the second pass's line;
* **compiled profile** (``--compiled-profile``): ``profile --steps 12:13`` of the compiled
  script: it must exit 0 with its own output, its kernels attributed to modules.

Writes ``OUT/zoo.json`` (one record per model) and the warm periods of each bare run.
``--table`` prints docs/zoo.md's table from one or more ``zoo.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "bench" / "zoo_app.py"
NCU = os.environ.get("TORCH_NSIGHT_NCU", "/usr/local/cuda/bin/ncu")
#: Models whose answers the project's thresholds were tuned on (docs/roofline.md,
#: bench/bound_calibration.py); every other one only verifies.
#: efficientnet_nchw, gat, lstm_lm, whisper_s and mixtral_moe are the five models of issue 43's
#: trial: their findings were read before the advice was rebuilt, so they calibrate. The four
#: added beside them (mobilenet_v3, gru_lm, sage, wav2vec2) were set to verify before any of
#: them ran.
#: regnet_y, swin_t, deeplab and conformer were added on 2026-11-28, set to verify before any
#: of them ran: the rules of issue 43 written after reading mobilenet_v3's, gru_lm's, sage's
#: and wav2vec2's results are verified on them.
#: gin, shufflenet, llama_train and qwen2_moe were added on 2026-11-28 (later), set to verify
#: before any of them ran: the first models to verify the grouped GEMM's FLOPs and the fp32
#: finding read from the tensor pipe, and the rules of the sessions before.
#: olmoe (an OLMoE, a third MoE of another family: 16 experts, top-4, no shared expert) was
#: added on 2026-11-28 (last session of the day), set to verify before it ran: the experts'
#: cast (cast_to_half) and the whole model's compile, written after reading the two MoEs'.
#: deepseek_v3 (transformers' DeepseekV3: latent attention, routed and shared experts) was added
#: on 2026-11-28 after olmoe's result, set to verify before it ran: cast_then_compile (the
#: model's compile told to wait for the experts' cast), written after reading the three MoEs'.
#: resnext50 (torchvision ResNeXt-50 32x4d, NCHW) and mnasnet (torchvision MnasNet 1.0, NCHW)
#: were added on 2026-11-28 (a new session), set to verify before either ran: the channels-last
#: switch timed call by call (findings --benchmark, collect/benchmark_layout.py) against
#: --verify, written after reading five NCHW CNNs' channels-last results.
#: fasterrcnn (torchvision Faster R-CNN, MobileNetV3-FPN 320, fp32, SGD), r3d_18 (torchvision's
#: 3-D convolution video network, NCDHW, SGD), mamba (transformers' Mamba, its selective scan a
#: Python loop over the tokens without the mamba-ssm kernels, AdamW foreach) and clip
#: (transformers' CLIP, two towers, contrastive loss, AdamW foreach) were added on 2026-11-29
#: (bench/zoo_families.py), set to verify before any of them ran: families the zoo lacked
#: (detection, video, state-space, image-text), every rule of the sessions before verified.
CALIBRATED = {"vit_s", "gpt2", "gpt2_ddp", "efficientnet_nchw", "gat", "lstm_lm", "whisper_s",
              "mixtral_moe"}
MODELS = ["vit_s", "gpt2", "convnext_t", "resnet50", "bert", "t5", "roberta_ragged",
          "llama_decode", "gpt2_ddp", "efficientnet_nchw", "gat", "lstm_lm", "whisper_s",
          "mixtral_moe", "mobilenet_v3", "gru_lm", "sage", "wav2vec2", "regnet_y", "swin_t",
          "deeplab", "conformer", "gin", "shufflenet", "llama_train", "qwen2_moe",
          "olmoe", "deepseek_v3", "resnext50", "mnasnet", "fasterrcnn", "r3d_18", "mamba",
          "clip"]
WARM = 10
#: Options of this run that every phase reads (``--keep-reports``).
KEEP: dict[str, bool] = {}


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 400
         ) -> dict[str, Any]:
    started = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})}, cwd=ROOT)
        code, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        code = 124
        text = (err.stdout or b"").decode(errors="replace") + (err.stderr or b"").decode(
            errors="replace") if isinstance(err.stdout, bytes) else str(err)
    return {"rc": code, "wall_s": round(time.time() - started, 1), "text": text}


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


#: A ``*_ddp`` model runs one process per GPU under torchrun; only rank 0 is profiled, and
#: NCCL's kernels are left out of ncu's replay (a replayed all-reduce waits forever).
RANKS = 2


def _launcher(model: str) -> list[str]:
    if not model.endswith("_ddp"):
        return []
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(RANKS),
            "--no-python"]


def _ranked(model: str) -> list[str]:
    return ["--ranks", "0", "-k", "^(?!nccl)"] if model.endswith("_ddp") else []


def bare(model: str, out: Path, *, compiled: bool) -> dict[str, Any]:
    times = out / f"{model}_{'compiled' if compiled else 'eager'}_periods.json"
    ran = _run([*_launcher(model), sys.executable, str(APP), model, "--steps", "30",
                "--times", str(times), *(["--compile"] if compiled else [])])
    record: dict[str, Any] = {"rc": ran["rc"], "wall_s": ran["wall_s"]}
    if ran["rc"] != 0 or not times.exists():
        record["error"] = _tail(ran["text"])
        return record
    periods = json.loads(times.read_text())["periods_ms"]
    warm = periods[WARM:]
    record.update(step_ms=statistics.median(warm),
                  repeats_ms=[statistics.median(warm[:10]), statistics.median(warm[10:])],
                  first_steps_ms=periods[:WARM])
    return record


def _ncu_free(kernels: Any) -> Any:
    return kernels[kernels["duration_ns"].notna()]


def latency_top10(kernels: Any) -> dict[str, int]:
    """Of the top 10 hotspots (folded, by headroom), the latency-bound rows, how many of them
    name their limiter (a cause with numbers, not "check occupancy and stalls"), and the
    cause each names (``unnamed`` where its next step names none)."""
    from torch_nsight.analyze import hotspots
    from torch_nsight.analyze.limiter import LIMITER_CODES

    top = hotspots(kernels, n=10)
    latency = top[top["bound"] == "latency"]
    causes = [code if code in LIMITER_CODES else "unnamed"
              for code in latency["next_step_code"]]
    return {"top10_latency_rows": len(latency),
            "top10_latency_named": sum(cause != "unnamed" for cause in causes),
            "top10_latency_causes": causes}


def profile(model: str, out: Path, *, metric_set: str = "fast", compiled: bool | str = False,
            stalls: bool = False) -> dict[str, Any]:
    """``compiled``: True for ``torch.compile(model)``, ``"method"`` for ``model.compile()``."""
    import torch_nsight

    how = "--compile-method" if compiled == "method" else "--compile"
    folder = out / (f"{model}_{metric_set}{'_compiled' if compiled else ''}"
                    f"{'_method' if compiled == 'method' else ''}"
                    f"{'_stalls' if stalls else ''}")
    ran = _run([*_launcher(model), sys.executable, "-m", "torch_nsight", "profile", "--steps",
                "12:13", *_ranked(model), "--metric-set", metric_set, "--out", str(folder),
                "--force", *(["--stalls"] if stalls else []), "--",
                sys.executable, str(APP), model, "--steps", "14",
                *([how] if compiled else [])], timeout=540)
    record: dict[str, Any] = {"rc": ran["rc"], "wall_s": ran["wall_s"],
                              "script_done": f"zoo_app done: {model}" in ran["text"],
                              "crashed": "Traceback" in ran["text"]}
    if ran["rc"] != 0:
        record["error"] = _tail(ran["text"])
        return record
    try:
        kernels = _ncu_free(torch_nsight.load(folder, cache=False).kernels)
    except Exception as err:  # noqa: BLE001 - a bench records what failed
        record["error"] = f"{type(err).__name__}: {err}"
        return record
    total = kernels["duration_ns"].sum()
    inside = kernels["module_path"].notna() & (kernels["module"] != "(unattributed)")
    record.update(kernels=len(kernels), gpu_ms=total / 1e6,
                  in_modules_pct=100.0 * kernels.loc[inside, "duration_ns"].sum() / total)
    if "pct_of_roof" in kernels:
        above = kernels.get("above_roof", kernels["pct_of_roof"] > 100).fillna(False)
        record.update(above_roof=int(above.sum()) + int((kernels["pct_of_roof"] > 100).sum()),
                      on_roofline_pct=100.0 * kernels.loc[kernels["pct_of_roof"].notna(),
                                                          "duration_ns"].sum() / total)
    if "bound" in kernels:
        record["bound_pct"] = {str(b): round(100.0 * t / total, 1) for b, t in
                               kernels.groupby("bound")["duration_ns"].sum().items()}
        record.update(latency_top10(kernels))
    for line in ran["text"].splitlines():
        if line.startswith("time:"):
            record["phases"] = line
        if line.startswith("second pass (--stalls):"):
            record["second_pass"] = line
    if KEEP.get("reports") and metric_set == "fast" and not compiled:
        (out / f"{model}_profile.txt").write_text(ran["text"])  # what the user read
        for report in folder.glob("*.ncu-rep"):  # kept for the CPU tests (xz-compressed)
            kept = out / f"{model}_profile.ncu-rep"
            shutil.move(report, kept)
            subprocess.run(["xz", "-T4", "-f", str(kept)], check=False)
    shutil.rmtree(folder, ignore_errors=True)
    return record


def sol_sample(model: str, out: Path) -> dict[str, Any]:
    """The fast tier's bound against Nsight Compute's SOL rule on one launch per config."""
    import torch_nsight
    from torch_nsight.analyze.classify import classify
    from torch_nsight.collect.shared import ncu as ncu_cli
    from torch_nsight.metrics import METRIC_SETS

    metrics = ncu_cli.filter_metrics(METRIC_SETS["fast"].metrics,
                                     ncu_cli.known_metric_bases(NCU))
    report = out / f"{model}_sol.ncu-rep"
    ran = _run([NCU, "--clock-control", "none", "--target-processes", "application-only",
                "--nvtx", "--nvtx-include", "torch_nsight@measure", "--section",
                "SpeedOfLight", "--metrics", ",".join(metrics), "--filter-mode",
                "per-launch-config", "-c", "1", "-f", "-o", str(report.with_suffix("")),
                sys.executable, str(APP), model, "--steps", "13"],
               env={"TORCH_NSIGHT_STEPS": "12:13"}, timeout=500)
    record: dict[str, Any] = {"rc": ran["rc"], "wall_s": ran["wall_s"]}
    if not report.exists():
        record["error"] = _tail(ran["text"])
        return record
    kernels = _ncu_free(torch_nsight.load(report, cache=False).kernels)
    rule = kernels["basis"] == "ncu_rule"
    estimate = classify(kernels.drop(columns=["sol_bottleneck", "sm_pct", "mem_pct"]))
    same = (estimate["bound"] == kernels["bound"]) & rule
    weight = kernels["duration_ns"]
    record.update(sampled=int(rule.sum()),
                  agree_time_pct=100.0 * weight[same].sum() / weight[rule].sum(),
                  agree_kernels_pct=100.0 * same.sum() / max(rule.sum(), 1))
    parted = kernels[rule & ~same].assign(estimate=estimate.loc[rule & ~same, "bound"])
    record["parted"] = [f"{str(r.kernel)[:48]} ncu={r.bound} fast={r.estimate} "
                        f"{r.duration_ns / 1e3:.0f}us" for r in parted.sort_values(
                            "duration_ns", ascending=False).head(5).itertuples()]
    report.unlink()
    return record


def timeline(model: str, out: Path, bare_step_ms: float | None) -> dict[str, Any]:
    import torch_nsight
    from torch_nsight.analyze import timeline_findings, timeline_summary
    from torch_nsight.render.timeline_words import word_summary

    folder = out / f"{model}_timeline"
    ran = _run([sys.executable, "-m", "torch_nsight", "profile", "--timeline", "--steps",
                "12:15", "--out", str(folder), "--force", "--", sys.executable, str(APP),
                model, "--steps", "26"])
    record: dict[str, Any] = {"rc": ran["rc"], "wall_s": ran["wall_s"],
                              "script_done": f"zoo_app done: {model}" in ran["text"]}
    if ran["rc"] != 0:
        record["error"] = _tail(ran["text"])
        return record
    loaded = torch_nsight.load(folder, cache=False)
    summary = word_summary(timeline_summary(loaded.kernels, loaded.timeline)).iloc[0]
    busy_ms = summary["wall_ns"] * summary["busy_pct"] / 100.0 / 1e6
    record.update(verdict=summary["verdict"], evidence=summary["evidence"],
                  judged_busy_pct=float(summary["bare_busy_pct"]),
                  estimated_bare_ms=float(busy_ms / summary["bare_busy_pct"] * 100.0)
                  if summary["bare_busy_pct"] > 0 else None,
                  bare_spread_pct=float(summary.get("bare_spread_pct", float("nan"))),
                  gpu_busy_ms=busy_ms)
    if bare_step_ms:
        record["true_busy_pct"] = 100.0 * busy_ms / bare_step_ms
    found = timeline_findings(loaded.kernels, loaded.timeline)
    launch = found[found["finding"].isin(["launch_bound", "gpu_idle"])]
    if len(launch):
        record["idle_gain_ms"] = float(launch["est_gain_ns"].max() / 1e6)
        record["idle_finding"] = str(launch.iloc[0]["finding"])
    shutil.rmtree(folder, ignore_errors=True)
    return record


def run_model(model: str, out: Path, compiled_profile: bool, phases: set[str] | None = None,
              before: dict[str, Any] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {**(before or {}), "model": model,
                              "set": "calibrate" if model in CALIBRATED else "verify"}
    result.setdefault("bare", {})
    for name, work in (
            ("bare", lambda: bare(model, out, compiled=False)),
            ("bare_compiled", lambda: bare(model, out, compiled=True)),
            ("profile", lambda: profile(model, out)),
            ("duration", lambda: profile(model, out, metric_set="duration")),
            ("stalls", lambda: profile(model, out, stalls=True)),
            ("sol", lambda: sol_sample(model, out)),
            ("timeline", lambda: timeline(model, out, result["bare"].get("step_ms"))),
            *((("profile_compiled", lambda: profile(model, out, compiled=True)),
               ("profile_compiled_method", lambda: profile(model, out, compiled="method")))
              if compiled_profile else ())):
        if phases is not None and name not in phases:
            continue
        started = time.time()
        result[name] = work()
        print(f"[zoo] {model} {name}: {time.time() - started:.0f}s "
              f"{json.dumps({k: v for k, v in result[name].items() if k != 'text'})[:400]}",
              flush=True)
    eager = result["bare"].get("step_ms")
    comp = result.get("bare_compiled", {}).get("step_ms")
    if eager and comp:
        result["compile_saves_ms"] = eager - comp
    return result


def _cell(value: Any, form: str = "{:.1f}") -> str:
    return "-" if value is None else form.format(value)


def table(records: list[dict[str, Any]]) -> str:
    """docs/zoo.md's table: one row per model record."""
    head = ("| model | set | bare ms (repeats) | compiled ms | profile exit / s | in modules | "
            "above roof | SOL agreement (time) | timeline verdict | busy judged / true | "
            "launch or idle gain / compile saves, ms |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in records:
        bare, prof, sol, tl = (r.get(k) or {} for k in ("bare", "profile", "sol", "timeline"))
        repeats = "/".join(f"{v:.1f}" for v in bare.get("repeats_ms") or [])
        agree = (f"{sol['agree_time_pct']:.1f}% ({sol.get('sampled')})"
                 if sol.get("agree_time_pct") is not None else "-")
        gain = (f"{_cell(tl.get('idle_gain_ms'))} ({tl.get('idle_finding') or 'none'}) / "
                f"{_cell(r.get('compile_saves_ms'))}")
        lines.append(
            f"| {r['model']} | {r.get('set', '-')} | {_cell(bare.get('step_ms'))} ({repeats}) "
            f"| {_cell((r.get('bare_compiled') or {}).get('step_ms'))} "
            f"| {_cell(prof.get('rc'), '{}')} / {_cell(prof.get('wall_s'))} "
            f"| {_cell(prof.get('in_modules_pct'), '{:.1f}%')} "
            f"| {_cell(prof.get('above_roof'), '{}')} | {agree} | {tl.get('verdict') or '-'} "
            f"| {_cell(tl.get('judged_busy_pct'))} / {_cell(tl.get('true_busy_pct'))} "
            f"| {gain} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", nargs="+", type=Path, default=None, metavar="ZOO_JSON",
                        help="print docs/zoo.md's table from these zoo.json files and exit")
    parser.add_argument("--out", type=Path, default=Path("zoo_out"))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--compiled-profile", default="")
    parser.add_argument("--phases", default="", help="only these phases (comma-separated), "
                        "kept beside the model's earlier record in OUT/zoo.json")
    parser.add_argument("--keep-reports", action="store_true",
                        help="keep each fast profile's report, xz-compressed, in OUT")
    args = parser.parse_args()
    if args.table:
        print(table([r for path in args.table for r in json.loads(path.read_text())]))
        return 0
    KEEP["reports"] = args.keep_reports
    phases = set(args.phases.split(",")) if args.phases else None
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "zoo.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else []
    for model in [m for m in args.models.split(",") if m]:
        before = next((r for r in results if r["model"] == model), None)
        result = run_model(model, args.out, model in args.compiled_profile.split(","), phases,
                           before)
        results = [r for r in results if r["model"] != model] + [result]
        results_path.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
