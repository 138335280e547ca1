"""``torch-nsight demo``: profile a Llama block at two shapes, or read the recorded report.

With a CUDA GPU and ``ncu``, the demo runs :func:`torch_nsight.sweep` on
:class:`torch_nsight.demo.llama.LlamaBlock` (bf16, forward and backward) at two sequence
lengths. Without them (or with ``--recorded``) it reads the report of that block recorded on
an H200, which ships inside the package (:func:`torch_nsight.demo.recorded_report`), and
says so. torch is imported only to look for a GPU and to profile.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_nsight.cli.outputs import (
    add_force,
    check_out_files,
    check_out_folder,
    check_outputs,
    description,
)
from torch_nsight.cli.report import add_table_options, emit, settle_table_options
from torch_nsight.cli.text import say
from torch_nsight.errors import NcuNotFoundError, TorchNsightError

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

HIDDEN = 1024
SEQUENCES = (256, 512)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``demo`` subcommand to the top-level ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "demo", help="profile a Llama block (GPU + ncu) or read the bundled recorded report",
        description=description(__doc__))
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="write roofline.png, scaling.png and the table as CSV here "
                             "(created; and, on a GPU, the sweep's reports)")
    parser.add_argument("--recorded", action="store_true",
                        help="read the bundled recorded report even where a GPU and ncu "
                             "are available")
    add_table_options(parser)
    add_force(parser)
    return parser


def why_no_gpu() -> str | None:
    """Return why this machine cannot profile (no CUDA, no ncu), or None if it can.

    Imports torch (and the collect stage): call it only when about to profile live.
    """
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    from torch_nsight.collect.shared.ncu import find_ncu

    try:
        find_ncu()
    except NcuNotFoundError:
        return "Nsight Compute (ncu) was not found"
    return None


def recorded_profile(reason: str) -> Profile:
    """Load the recorded report shipped in the package, telling the user it is a recording.

    Args:
        reason: why nothing is profiled live, for the message.

    Returns:
        The profile.

    Raises:
        TorchNsightError: the report is missing from the installed package.
    """
    from importlib.resources import as_file

    from torch_nsight import demo
    from torch_nsight.loading import load

    resource = demo.recorded_report()
    if not resource.is_file():
        raise TorchNsightError(
            f"{reason}, and the recorded report is missing from the installed package "
            f"({resource}); reinstall torch_nsight, or pass your own report to "
            "`torch-nsight report`.")
    with as_file(resource) as path:
        say(f"{reason}: reading the recorded report {path.name} "
            f"({demo.RECORDED_WHAT}) instead of profiling.", sys.stderr)
        return load(path, cache=False)


def live_profile(out: Path | None) -> Profile:
    """Profile :class:`~torch_nsight.demo.llama.LlamaBlock` at two shapes under ncu.

    Args:
        out: keep the sweep's reports in ``out/sweep``; None keeps nothing.

    Returns:
        The profile.

    Raises:
        TorchNsightError: the sweep failed.
    """
    from torch_nsight.collect.parent.sweep import sweep
    from torch_nsight.demo.llama import LlamaBlock

    shapes = [(1, seq, HIDDEN) for seq in SEQUENCES]
    say(f"profiling LlamaBlock (bf16, fwd+bwd) at shapes {shapes} under ncu...",
        sys.stderr)
    # the demo shows everything: FLOP counters and Nsight Compute's own verdict
    return sweep(LlamaBlock, shapes, dtype="bf16", backward=True,
                              metric_set="roofline",
                              output_dir=out / "sweep" if out is not None else None)


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight demo``.

    Args:
        args: the parsed options.

    Returns:
        0.

    Raises:
        TorchNsightError: ``--out`` is a file, outputs exist without ``--force``, or
            profiling failed.
    """
    settle_table_options(args)
    args.findings = True  # the demo shows what to change, not only where the time goes
    out: Path | None = args.out
    args.csv = out / f"{args.table}.csv" if out is not None else None
    args.parquet = args.json = args.shape = None
    args.roofline = out / "roofline.png" if out is not None else None
    args.scaling = out / "scaling.png" if out is not None else None
    if out is not None:
        check_out_folder(out)
        if out.is_dir():
            check_outputs([args.csv, args.roofline, args.scaling], args.force)
    reason = "--recorded was given" if args.recorded else why_no_gpu()
    if out is not None and not reason:  # a live demo keeps its sweep in out/sweep
        from torch_nsight.formats import sweep_child, sweep_files

        check_out_files(out / "sweep", sweep_files([sweep_child()]), args.force)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    profile = recorded_profile(reason) if reason else live_profile(out)
    emit(profile, args)
    return 0
