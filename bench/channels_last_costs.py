"""What going channels-last changes kernel by kernel: the same torchvision EfficientNet-B0
training step (bf16 autocast, fused AdamW) profiled NCHW (``efficientnet_nchw``) and
channels-last (``efficientnet_b0``), both with ``torch-nsight profile --steps 12:13`` (GPU
machine). A calibration model of the zoo: the channels-last gain model is fitted here.

    PYTHONPATH=/tmp/site:$PWD python bench/channels_last_costs.py --out OUT

Writes ``OUT/compare_kernel.txt`` and ``OUT/compare_module.txt`` (``torch-nsight compare``
of the two), each report with its code modules dropped and xz-compressed
(``OUT/<model>.ncu-rep.xz``), and ``OUT/channels_last_costs.json`` (wall times, exits).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("efficientnet_nchw", "efficientnet_b0")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/channels_last_costs")
    record: dict[str, object] = {}
    for model in MODELS:
        started = time.time()
        done = subprocess.run(
            [sys.executable, "-m", "torch_nsight", "profile", "--steps", "12:13", "--out",
             str(work / model), "--force", "--", sys.executable,
             str(ROOT / "bench" / "zoo_app.py"), model, "--steps", "14"],
            capture_output=True, text=True, cwd=ROOT)
        record[model] = {"rc": done.returncode, "wall_s": round(time.time() - started, 1),
                         "tail": "\n".join((done.stdout + done.stderr).splitlines()[-12:])}
        print(json.dumps(record[model], indent=1), flush=True)
    for by in ("kernel", "module"):
        done = subprocess.run(
            [sys.executable, "-m", "torch_nsight", "compare",
             *(str(work / m / "report.ncu-rep") for m in MODELS), "--by", by, "--top", "60"],
            capture_output=True, text=True, cwd=ROOT, env={"COLUMNS": "160", **_env()})
        (args.out / f"compare_{by}.txt").write_text(done.stdout + done.stderr)
    for model in MODELS:
        raw = work / model / "report.ncu-rep"
        stripped = args.out / f"{model}.ncu-rep"
        subprocess.run([sys.executable, str(ROOT / "tests" / "data" / "strip_code_modules.py"),
                        str(raw), str(stripped)], check=False)
        subprocess.run(["xz", "-T4", "-f", str(stripped)], check=False)
    (args.out / "channels_last_costs.json").write_text(json.dumps(record, indent=1))
    return 0


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


if __name__ == "__main__":
    raise SystemExit(main())
