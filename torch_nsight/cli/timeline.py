"""``torch-nsight timeline TARGET --shapes 1x1,8x512``: the cheap first look, no ncu.

:func:`torch_nsight.timeline` from a shell, before the Nsight Compute pass.

TARGET names a zero-argument factory returning the model (``package.module:factory`` or
``path/to/file.py:factory``), imported in this process: the timeline runs here, under
PyTorch's profiler, without ``ncu``. Prints the verdict per shape (GPU-bound, launch-bound,
copy-bound, data-bound) with its evidence and what to try, then the table ``report``
would print; the output directory (``--out``) keeps the Chrome traces (open them in
Perfetto) and reads back with ``torch-nsight report DIR``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from torch_nsight.cli.outputs import (
    UsageError,
    add_force,
    check_out_files,
    check_out_folder,
    check_outputs,
    kept_nothing,
)
from torch_nsight.cli.report import add_table_options, settle_table_options
from torch_nsight.cli.sweep import add_target_options
from torch_nsight.cli.text import say


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``timeline`` subcommand to the top-level ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "timeline", help="the cheap first look: a model's steps under PyTorch's profiler, "
                         "with a verdict per shape",
        description="The cheap first look before Nsight Compute: a model factory's steps "
                    "under PyTorch's profiler (no ncu), kernels attributed to modules, and a "
                    "verdict per shape (GPU-, CPU-, launch-, copy- or data-bound).")
    add_target_options(parser, example="1x1,8x512")
    parser.add_argument("--warmup", type=int, default=3, metavar="N",
                        help="iterations before each timed or profiled series (default 3)")
    parser.add_argument("--runs", type=int, default=5, metavar="N",
                        help="measured iterations per shape, timed and then profiled, each "
                             "a step of the timeline (default 5)")
    parser.add_argument("--ops", action="store_true", help="name functional ops too")
    parser.add_argument("--out", "-o", type=Path, default=Path("torch_nsight_timeline"),
                        metavar="DIR", help="output directory (default: ./torch_nsight_timeline)")
    parser.add_argument("--plot-timeline", type=Path, default=None, metavar="PNG",
                        help="draw each shape's median step to PNG (or .svg); with several "
                             "shapes, one file each, the shape in its name")
    add_table_options(parser)
    add_force(parser)
    return parser


def plot_paths(path: Path, shapes: list[str]) -> dict[str, Path]:
    """One picture per shape: ``PATH`` for one shape, ``STEM-<shape>.SUFFIX`` for several."""
    if len(shapes) <= 1:
        return {shape: path for shape in shapes}
    return {shape: path.with_name(f"{path.stem}-{shape}{path.suffix}") for shape in shapes}


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight timeline``.

    Returns:
        0 (failed shapes are listed on standard error).

    Raises:
        UsageError: bad TARGET, shapes or options.
        OutputExistsError: the output directory holds what a timeline writes there, or a
            plot exists, and ``--force`` was not given.
        TorchNsightError: every shape failed.
    """
    from torch_nsight.cli.arguments import parse_target
    from torch_nsight.cli.sweep import parse_shapes
    from torch_nsight.formats import TIMELINE_MANIFEST, timeline_files

    settle_table_options(args)
    target = parse_target(args.target, "TARGET")
    inputs = parse_target(args.inputs, "--inputs") if args.inputs else None
    shapes = parse_shapes(args.shapes)
    if args.plot_timeline is not None:
        if args.plot_timeline.suffix.lower() not in (".png", ".svg"):
            raise UsageError(f"--plot-timeline needs a file ending in .png or .svg, got "
                             f"{args.plot_timeline}")
        labels = ["x".join(map(str, s)) for s in shapes]
        check_outputs(list(plot_paths(args.plot_timeline, labels).values()), args.force)
    check_out_folder(args.out)
    check_out_files(args.out, timeline_files(len(shapes)), args.force or kept_nothing(
        args.out / TIMELINE_MANIFEST,
        lambda manifest: any(item.get("status") == "ok" for item in manifest["items"])))
    from torch_nsight.cli.report import emit
    from torch_nsight.collect.timeline import timeline

    try:
        profile = timeline(
            target, shapes, make_inputs=inputs, backward=args.backward, dtype=args.dtype,
            warmup=args.warmup, runs=args.runs, ops=args.ops, output_dir=args.out)
    except (TypeError, ValueError) as err:  # timeline()'s own argument checks
        raise UsageError(str(err)) from err
    emit(profile, args)
    if args.plot_timeline is not None and profile.kernels.empty:
        from torch_nsight.render.timeline_plot import NO_GPU_ACTIVITY

        say(f"note: --plot-timeline not drawn: {NO_GPU_ACTIVITY}", sys.stderr)
    elif args.plot_timeline is not None:
        from torch_nsight.cli.outputs import writing
        from torch_nsight.render import plot_timeline

        steps = profile.timeline
        ran = set() if steps is None else set(steps.loc[steps["kind"] == "step", "shape"])
        for shape, path in plot_paths(args.plot_timeline, profile.shapes).items():
            if shape not in ran:  # failed: listed on standard error already
                say(f"note: {path} not drawn: shape {shape} did not run", sys.stderr)
                continue
            with writing(path):
                plot_timeline(profile, path, shape=shape)
            print(f"wrote {path}")
    say(f"timeline: {args.out} (open the trace-*.json.gz in https://ui.perfetto.dev)",
        sys.stderr)
    return 0
