"""`torch-nsight profile` on real models, timed from outside as a user runs it (GPU machine).

    PYTHONPATH=/tmp/site:$PWD:$NCU_PY python bench/profile_engine.py --out OUT

* **passes**: replay passes per kernel of the fast set (the busy counters included).
* **(a) a timm ViT-S/16 training step** (bs 64, bf16 autocast, fused AdamW, the loop marked
  with ``torch_nsight.step()``, ``instrument(model)``): the bare script, then
  ``profile --steps 5:6`` with the default set and with ``--metric-set duration``; each whole
  process timed from outside. The default report is kept (``vit_profile.ncu-rep.xz``).
* **(b) a report recorded by hand**: Hugging Face GPT-2 small forward (bs 4, seq 1024, bf16,
  vocab 50257), the script only calls ``instrument(model)``; ``ncu --nvtx`` with the fast set,
  no torch_nsight command. Kept as ``gpt2_hand.ncu-rep.xz``.

Writes ``summary.json`` with the wall times, coverage, basis counts and the calls carried.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: The ViT training script; ``depth`` blocks (ViT-S has 12), ``argv[1]`` steps (default 8).
VIT_TEMPLATE = r'''
import sys, torch, timm, torch_nsight
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
model = timm.create_model("vit_small_patch16_224", depth=%(depth)d, num_classes=1000).cuda()
torch_nsight.instrument(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
x = torch.randn(64, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (64,), device="cuda")
for _ in range(steps):
    with torch_nsight.step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
'''
VIT = VIT_TEMPLATE % {"depth": 12}

GPT2 = r'''
import torch, torch_nsight
from transformers import GPT2Config, GPT2LMHeadModel
model = GPT2LMHeadModel(GPT2Config()).cuda().to(torch.bfloat16).eval()
torch_nsight.instrument(model)
ids = torch.randint(0, 50257, (4, 1024), device="cuda")
with torch.no_grad():
    model(input_ids=ids)
torch.cuda.synchronize()
'''

NCU = os.environ.get("TORCH_NSIGHT_NCU", "/usr/local/cuda/bin/ncu")


def timed(cmd: list[str], log: Path, env: dict[str, str] | None = None,
          timeout: float = 400) -> float | None:
    started = time.perf_counter()
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})}
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(6)  # SIGABRT: the fault handler prints where it was
            proc.wait()
            print(f"{' '.join(cmd[:6])}... timed out after {timeout} s", flush=True)
            return None
    seconds = time.perf_counter() - started
    print(f"{' '.join(cmd[:6])}... rc={proc.returncode} {seconds:.1f}s", flush=True)
    return round(seconds, 1)


def describe(path: Path) -> dict:
    import torch_nsight

    profile = torch_nsight.load(path, cache=False)
    k = profile.kernels
    out = {"kernels": len(k), "coverage": profile.coverage,
           "basis": k["basis"].value_counts().to_dict(),
           "flops_basis": k["flops_basis"].value_counts(dropna=False).to_dict()
           if "flops_basis" in k else None,
           "bound_missing": int(k["bound"].isna().sum()),
           "roof_missing": int(k["pct_of_roof"].isna().sum()),
           "calls_rows": 0 if profile.calls is None else len(profile.calls),
           "replicated_rows": int(k["replicated_from"].notna().sum())
           if "replicated_from" in k else 0}
    manifest = Path(path).with_suffix(".run.json")
    if manifest.is_file():
        out["manifest"] = json.loads(manifest.read_text())
    found = profile.findings()
    if len(found):
        out["findings"] = found.head(8)[["module", "finding", "est_gain_ns"]].to_dict("records")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-bare", action="store_true")
    parser.add_argument("--no-hand", action="store_true", help="skip (b)")
    args = parser.parse_args()
    out = args.out
    work = Path("/tmp/profile_engine")
    work.mkdir(exist_ok=True)
    (work / "vit_train.py").write_text(VIT)
    (work / "gpt2_fwd.py").write_text(GPT2)
    py = sys.executable
    summary: dict = {}
    from torch_nsight.metrics import METRIC_SETS

    fast = ",".join(METRIC_SETS["fast"].metrics)
    if not args.no_hand:
        text = subprocess.run([NCU, "--clock-control", "none", "--metrics", fast, py,
                               str(work / "gpt2_fwd.py")], capture_output=True,
                              text=True).stdout
        summary["fast_passes"] = sorted({line.rsplit("- ", 1)[-1]
                                         for line in text.splitlines()
                                         if line.startswith("==PROF== Profiling")})
        print("fast passes", summary["fast_passes"], flush=True)

    if "--no-bare" not in sys.argv:
        summary["vit_bare_s"] = [timed([py, str(work / "vit_train.py")], out / "bare.log")
                                 for _ in range(2)]
    for name, extra in (("vit_profile", []), ("vit_profile_every", ["--no-replicate"]),
                        ("vit_duration", ["--metric-set", "duration"])):
        summary[f"{name}_s"] = timed([py, "-m", "torch_nsight", "profile", "--steps", "5:6",
                                      "--out", str(work / name), "--force", *extra, "--",
                                      py, str(work / "vit_train.py")], out / f"{name}.log",
                                     timeout=240)
        if summary[f"{name}_s"] is None:  # keep the raw report to find out why, on the CPU
            with open(out / f"{name}.raw.ncu-rep.xz", "wb") as packed:
                subprocess.run(["xz", "-T8", "-6", "-c", str(work / name / "report.ncu-rep")],
                               stdout=packed, check=False)
            continue
        try:
            summary[name] = describe(work / name / "report.ncu-rep")
        except Exception as err:  # noqa: BLE001 - keep the report for the CPU
            summary[name] = repr(err)
        print(name, json.dumps(summary[name], default=str)[:1500], flush=True)

    report = work / "gpt2_hand"
    if args.no_hand:
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        _keep(work / "vit_profile" / "report.ncu-rep", out / "vit_profile.ncu-rep.xz", work)
        return 0
    summary["gpt2_hand_s"] = timed([NCU, "--clock-control", "none", "--nvtx", "--metrics", fast,
                                    "-f", "-o", str(report), py, str(work / "gpt2_fwd.py")],
                                   out / "gpt2_hand.log")
    summary["gpt2_hand"] = describe(report.with_suffix(".ncu-rep"))
    print("gpt2_hand", json.dumps(summary["gpt2_hand"], default=str)[:1500], flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    for name, path in (("vit_profile", work / "vit_profile" / "report.ncu-rep"),
                       ("gpt2_hand", report.with_suffix(".ncu-rep"))):
        if summary.get(f"{name}_s") is not None:
            _keep(path, out / f"{name}.ncu-rep.xz", work)
    return 0


def _keep(path: Path, packed_path: Path, work: Path) -> None:
    """The report stripped of code modules and xz-compressed, for the CPU tests."""
    if not path.is_file():
        return
    stripped = work / f"{packed_path.name}.stripped.ncu-rep"
    subprocess.run([sys.executable, "tests/data/strip_code_modules.py", str(path),
                    str(stripped)], check=False)
    with open(packed_path, "wb") as packed:
        subprocess.run(["xz", "-T8", "-9", "-c", str(stripped if stripped.exists() else path)],
                       stdout=packed, check=False)


if __name__ == "__main__":
    raise SystemExit(main())
