"""Record tests/data/op_replicas/ on a CUDA GPU with ncu (see tests/data/README.md): a training
step whose blocks differ but whose op calls repeat (issue 46: the first chosen step's repeated
op calls left out of ncu's replay, :mod:`torch_nsight.capture.replicas.op_calls`).

    python tests/data/record_op_replicas.py OUT

runs this script's loop (``--train``) under ``torch-nsight profile --steps 3:4`` (the fast
default: repeated op calls left out) and the same with ``--no-replicate`` (every launch
profiled), and keeps in ``OUT``: ``replicated.ncu-rep.xz`` and ``measured.ncu-rep.xz`` (the
reports, code modules dropped by ``strip_code_modules.py``, compressed) and ``timing.json``
(each command's wall time and its last lines).

The loop alone: ``python tests/data/record_op_replicas.py --train [--steps N] [--device cpu]``.

The model, random weights, batch 16, fp32: a stem convolution, four residual blocks of two
classes (``PlainBlock``: conv-BN-ReLU twice; ``GatedBlock``: the same with a sigmoid gate),
all 32 channels at 32x32 (so their convolutions, batch norms and ReLUs repeat across
blocks of different classes, which identical-block replication cannot pair), pooling, and a
head of two ``nn.Linear(256, 256)`` of different parents; SGD with momentum (foreach).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def train(steps: int, device: str = "cuda") -> int:
    """The training loop, as a user writes it."""
    import torch
    from torch import nn

    sys.path.insert(0, str(ROOT))
    import torch_nsight

    def conv_bn(channels: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                             nn.BatchNorm2d(channels), nn.ReLU())

    class PlainBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.one, self.two = conv_bn(32), conv_bn(32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.two(self.one(x))

    class GatedBlock(PlainBlock):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.two(self.one(x))
            return x + y * torch.sigmoid(y.mean(dim=(2, 3), keepdim=True))

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Sequential(nn.Linear(256, 256), nn.GELU())
            self.out = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.proj(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = conv_bn(32)
            self.blocks = nn.Sequential(PlainBlock(), GatedBlock(), PlainBlock(), GatedBlock())
            self.pool = nn.AdaptiveAvgPool2d(4)
            self.head = Head()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.pool(self.blocks(self.stem(x)))
            return self.head(x.flatten(1)[:, :256])

    torch.manual_seed(0)
    model = Net().to(device)
    torch_nsight.instrument(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(16, 32, 32, 32, device=device)
    target = torch.randint(0, 10, (16,), device=device)
    for _ in range(steps):
        with torch_nsight.step():
            loss = nn.functional.cross_entropy(model(x), target)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    print(f"loss {loss.item():.4f}")
    return 0


def _profile(out: Path, name: str, extra: list[str]) -> dict[str, object]:
    folder = out / name
    cmd = [sys.executable, "-m", "torch_nsight", "profile", "--steps", "3:4", *extra,
           "--out", str(folder), "--force", "--", sys.executable, str(Path(__file__).resolve()),
           "--train", "--steps", "5"]
    started = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    wall = round(time.time() - started, 1)
    report = folder / "report.ncu-rep"
    if report.is_file():
        kept = out / f"{name}.ncu-rep"
        subprocess.run([sys.executable, str(HERE / "strip_code_modules.py"), str(report),
                        str(kept)], check=True)
        subprocess.run(["xz", "-9", "-f", str(kept)], check=True)
    return {"rc": done.returncode, "wall_s": wall,
            "tail": (done.stdout + done.stderr).strip().splitlines()[-8:]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.train:
        return train(args.steps, args.device)
    if args.out is None:
        parser.error("OUT is required")
    args.out.mkdir(parents=True, exist_ok=True)
    timing = {"replicated": _profile(args.out, "replicated", []),
              "measured": _profile(args.out, "measured", ["--no-replicate"])}
    (args.out / "timing.json").write_text(json.dumps(timing, indent=1))
    print(json.dumps(timing, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
