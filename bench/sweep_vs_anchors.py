"""torch_nsight.sweep against its anchors, side by side in one run (on a GPU with ncu).

    PYTHONPATH=$PWD python bench/sweep_vs_anchors.py [--skip-gpt2] [--out DIR]

(a) Llama-style block (hidden 1024, bf16, batch 1), seq 256/1024/4096, forward: our sweep
    with the default metric set (every kernel, roofline metrics) against nsight-python 0.9.6
    timing only the five projection GEMMs (bench/anchor_nsight_python.py, duration only,
    3 runs).
(b) GPT-2-small-sized forward (12 layers, d=768, bs 4, seq 1024, bf16): our sweep (default
    metric set, identical layers replicated) against a plain
    ``ncu --nvtx --section SpeedOfLight`` run of the same instrumented forward
    (examples/profile_by_hand.py). Replicated durations are compared with the ones the plain
    run measured directly for the same module and kernel.
(c) a real model from a public library: Hugging Face GPT-2 small forward (bs 4, seq 1024,
    bf16, random weights; bench/real_model.py), the model handed to sweep() as a new user
    would: each metric set asked for (--real-sets), against the bare script (no profiler,
    twice) and plain ``ncu --nvtx --section SpeedOfLight`` of the instrumented script (every
    kernel). Where the sweep's time went comes from its own phase stamps (summary.json).

Every wall time is a whole process, timed from outside as a user would experience it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA_SHAPES = [(1, 256, 1024), (1, 1024, 1024), (1, 4096, 1024)]


def timed(cmd: list[str], log: Path, tree: Path = ROOT) -> tuple[float, int]:
    """Run ``cmd`` as a whole process with torch_nsight imported from ``tree``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        dict.fromkeys([str(tree), str(ROOT), os.environ.get("PYTHONPATH", "")])))
    start = time.perf_counter()
    with open(log, "w") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    return time.perf_counter() - start, rc


def ours_llama(out: Path, metric_set: str = "roofline") -> None:
    import torch_nsight
    from examples.models import LlamaBlock

    profile = torch_nsight.sweep(LlamaBlock, LLAMA_SHAPES, dtype="bf16", output_dir=out,
                                 metric_set=metric_set, quiet=True)
    k = profile.kernels
    summary = {"kernels": len(k), "profiled": int(k.get("replicated_from").isna().sum())
               if "replicated_from" in k else len(k),
               "with_flops": int(k["flops"].notna().sum()), "with_bound": int(k["bound"].notna().sum()),
               "with_roof": int(k["pct_of_roof"].notna().sum()),
               "flops_basis": k["flops_basis"].value_counts().to_dict()
               if "flops_basis" in k else {},
               "unattributed": int((k["module"] == "(unattributed)").sum()),
               "failures": profile.failures, "timing": profile.meta.sweeps[0].timing}
    (out / "summary.json").write_text(json.dumps(summary))


def gpt2_inputs(shape):
    import torch

    return torch.randint(0, 50257, tuple(shape))


def ours_gpt2(out: Path) -> None:
    import torch_nsight
    from examples.models import GPT2Small

    profile = torch_nsight.sweep(GPT2Small, [(4, 1024)], make_inputs=gpt2_inputs, dtype="bf16",
                                 output_dir=out, quiet=True)
    profile.kernels.to_parquet(out / "ours_kernels.parquet")


def compare_gpt2(ours_dir: Path, plain_report: Path) -> dict:
    import pandas as pd

    import torch_nsight

    ours = pd.read_parquet(ours_dir / "ours_kernels.parquet")
    plain = (pd.read_parquet(plain_report) if plain_report.suffix == ".parquet"
             else torch_nsight.load(plain_report).kernels)
    key = ["module", "direction", "kernel"]
    for frame in (ours, plain):
        frame["nth"] = frame.groupby(key).cumcount()
    merged = ours.merge(plain[key + ["nth", "duration_ns"]], on=key + ["nth"],
                        suffixes=("", "_direct"))
    copied = merged[merged["replicated_from"].notna()] if "replicated_from" in merged else merged[:0]
    err = (copied["duration_ns"] / copied["duration_ns_direct"] - 1).abs() * 100
    return {"our_rows": len(ours), "plain_rows": len(plain),
            "ours_profiled": int(ours["replicated_from"].isna().sum()),
            "ours_unattributed": int((ours["module"] == "(unattributed)").sum()),
            "replicated_rows_matched": len(copied),
            "replicated_err_pct_median": float(err.median()) if len(err) else None,
            "replicated_err_pct_p90": float(err.quantile(0.9)) if len(err) else None,
            "replicated_within_5pct": float((err <= 5).mean()) if len(err) else None,
            "module_total_err_pct": module_total_error(ours, plain)}


def module_total_error(ours, plain) -> float:
    a = ours.groupby("module")["duration_ns"].sum()
    b = plain.groupby("module")["duration_ns"].sum()
    both = a.index.intersection(b.index)
    return float(((a[both] / b[both] - 1).abs() * 100).median())


def real_model(out: Path, ncu: str, sets: list[str], baseline: Path | None,
               direct: str | None) -> list[dict]:
    """Case (c): bare twice, our sweep per metric set (the baseline tree's first, if given),
    then plain ncu; same run."""
    script = [sys.executable, "bench/real_model.py"]
    bare = [timed(script + ["bare"], out / f"real_bare{i}.log") for i in range(3)]
    rows = []
    trees = ([("baseline", baseline)] if baseline else []) + [("", ROOT)]
    for (tag, tree), name in ((t, n) for t in trees for n in sets):
        label = f"{tag}-{name}" if tag else name
        where = out / f"real-{label}"
        t_ours, rc = timed(script + ["sweep", "--metric-set", name, "--out", str(where)],
                           out / f"real_{label}.log", tree)
        summary = json.loads((where / "summary.json").read_text()) if rc == 0 else {}
        rows.append({"case": f"(c) HF GPT-2 small forward, bs 4, seq 1024, metric_set={name!r}"
                             + (f" [{tag}: {tree}]" if tag else ""), "label": label,
                     "torch_nsight_s": round(t_ours, 1), "rc": rc, "torch_nsight": summary,
                     "bare_s": [round(t, 1) for t, _ in bare],
                     "bare_rc": [code for _, code in bare]})
    if direct:  # the same metric set, every layer measured: what replication should match
        where = out / f"real-direct-{direct}"
        t_direct, rc = timed(script + ["sweep", "--metric-set", direct, "--no-replicate",
                                       "--out", str(where)], out / f"real_direct_{direct}.log")
        for row in rows:
            if row["label"] == direct and rc == 0 and row["rc"] == 0:
                row["direct_s"] = round(t_direct, 1)
                row["accuracy_same_set"] = compare_gpt2(out / f"real-{direct}",
                                                        where / "ours_kernels.parquet")
    plain_report = out / "real_plain.ncu-rep"
    t_plain, rc2 = timed([ncu, "--clock-control", "none", "--nvtx", "--nvtx-include",
                          "torch_nsight@measure", "--section", "SpeedOfLight", "-f", "-o",
                          str(plain_report)] + script + ["hand"], out / "real_plain.log")
    for row in rows:
        row.update(anchor="ncu --nvtx --section SpeedOfLight (every kernel)",
                   anchor_s=round(t_plain, 1), anchor_rc=rc2)
        if row["rc"] == 0 and rc2 == 0:
            row["accuracy"] = compare_gpt2(out / f"real-{row['label']}", plain_report)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench_out"))
    parser.add_argument("--skip-gpt2", action="store_true")
    parser.add_argument("--skip-llama", action="store_true")
    parser.add_argument("--fast-only", action="store_true",
                        help="case (a) with metric_set='fast' against the anchor, nothing else")
    parser.add_argument("--real-sets", default="",
                        help="case (c): comma-separated metric sets to run (none: skipped)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="case (c): also run this torch_nsight tree's sweep first (before)")
    parser.add_argument("--real-direct", default=None, metavar="SET",
                        help="case (c): also sweep every layer with this set (no replication)"
                             " and compare the replicated rows with it")
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = args.out.resolve()
    if args.mode == "ours-llama":
        ours_llama(out / "llama")
        return 0
    if args.mode == "ours-llama-lean":
        ours_llama(out / "llama-lean", metric_set="lean")
        return 0
    if args.mode == "ours-llama-fast":
        ours_llama(out / "llama-fast", metric_set="fast")
        return 0
    if args.mode == "ours-gpt2":
        ours_gpt2(out / "gpt2")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve()), "--out", str(out)]
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    rows = []
    if args.fast_only:
        t_cold, rc0 = timed(me + ["--mode", "ours-llama-fast"], out / "ours_llama_fast0.log")
        cold = (json.loads((out / "llama-fast" / "summary.json").read_text()) if rc0 == 0
                else {})
        t_fast, rc = timed(me + ["--mode", "ours-llama-fast"], out / "ours_llama_fast.log")
        fast = (json.loads((out / "llama-fast" / "summary.json").read_text()) if rc == 0
                else {})
        rows.append({"case": "(a'') first sweep on this machine (ncu's metric list not cached "
                             "yet)", "torch_nsight_s": round(t_cold, 1), "rc": rc0,
                     "torch_nsight": cold})
        t_anchor, rc2 = timed([sys.executable, "bench/anchor_nsight_python.py"],
                              out / "anchor_nsight_python.log")
        rows.append({"case": "(a'') Llama block, metric_set='fast' (durations, DRAM bytes, "
                             "clocks; FLOPs from the calls table)",
                     "torch_nsight_s": round(t_fast, 1), "rc": rc, "torch_nsight": fast,
                     "anchor": "nsight-python 0.9.6, 5 GEMMs x 3 runs",
                     "anchor_s": round(t_anchor, 1), "anchor_rc": rc2})
        args.skip_llama = args.skip_gpt2 = True
    if not args.skip_llama:
        t_ours, rc = timed(me + ["--mode", "ours-llama"], out / "ours_llama.log")
        summary = json.loads((out / "llama" / "summary.json").read_text()) if rc == 0 else {}
        t_lean, rc3 = timed(me + ["--mode", "ours-llama-lean"], out / "ours_llama_lean.log")
        lean = (json.loads((out / "llama-lean" / "summary.json").read_text()) if rc3 == 0
                else {})
        rows.append({"case": "(a') same, metric_set='lean' (no SOL %: roofline from FLOPs and "
                             "bytes, fewer replay passes)", "torch_nsight_s": round(t_lean, 1),
                     "rc": rc3, "torch_nsight": lean})
        t_anchor, rc2 = timed([sys.executable, "bench/anchor_nsight_python.py"],
                              out / "anchor_nsight_python.log")
        rows.append({"case": "(a) Llama block, seq 256/1024/4096, fwd",
                     "torch_nsight_s": round(t_ours, 1), "rc": rc,
                     "torch_nsight": summary, "anchor": "nsight-python 0.9.6, 5 GEMMs x 3 runs",
                     "anchor_s": round(t_anchor, 1), "anchor_rc": rc2})
    if not args.skip_gpt2:
        t_ours, rc = timed(me + ["--mode", "ours-gpt2"], out / "ours_gpt2.log")
        plain_report = out / "gpt2_plain.ncu-rep"
        t_plain, rc2 = timed([ncu, "--clock-control", "none", "--nvtx", "--nvtx-include",
                              "torch_nsight@measure", "--section", "SpeedOfLight", "-f", "-o",
                              str(plain_report), sys.executable, "examples/profile_by_hand.py",
                              "gpt2", "--batch", "4", "--seq", "1024", "--dtype", "bf16"],
                             out / "plain_gpt2.log")
        detail = compare_gpt2(out / "gpt2", plain_report) if rc == 0 and rc2 == 0 else {}
        rows.append({"case": "(b) GPT-2-small forward, bs 4, seq 1024",
                     "torch_nsight_s": round(t_ours, 1), "rc": rc, "torch_nsight": detail,
                     "anchor": "ncu --nvtx --section SpeedOfLight (every kernel)",
                     "anchor_s": round(t_plain, 1), "anchor_rc": rc2})
    if args.real_sets:
        rows.extend(real_model(out, ncu, args.real_sets.split(","),
                               args.baseline.resolve() if args.baseline else None,
                               args.real_direct))
    print(json.dumps(rows, indent=1))
    (out / "sweep_vs_anchors.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
