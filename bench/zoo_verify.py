"""``torch-nsight profile --verify`` on models of the zoo: the top findings' switch fixes
applied in the script and timed on its own steps, predicted against measured (GPU machine).

    PYTHONPATH=/tmp/site:$PWD python bench/zoo_verify.py --out OUT [--models a,b] [--top N]

For each model, ``torch-nsight profile --steps 12:13 --verify --verify-steps 12:28
--verify-top N -- python bench/zoo_app.py MODEL --steps 30`` (the fast default, then one
bare run per fix, the fix switched off and on step by step: ``--pairs`` pairs of steps, 8 by
default), timed from outside. Keeps each command's
output and, per fix tried, the ``verified:`` line (status, predicted and measured gain) in
``OUT/zoo_verify.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "bench" / "zoo_app.py"
#: ``--candidates``: every switch fix that applies to each model, measured on its own steps
#: without a profile (``profile --dry-run --verify --verify-fix ...``), so that the fix that
#: measures largest is known whatever the findings rank first.
CANDIDATES = {
    "mobilenet_v3": ["channels_last", "cudnn_benchmark", "fused_optimizer"],
    "efficientnet_nchw": ["channels_last", "cudnn_benchmark"],
    "gru_lm": ["fused_optimizer", "cudnn_benchmark"],
    "lstm_lm": ["fused_optimizer", "cudnn_benchmark"],
    "sage": ["fused_optimizer"],
    "gat": ["fused_optimizer"],
    "wav2vec2": ["fused_optimizer", "cudnn_benchmark"],
    "regnet_y": ["channels_last", "cudnn_benchmark", "fused_optimizer"],
    "swin_t": ["fused_optimizer", "channels_last", "cudnn_benchmark"],
    "deeplab": ["channels_last", "cudnn_benchmark", "fused_optimizer"],
    "conformer": ["fused_optimizer", "cudnn_benchmark"],
    "mixtral_moe": ["cast@model.layers.*.mlp.experts", "tf32", "fused_optimizer"],
    "qwen2_moe": ["cast@model.layers.*.mlp.experts", "tf32", "fused_optimizer"],
    "gin": ["fused_optimizer", "cudnn_benchmark"],
    "shufflenet": ["channels_last", "cudnn_benchmark", "fused_optimizer"],
    "llama_train": ["fused_optimizer"],
    "gpt_neox": ["fused_optimizer", "compile"],
    "densenet121": ["channels_last", "cudnn_benchmark", "fused_optimizer"],
    "distilbert": ["fused_optimizer", "compile"],
    "olmoe": ["cast@model.layers.*.mlp.experts", "compile"],
    "deepseek_v3": ["cast@model.layers.*.mlp.experts", "compile"],
    "resnext50": ["channels_last", "cudnn_benchmark", "fused_optimizer"],
    "mnasnet": ["channels_last", "cudnn_benchmark", "fused_optimizer"],
    "r3d_18": ["channels_last", "cudnn_benchmark", "fused_optimizer"],
    "fasterrcnn": ["tf32", "channels_last", "cudnn_benchmark", "fused_optimizer"],
    "mamba": ["fused_optimizer", "compile"],
    "clip": ["fused_optimizer", "compile", "channels_last"],
}


def _profile(model: str, out: Path, name: str, options: list[str], pairs: int
             ) -> dict[str, object]:
    """``torch-nsight profile --steps 12:13 --verify OPTIONS`` of ``model``'s script, timed
    from outside, its output (standard output and error together) written to ``OUT/MODEL_NAME.log`` as it runs."""
    end = 12 + 2 * pairs
    command = [sys.executable, "-m", "torch_nsight", "profile", "--steps", "12:13", "--verify",
               "--verify-steps", f"12:{end}", *options,
               "--", sys.executable, str(APP), model, "--steps", str(end + 2)]
    started = time.time()
    log = out / f"{model}_{name}.log"
    with log.open("w") as sink:  # written as it runs: a run cut off keeps what it printed
        rc = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT, timeout=900).returncode
    text = log.read_text()
    return {"model": model, "rc": rc, "wall_s": round(time.time() - started, 1),
            "verified": [line for line in text.splitlines() if line.startswith("verified:")],
            "table": "\n".join(line for line in text.splitlines()
                               if re.search(r"µs|predicted|measured", line))[-4000:],
            "tail": "\n".join(text.strip().splitlines()[-30:])}


def verify(model: str, out: Path, top: int, pairs: int = 8) -> dict[str, object]:
    """The profile, then the top findings' switch fixes timed on the script's steps."""
    return _profile(model, out, "verify", ["--verify-top", str(top), "--out",
                                           str(out / f"{model}_verify"), "--force"], pairs)


def candidates(model: str, out: Path, pairs: int = 8) -> dict[str, object]:
    """Each of :data:`CANDIDATES`' fixes of ``model`` timed on its steps (no profile)."""
    fixes = [arg for fix in CANDIDATES[model] for arg in ("--verify-fix", fix)]
    return {**_profile(model, out, "candidates", ["--dry-run", *fixes], pairs),
            "fixes": CANDIDATES[model]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("zoo_verify_out"))
    parser.add_argument("--models", default="gpt2,convnext_t,resnet50,llama_decode")
    parser.add_argument("--top", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=8, help="pairs of timed steps per fix")
    parser.add_argument("--candidates", action="store_true",
                        help="time every candidate switch of each model (CANDIDATES) instead")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    for model in args.models.split(","):
        records.append(candidates(model, args.out, args.pairs) if args.candidates
                       else verify(model, args.out, args.top, args.pairs))
        print(json.dumps(records[-1], indent=1), flush=True)
        (args.out / "zoo_verify.json").write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
