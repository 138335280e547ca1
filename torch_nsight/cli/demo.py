"""``torch-nsight demo``: profile a Llama block at two shapes, or read the recorded report.

With a CUDA GPU and ``ncu``, the demo runs :func:`torch_nsight.sweep` on
``examples.models.LlamaBlock`` (bf16, forward and backward) at two sequence lengths. Without
them (or with ``--recorded``) it reads the report recorded on an H200 that the source
repository bundles in ``tests/data``, and says so.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_nsight.cli.outputs import add_force, check_outputs
from torch_nsight.cli.report import add_table_options, emit
from torch_nsight.errors import NcuNotFoundError, TorchNsightError

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

RECORDED = Path("tests", "data", "llama_block_fwd_bwd.ncu-rep.xz")
HIDDEN = 1024
SEQUENCES = (256, 512)


def repo_root() -> Path:
    """Return the folder holding the ``torch_nsight`` package (the repository's root)."""
    return Path(__file__).resolve().parents[2]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``demo`` subcommand.

    Args:
        subparsers: the top-level parser's subparsers.

    Returns:
        The subcommand's parser.
    """
    parser = subparsers.add_parser(
        "demo", help="profile a Llama block (GPU + ncu) or read the bundled recorded report",
        description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="write roofline.png, scaling.png and the table as CSV here "
                             "(and, on a GPU, the sweep's reports)")
    parser.add_argument("--recorded", action="store_true",
                        help="read the bundled recorded report even where a GPU and ncu "
                             "are available")
    add_table_options(parser)
    add_force(parser)
    return parser


def why_no_gpu() -> str | None:
    """Return why this machine cannot profile (no CUDA, no ncu), or None if it can."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    from torch_nsight.collect.ncu import find_ncu

    try:
        find_ncu()
    except NcuNotFoundError:
        return "Nsight Compute (ncu) was not found"
    return None


def recorded_profile(reason: str) -> Profile:
    """Load the bundled recorded report, telling the user that it is a recording.

    Args:
        reason: why nothing is profiled live, for the message.

    Returns:
        The profile.

    Raises:
        TorchNsightError: the report is not there (an install without the repository).
    """
    from torch_nsight.profile import load

    path = repo_root() / RECORDED
    if not path.is_file():
        raise TorchNsightError(
            f"{reason}, and the recorded report {RECORDED} is not here ({path} is missing: "
            "it ships with the source repository, not the wheel). Run the demo on a machine "
            "with a CUDA GPU and ncu, or pass your own report to `torch-nsight report`.")
    print(f"{reason}: reading the recorded report {path} (Llama block, bf16, fwd+bwd, "
          "recorded on an NVIDIA H200) instead of profiling.", file=sys.stderr)
    return load(path, cache=False)


def live_profile(out: Path | None) -> Profile:
    """Profile ``examples.models.LlamaBlock`` at two shapes under ncu.

    Args:
        out: keep the sweep's reports in ``out/sweep``; None keeps nothing.

    Returns:
        The profile.

    Raises:
        TorchNsightError: the examples package is missing, or the sweep failed.
    """
    import torch_nsight

    root = str(repo_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        from examples.models import LlamaBlock
    except ImportError as err:
        raise TorchNsightError(f"the demo model examples.models.LlamaBlock is not importable "
                               f"from {root} ({err}); run from a source checkout") from err
    shapes = [(1, seq, HIDDEN) for seq in SEQUENCES]
    print(f"profiling LlamaBlock (bf16, fwd+bwd) at shapes {shapes} under ncu...",
          file=sys.stderr)
    return torch_nsight.sweep(LlamaBlock, shapes, dtype="bf16", backward=True,
                              output_dir=out / "sweep" if out is not None else None)


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight demo``.

    Args:
        args: the parsed options.

    Returns:
        0.

    Raises:
        TorchNsightError: outputs exist without ``--force``, the recorded report is missing,
            or profiling failed.
        OSError: a file cannot be written.
    """
    out: Path | None = args.out
    args.csv = out / f"{args.table}.csv" if out is not None else None
    args.parquet = args.json = args.shape = None
    args.roofline = out / "roofline.png" if out is not None else None
    args.scaling = out / "scaling.png" if out is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    check_outputs([args.csv, args.roofline, args.scaling], args.force)
    reason = "--recorded was given" if args.recorded else why_no_gpu()
    profile = recorded_profile(reason) if reason else live_profile(out)
    emit(profile, args)
    return 0
