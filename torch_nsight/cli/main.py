"""``torch-nsight``: entry point, logging set-up and error handling for every subcommand.

Errors: a :class:`~torch_nsight.errors.TorchNsightError` (an unreadable report, a refused
option, an existing output...) is the user's to fix: one line on stderr, exit status 1, its
traceback only with ``-vv``. Any other exception is a bug in torch_nsight: it is not caught,
so Python prints its full traceback (exit status 1) whatever the verbosity. argparse's usage
errors exit 2. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import gc
import logging
import sys
from collections.abc import Sequence

from torch_nsight.cli import (
    compare,
    demo,
    doctor,
    findings,
    profile_script,
    report,
    sweep,
    timeline,
)
from torch_nsight.cli.text import log_handler
from torch_nsight.errors import TorchNsightError

PROG = "torch-nsight"
SUBCOMMANDS = (report, findings, compare, profile_script, sweep, timeline, demo, doctor)
logger = logging.getLogger("torch_nsight.cli")


def _verbosity(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # The subcommands' -v must not reset a count given before the subcommand.
    parser.add_argument("-v", "--verbose", action="count",
                        default=0 if top else argparse.SUPPRESS,
                        help="more log output (-v: info, -vv: debug and tracebacks)")


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every subcommand attached.

    Returns:
        The top-level parser.
    """
    from torch_nsight.version import __version__

    parser = argparse.ArgumentParser(
        prog=PROG, description="Make Nsight Compute reports speak PyTorch: hotspots, module "
        "tree and roofline per module.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _verbosity(parser, top=True)
    # (not ``command``: profile's own argument is the user's command)
    subparsers = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        sub = module.add_parser(subparsers)
        _verbosity(sub, top=False)
        sub.set_defaults(run=module.run)
    return parser


def _configure_logging(verbose: int) -> None:
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, handlers=[log_handler()])
    logging.getLogger("torch_nsight").setLevel(level)
    logging.getLogger("matplotlib").setLevel(max(level, logging.WARNING))


#: Errors of the file system that say where, not what is wrong with torch_nsight.
_FILE_SYSTEM_ERRORS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC,
                                 errno.EDQUOT})


def _skip_collection_at_exit() -> None:
    """Freeze the collector's objects when the interpreter exits: it would otherwise walk
    every object of pandas and numpy several times over while tearing the modules down
    (0.2-0.4 s after ``report``, a tenth of reading a large trace), to free memory that
    the ending process gives back anyway. Only for a process that is the command line
    (:func:`entry`): objects in reference cycles are then left to the ending process, which a
    caller of :func:`main` (a notebook, a test) must not get."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: arguments without the program name; None reads ``sys.argv``.

    Returns:
        The exit status: 0 on success, 1 for a :class:`TorchNsightError` (one line on
        stderr, a traceback only with ``-vv``), 130 when interrupted.

    Raises:
        SystemExit: 2 for a usage error found by argparse (0 for ``--help``).
        Exception: any other exception, a bug, propagates with its traceback.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return int(args.run(args))
    except TorchNsightError as err:
        if args.verbose >= 2:
            logger.exception("%s failed", args.subcommand)
        from torch_nsight.render.readable_numbers import printable

        message = printable(" ".join(str(err).split())) or type(err).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)  # one line: a script greps it
        return 1
    except OSError as err:  # a folder one may not write, a full disk: not a bug
        if not isinstance(err, PermissionError) and err.errno not in _FILE_SYSTEM_ERRORS:
            raise
        if args.verbose >= 2:
            logger.exception("%s failed", args.subcommand)
        print(f"{PROG}: error: {err.filename or 'a file'}: {err.strerror} (check its "
              "permissions, or pass --out a folder you can write)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _fewer_full_collections() -> None:
    """Run the collector's full passes a hundred times less often in the command's
    process: each walks every object alive (pandas' and numpy's modules, a large trace's
    tables: 80,000-140,000 objects), and reading a 300,000-event trace ran five of them,
    0.13 s, where the younger generations, still collected as usual, hold the short-lived
    cycles. Only for a process that is the command line (:func:`entry`), which ends when
    the command does (a caller of :func:`main` keeps its own settings)."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1000)


def entry() -> int:
    """The ``torch-nsight`` and ``python -m torch_nsight`` process: :func:`main` with rare
    full collections, then no garbage collection while the interpreter exits."""
    _fewer_full_collections()
    _skip_collection_at_exit()
    return main()


if __name__ == "__main__":
    raise SystemExit(entry())
