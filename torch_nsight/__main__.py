"""``python -m torch_nsight``: the same command line as ``torch-nsight``."""

from __future__ import annotations

from torch_nsight.cli.main import entry

if __name__ == "__main__":
    raise SystemExit(entry())
