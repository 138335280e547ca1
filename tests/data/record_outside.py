"""Record tests/data/outside_lstm/ on a CUDA GPU with ncu (see tests/data/README.md): an LSTM
language model's training loop whose loss, GradScaler and gradient clipping run outside the
model, as most loops are written (issue 44: their kernels were ``(unattributed)``).

    python tests/data/record_outside.py OUT

runs this script's loop (``--train``) under ``torch-nsight profile --steps 3:4`` (the fast
default) and ``torch-nsight profile --timeline --steps 3:6``, then keeps, in ``OUT``:

* ``profile.ncu-rep.xz``: step 3 under Nsight Compute, the report's code modules dropped by
  ``strip_code_modules.py``, compressed;
* ``timeline/``: ``timeline.json`` and the trace (``trace*.json.gz``) of steps 3 to 5;
* ``timing.json``: the wall time of each command and what it printed last.

With ``--replicated``, only ``torch-nsight profile --steps 3:4 --replicate-launches`` (issue 46),
kept in ``OUT/replicated/``: ``report.ncu-rep.xz`` (stripped and compressed as above) and
``launches/`` (the launch list's ``timeline.json`` and trace, and ``plan.json``), with
``timing.json``. With ``--replicated --two-steps``, the same of ``--steps 3:5`` in
``OUT/replicated_two_steps/``.

The loop alone (what the two commands run):

    python tests/data/record_outside.py --train [--steps N]

An ``nn.Embedding`` (vocabulary 10,000, not a multiple of 8), a two-layer ``nn.LSTM``
(hidden 512, cuDNN) and a vocabulary head, random weights, batch 16 x seq 64, fp16
autocast; outside the model: ``F.cross_entropy`` on the flattened logits, a
``torch.amp.GradScaler`` (``scale``, ``unscale_``, ``step``, ``update``),
``torch.nn.utils.clip_grad_norm_`` and AdamW (foreach). ``instrument(model)``; each
iteration one ``torch_nsight.step()``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VOCAB, HIDDEN, LAYERS, BATCH, SEQ = 10_000, 512, 2, 16, 64


def train(steps: int, device: str = "cuda") -> int:
    """The training loop, as a user writes it (``device`` "cpu": a check of the script
    where there is no GPU)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    sys.path.insert(0, str(ROOT))
    import torch_nsight

    class LSTMLanguageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, HIDDEN)
            self.lstm = nn.LSTM(HIDDEN, HIDDEN, num_layers=LAYERS, batch_first=True)
            self.head = nn.Linear(HIDDEN, VOCAB)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            hidden, _ = self.lstm(self.embed(tokens))
            return self.head(hidden)

    torch.manual_seed(0)
    model = LSTMLanguageModel().to(device)
    torch_nsight.instrument(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    half = torch.float16 if device == "cuda" else torch.bfloat16  # oneDNN's LSTM: no fp16
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    for _ in range(steps):
        with torch_nsight.step():
            with torch.autocast(device, dtype=half):
                logits = model(inputs)
                loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"outside_lstm done: loss {loss.item():.3f}", flush=True)
    return 0


def _run(command: list[str], log: Path) -> dict[str, object]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}); see {log}")
    return {"command": command, "seconds": round(time.perf_counter() - start, 1),
            "last_lines": (done.stdout + done.stderr).strip().splitlines()[-3:]}


def record(out: Path) -> int:
    """Both commands on this script's loop, their outputs kept as the fixture holds them."""
    out.mkdir(parents=True, exist_ok=True)
    script = str(HERE / "record_outside.py")
    profile = [sys.executable, "-m", "torch_nsight", "profile"]
    timing = {"profile": _run([*profile, "--steps", "3:4", "--out", str(out / "raw_profile"),
                               "--force", "--", sys.executable, script, "--train",
                               "--steps", "5"], out / "profile.log"),
              "timeline": _run([*profile, "--timeline", "--steps", "3:6", "--out",
                                str(out / "timeline"), "--force", "--", sys.executable,
                                script, "--train", "--steps", "7"], out / "timeline.log")}
    report = sorted((out / "raw_profile").glob("*.ncu-rep"))[0]
    stripped = out / "profile.ncu-rep"
    subprocess.run([sys.executable, str(HERE / "strip_code_modules.py"), str(report),
                    str(stripped)], cwd=ROOT, check=True)
    subprocess.run(["xz", "-9", "-f", str(stripped)], check=True)
    shutil.rmtree(out / "raw_profile")
    for left in (out / "timeline").iterdir():  # the fixture keeps the manifest and the trace
        if left.name == "timeline.json" or left.name.startswith("trace"):
            continue
        if left.is_dir():
            shutil.rmtree(left)
        else:
            left.unlink()
    (out / "timing.json").write_text(json.dumps(timing, indent=1) + "\n")
    print(json.dumps(timing, indent=1))
    return 0


def record_replicated(out: Path, *, two_steps: bool = False) -> int:
    """``profile --replicate-launches`` of this script's loop (one step, or two), kept as the
    fixture holds it."""
    raw = out / "raw_replicated"
    script = str(HERE / "record_outside.py")
    steps, loop = ("3:5", "6") if two_steps else ("3:4", "5")
    timing = {"replicated": _run([sys.executable, "-m", "torch_nsight", "profile", "--steps", steps,
                               "--replicate-launches", "--out", str(raw), "--force", "--",
                               sys.executable, script, "--train", "--steps", loop],
                              out / "replicated.log")}
    kept = out / ("replicated_two_steps" if two_steps else "replicated")
    (kept / "launches").mkdir(parents=True, exist_ok=True)
    for name in ("timeline.json", "trace.json.gz", "plan.json"):  # first: the check reads them
        shutil.copy(raw / "launches" / name, kept / "launches" / name)
    subprocess.run([sys.executable, str(HERE / "strip_code_modules.py"),
                    str(raw / "report.ncu-rep"), str(kept / "report.ncu-rep")], cwd=ROOT,
                   check=True)
    subprocess.run(["xz", "-9", "-f", str(kept / "report.ncu-rep")], check=True)
    shutil.rmtree(raw)
    (kept / "timing.json").write_text(json.dumps(timing, indent=1) + "\n")
    print(json.dumps(timing, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="where to record (not with --train)")
    parser.add_argument("--train", action="store_true", help="run the loop itself")
    parser.add_argument("--replicated", action="store_true",
                        help="record only profile --replicate-launches (OUT/replicated)")
    parser.add_argument("--two-steps", action="store_true",
                        help="with --replicated: steps 3 and 4 (OUT/replicated_two_steps)")
    parser.add_argument("--steps", type=int, default=5, help="iterations of the loop")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train:
        return train(args.steps, args.device)
    if args.out is None:
        parser.error("give OUT (record) or --train (the loop)")
    if args.replicated:
        args.out.mkdir(parents=True, exist_ok=True)
        return record_replicated(args.out, two_steps=args.two_steps)
    return record(args.out)


if __name__ == "__main__":
    raise SystemExit(main())
