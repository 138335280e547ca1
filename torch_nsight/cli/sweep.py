"""``torch-nsight sweep TARGET --shapes 1x512,8x2048``: :func:`torch_nsight.sweep` from a shell.

TARGET names a zero-argument factory returning the model: ``package.module:factory`` or
``path/to/file.py:factory``. The parent never imports it; the profiled child does. Every
``sweep()`` option has a flag; the hotspot table is printed as ``report`` prints it, and the
sweep's output directory (``--out``) reads back with ``torch-nsight report DIR``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from torch_nsight.cli.arguments import parse_target
from torch_nsight.cli.outputs import (
    UsageError,
    add_force,
    check_out_files,
    check_out_folder,
    description,
    kept_nothing,
)
from torch_nsight.cli.profile_script import add_ncu_options, ncu_advice
from torch_nsight.cli.report import add_table_options, settle_table_options
from torch_nsight.cli.text import say
from torch_nsight.errors import NcuNotFoundError

#: Where a sweep writes without --out.
DEFAULT_OUT = "torch_nsight_sweep"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``sweep`` subcommand to the top-level ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "sweep", help="profile a model factory across input shapes under ncu",
        description=description(__doc__))
    add_target_options(parser, example="1x512x1024,4x512x1024")
    parser.add_argument("--warmup", type=int, default=2, metavar="N",
                        help="iterations of each shape before the measured ones, unprofiled "
                             "(default 2)")
    parser.add_argument("--runs", type=int, default=1, metavar="N",
                        help="measured iterations per shape, each kept as a run: tables "
                             "give the spread of their times and compare tells a change "
                             "from noise (default 1)")
    add_ncu_options(parser, None)
    parser.add_argument("--ops", action="store_true", help="name functional ops too")
    parser.add_argument("--no-replicate", action="store_true",
                        help="profile every identical sibling instead of one of each group")
    parser.add_argument("--no-calls", action="store_true",
                        help="skip the calls table (shapes, FLOPs and bytes per op)")
    parser.add_argument("--out", "-o", type=Path, default=None, metavar="DIR",
                        help=f"output directory (default: ./{DEFAULT_OUT}; a --dry-run keeps "
                             "nothing unless given one)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S",
                        help="seconds per shape (default 600)")
    parser.add_argument("--devices", default=None, metavar="I,J",
                        help="GPU indices to spread shapes over, one ncu each")
    parser.add_argument("--focus", type=float, default=None, metavar="SHARE",
                        help="record a timeline first, then run ncu only on the kernels that "
                             "carry this share of GPU time (e.g. 0.9); the rest keep the "
                             "timeline's durations")
    parser.add_argument("--dry-run", action="store_true",
                        help="run the child without ncu (CPU too): check the factory, inputs "
                             "and shapes")
    add_table_options(parser)
    add_force(parser)
    return parser


def add_target_options(parser: argparse.ArgumentParser, *, example: str) -> None:
    """Add what the commands that build a model from a factory share: TARGET, ``--shapes``,
    ``--inputs``, ``--dtype``, ``--backward``.

    Args:
        parser: the subcommand's parser.
        example: a value of ``--shapes`` for the help.
    """
    parser.add_argument("target", metavar="TARGET",
                        help="package.module:factory or path/to/file.py:factory (a "
                             "zero-argument callable returning the nn.Module)")
    parser.add_argument("--shapes", required=True, metavar="SHAPES",
                        help=f"comma-separated input shapes, dimensions joined by x: {example}")
    parser.add_argument("--inputs", default=None, metavar="TARGET",
                        help="make_inputs as package.module:fn or file.py:fn, called with "
                             "each shape (default: torch.randn(shape))")
    parser.add_argument("--dtype", default=None, help="cast the model: bf16, fp16, fp32...")
    parser.add_argument("--backward", action="store_true", help="forward and backward")


def parse_shapes(text: str) -> list[tuple[int, ...]]:
    """``1x512,4x512`` -> ``[(1, 512), (4, 512)]``.

    Raises:
        UsageError: a shape is not ints joined by ``x``.
    """
    shapes = []
    for part in text.split(","):
        part = part.strip()
        try:
            dims = tuple(int(d) for d in part.lower().split("x"))
        except ValueError:
            raise UsageError(f"--shapes: {part!r} is not a shape like 4x512x1024") from None
        if not part or any(d <= 0 for d in dims):
            raise UsageError(f"--shapes: {part!r} is not a shape like 4x512x1024")
        shapes.append(dims)
    return shapes


def written(devices: list[int] | None, focus: float | None) -> list[str]:
    """What a sweep run from the command line writes into its output directory (its
    children: one, or one per chosen GPU; with ``focus``, the timeline pass's folder)."""
    from torch_nsight.formats import FOCUS_FOLDER, sweep_child, sweep_files

    children = [sweep_child(d) for d in devices] if devices else [sweep_child()]
    return [*sweep_files(children), *([FOCUS_FOLDER] if focus is not None else [])]


def _profiled_a_shape(manifest: dict[str, Any]) -> bool:
    """Whether a sweep's manifest records a shape profiled (not a dry run's, not a run whose
    every shape failed)."""
    record = manifest["record"]
    return record["options"].get("profiler") is not None and any(
        isinstance(item, dict) and item.get("status") == "ok" for item in record["items"])


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight sweep``.

    Returns:
        0 (some shapes may have failed: they are listed on standard error); a dry run lists
        every shape with its status (and error) on standard output and returns 1 when one
        failed.

    Raises:
        UsageError: bad TARGET, shapes or options.
        OutputExistsError: the output directory holds what the sweep writes there and
            ``--force`` was not given.
        TorchNsightError: from the sweep (ncu missing, counters not permitted, every shape
            failed...).
    """
    settle_table_options(args)
    target = parse_target(args.target, "TARGET")
    inputs = parse_target(args.inputs, "--inputs") if args.inputs else None
    shapes = parse_shapes(args.shapes)
    devices = None
    if args.devices:
        try:
            devices = [int(d) for d in args.devices.split(",")]
        except ValueError:
            raise UsageError(f"--devices {args.devices!r}: expected indices like 0,1") from None
    out = args.out
    if out is None:  # a dry run keeps nothing unless asked; a sweep writes here
        out = None if args.dry_run else Path(DEFAULT_OUT)
    if out is not None:
        from torch_nsight.formats import SWEEP_MANIFEST

        check_out_folder(out)
        check_out_files(out, written(devices, args.focus), args.force or kept_nothing(
            out / SWEEP_MANIFEST, _profiled_a_shape))
    from torch_nsight.cli.report import emit
    from torch_nsight.collect.parent.sweep import sweep

    try:
        profile = sweep(
            target, shapes, make_inputs=inputs, backward=args.backward, dtype=args.dtype,
            warmup=args.warmup, runs=args.runs, metric_set=args.metric_set,
            ops=args.ops, replicate=not args.no_replicate, record_calls=not args.no_calls,
            output_dir=out, ncu=args.ncu, ncu_args=args.ncu_arg, timeout=args.timeout,
            devices=devices, profiler=None if args.dry_run else "ncu", focus=args.focus)
    except (TypeError, ValueError) as err:  # sweep()'s own argument checks: the user's flags
        raise UsageError(str(err)) from err
    except NcuNotFoundError as err:
        raise ncu_advice(err, "--dry-run checks the job without profiling") from None
    if not args.dry_run:  # a dry run lists every shape with its status on standard output
        for failure in profile.failures:
            say(f"shape {failure['shape']} {failure['status']}: {failure['error']}",
                sys.stderr)
    timing = profile.meta.sweeps[-1].timing if profile.meta.sweeps else None
    if timing:
        from torch_nsight.collect.shared.timing import describe

        say(f"sweep took {describe(timing)}", sys.stderr)
    if args.dry_run:
        for result in profile.results:
            say(f"{result['shape']}: ok (outputs {result.get('outputs')})"
                if result["status"] == "ok" else
                f"{result['shape']}: {result['status']}: {result.get('error')}")
        return 0 if not profile.failures else 1
    emit(profile, args)
    return 0
