"""``torch-nsight doctor``: check what profiling needs here, one line per check with its fix.

The checks live in :mod:`torch_nsight.collect.parent.doctor`; this module renders them as
text (``[ ok ]``, ``[FAIL] ... — fix: ...``, ``[skip] ... (needs a GPU)``) or JSON. Exit
status 0 when profiling can work, 1 when a check failed. The checks (and torch, which they
import) are loaded only when the command runs: the CLI's start-up stays small.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch_nsight.cli.outputs import description
from torch_nsight.render.fit import wrap_text

if TYPE_CHECKING:
    from torch_nsight.collect.parent.doctor import CheckResult

# The checks' DEFAULT_TIMEOUT_S, written here so that --help does not import the collect
# stage (a test keeps the two equal).
DEFAULT_TIMEOUT_S = 120.0
MARKS = {"ok": "[ ok ]", "fail": "[FAIL]", "skip": "[skip]"}


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``doctor`` subcommand to the top-level ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "doctor", help="check what profiling needs (GPU, driver, ncu, counter permission, "
        "report reader, NVTX, pyarrow), each with its fix",
        description=description(__doc__))
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text lines (default) or one JSON object for machines")
    parser.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT_S,
                        metavar="SECONDS",
                        help=f"time allowed for profiling the tiny kernel under ncu "
                             f"(default {DEFAULT_TIMEOUT_S:g})")
    return parser


def can_profile(results: Sequence[CheckResult]) -> bool:
    """Whether profiling can work: no check failed."""
    return all(result.status != "fail" for result in results)


def format_line(result: CheckResult) -> str:
    """One check as a text line."""
    line = f"{MARKS[result.status]} {result.detail}"
    return f"{line} — fix: {result.fix}" if result.status == "fail" and result.fix else line


def format_text(results: Sequence[CheckResult], width: int | None = None) -> str:
    """Every check, one line each wrapped to ``width`` (default: the terminal's) under its
    text, then a verdict line."""
    failed = sum(result.status == "fail" for result in results)
    verdict = ("profiling can work here" if not failed else
               f"profiling cannot work here: {failed} check(s) failed. {what_works(results)}")
    indent = " " * (len(MARKS["fail"]) + 1)
    return "\n".join([*(wrap_text(line, width, indent)
                        for line in [*map(format_line, results), verdict])])


def what_works(results: Sequence[CheckResult]) -> str:
    """What the tool still does where profiling cannot work: what reads recorded files, and
    the dry run (recorded Nsight Compute reports need the report reader)."""
    reader = all(r.status == "ok" for r in results if r.name == "reader")
    reports = ("recorded reports (.ncu-rep), saved profiles (.parquet), a sweep's or a "
               "--timeline folder" if reader else
               "saved profiles (.parquet) and --timeline folders (.ncu-rep reports need "
               "ncu_report)")
    demo = "torch-nsight demo --recorded; " if reader else ""
    return (f"What works here: {demo}torch-nsight report and torch-nsight findings on "
            f"{reports}; torch-nsight profile --dry-run (checks a script's command, "
            f"profiles nothing).")


def format_json(results: Sequence[CheckResult]) -> str:
    """Every check as one JSON object: ``{"ok": bool, "checks": [...]}``."""
    checks = [{"name": r.name, "status": r.status, "detail": r.detail, "fix": r.fix,
               "data": r.data} for r in results]
    return json.dumps({"ok": can_profile(results), "checks": checks}, indent=2, default=str)


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight doctor``.

    Args:
        args: the parsed options.

    Returns:
        0 when profiling can work, 1 when a check failed.
    """
    from torch_nsight.collect.parent.doctor import run_checks

    results = run_checks(timeout=args.timeout)
    print(format_json(results) if args.format == "json" else format_text(results))
    return 0 if can_profile(results) else 1
