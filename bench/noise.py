"""Run-to-run noise on the GPU machine, and the fixtures with runs > 1 (on a GPU with ncu).

    PYTHONPATH=$PWD python bench/noise.py --out DIR [--parts a,b,...]

Parts (each a directory under DIR; one failing part does not stop the others):

* ``gpt2_runs_a``, ``gpt2_runs_b``: Hugging Face GPT-2 small (random weights, vocab padded to
  50304), bf16 forward, batch 4, seq 1024, ``torch_nsight.sweep(..., runs=3)`` with the
  default fast metric set, twice: two profiles of one model, each a separate ncu child.
* ``gpt2_runs_unpadded``: the same with vocab 50257 (cuBLAS falls back to a slow kernel for
  ``lm_head``): a variant that is really slower in one module.
* ``gpt2_runs10``: the padded model with ``runs=10``, for the noise of each kernel site.
* ``timeline_runs``: ``torch_nsight.timeline`` of the padded forward, 20 measured steps.
* ``profile_runs``: ``torch-nsight profile --steps 3:6`` of examples/train_steps.py: three
  training steps under ncu, each a run.

``timing.json`` holds the wall time of each part. The noise figures are computed from the
recorded directories on any machine (``docs/noise.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPE = (4, 1024)
PARTS = ("gpt2_runs_a", "gpt2_runs_b", "gpt2_runs_unpadded", "gpt2_runs10", "timeline_runs",
         "profile_runs")


def gpt2(vocab: int):  # noqa: ANN201 - a transformers model
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab)).eval()


def make_inputs(shape):  # noqa: ANN001, ANN201
    import torch

    return {"input_ids": torch.randint(0, 50257, tuple(shape))}


def run_sweep(out: Path, vocab: int, runs: int) -> None:
    import torch_nsight

    torch_nsight.sweep(gpt2(vocab), [SHAPE], make_inputs=make_inputs, dtype="bf16",
                       output_dir=out, runs=runs, quiet=True)


def run_timeline(out: Path) -> None:
    import torch_nsight

    torch_nsight.timeline(gpt2(50304), [SHAPE], make_inputs=make_inputs, dtype="bf16",
                          warmup=3, runs=20, output_dir=out, quiet=True)


def run_profile(out: Path) -> None:
    cmd = [sys.executable, "-m", "torch_nsight", "profile", "--steps", "3:6", "--out",
           str(out / "report"), "--", sys.executable, "examples/train_steps.py", "--steps", "8"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    with open(out / "profile.log", "w") as log:
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default=",".join(PARTS))
    args = parser.parse_args()
    timing: dict[str, object] = {}
    actions = {
        "gpt2_runs_a": lambda d: run_sweep(d, 50304, 3),
        "gpt2_runs_b": lambda d: run_sweep(d, 50304, 3),
        "gpt2_runs_unpadded": lambda d: run_sweep(d, 50257, 3),
        "gpt2_runs10": lambda d: run_sweep(d, 50304, 10),
        "timeline_runs": run_timeline,
        "profile_runs": run_profile,
    }
    for part in args.parts.split(","):
        out = args.out / part
        out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        try:
            actions[part](out)
            timing[part] = round(time.perf_counter() - start, 2)
        except Exception:  # noqa: BLE001 - the next part still runs
            timing[part] = {"failed": traceback.format_exc()[-2000:]}
        print(part, timing[part], flush=True)
        (args.out / "timing.json").write_text(json.dumps(timing, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
