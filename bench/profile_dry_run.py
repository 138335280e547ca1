"""`torch-nsight profile --dry-run` on a real training script, timed from outside (GPU machine).

    PYTHONPATH=/tmp/site:$PWD:$NCU_PY python bench/profile_dry_run.py --out OUT

The timm ViT-S/16 bf16 fused-AdamW loop of ``bench/profile_engine.py`` (500 steps, so that
stopping after the chosen steps shows): the bare script, ``profile --dry-run --steps 5:6``
(the rehearsal without ncu, stopped after step 5) and ``profile --steps 5:6`` (under ncu),
each whole process timed from outside, the last two in the same run. Writes ``summary.json``
with the wall times and what the dry run said.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_engine import NCU, VIT, timed  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    script = out / "vit_train.py"
    script.write_text(VIT)
    cli = [sys.executable, "-m", "torch_nsight", "profile"]
    runs = {
        "bare, 500 steps": [sys.executable, str(script), "500"],
        "bare, 6 steps": [sys.executable, str(script), "6"],
        "profile --dry-run --steps 5:6 (500 steps)": [
            *cli, "--dry-run", "--steps", "5:6", "--", sys.executable, str(script), "500"],
        "profile --steps 5:6 (6 steps)": [
            *cli, "--ncu", NCU, "--out", str(out / "profiled"), "--steps", "5:6", "--",
            sys.executable, str(script), "6"],
    }
    summary: dict[str, object] = {}
    for n, (name, cmd) in enumerate(runs.items()):
        seconds = timed(cmd, out / f"run{n}.log")  # None: timed out
        said = [line for line in (out / f"run{n}.log").read_text().splitlines()
                if line.startswith(("# ", "torch-nsight: error", "time: "))
                and "metrics" not in line]
        summary[name] = {"seconds": seconds, "said": said}
        print(f"{name}: {seconds} s", *said, sep="\n  ", flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
