"""What the subcommands share: output files that must not be overwritten silently."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from torch_nsight.errors import TorchNsightError


class OutputExistsError(TorchNsightError):
    """An output file exists and ``--force`` was not given."""


def add_force(parser: argparse.ArgumentParser) -> None:
    """Add ``--force`` (overwrite existing outputs) to a subcommand's parser.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("--force", action="store_true",
                        help="overwrite output files that already exist")


def check_outputs(paths: Iterable[Path | None], force: bool) -> None:
    """Refuse, before any work, to overwrite existing outputs unless ``force``.

    Args:
        paths: the outputs (None entries are skipped).
        force: overwrite anyway.

    Raises:
        OutputExistsError: some outputs exist and ``force`` is False.
        TorchNsightError: an output's folder does not exist.
    """
    chosen = [p for p in paths if p is not None]
    existing = [str(p) for p in chosen if p.exists()]
    if existing and not force:
        verb = "exists" if len(existing) == 1 else "exist"
        raise OutputExistsError(f"{', '.join(existing)} already {verb}; pass --force to "
                                "overwrite")
    missing = sorted({str(p.parent) for p in chosen if not p.parent.is_dir()})
    if missing:
        raise TorchNsightError(f"output folder {', '.join(missing)} does not exist; create "
                               "it first")
