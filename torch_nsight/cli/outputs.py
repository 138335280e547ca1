"""What the subcommands share: the CLI's own errors, and output files checked before any work.

The command line turns a :class:`~torch_nsight.errors.TorchNsightError` into one line and
exit status 1; the errors here are the CLI's share of them: a value it refuses
(:class:`UsageError`), an output that exists (:class:`OutputExistsError`) and an output that
cannot be written (:class:`OutputWriteError`). Any other exception is a bug and keeps its
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from torch_nsight.errors import OutputWriteError, TorchNsightError
from torch_nsight.files import write_error

__all__ = ["UsageError", "OutputExistsError", "OutputWriteError", "description", "add_force",
           "check_outputs", "check_out_folder", "check_out_files", "writing"]


class UsageError(TorchNsightError):
    """A command-line value is refused: a wrong suffix, a missing folder, an unknown shape."""


class OutputExistsError(UsageError):
    """An output file exists and ``--force`` was not given."""


def description(doc: str | None) -> str | None:
    """A subcommand's ``--help`` description: the first line of its module docstring as
    plain text (``:func:`torch_nsight.sweep``` reads ``torch_nsight.sweep``, no backquotes)."""
    if not doc:
        return None
    line = re.sub(r":\w+:`~?([^`]*)`", r"\1", doc.strip().splitlines()[0])
    return line.replace("``", "")


def add_force(parser: argparse.ArgumentParser) -> None:
    """Add ``--force`` (overwrite existing outputs) to a subcommand's parser.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("--force", action="store_true",
                        help="overwrite output files that already exist")


def check_outputs(paths: Iterable[Path | None], force: bool,
                  inputs: Iterable[Path] = ()) -> None:
    """Refuse, before any work, to overwrite an input (even with ``force``), or existing
    outputs unless ``force``.

    Args:
        paths: the outputs (None entries are skipped).
        force: overwrite anyway.
        inputs: the files and folders the command reads: an output may not be one of them,
            nor a file that exists inside one (a sweep's manifest, a report).

    Raises:
        UsageError: two outputs are one file, an output is an input, a folder, or its folder
            does not exist or is not writable.
        OutputExistsError: some outputs exist and ``force`` is False.
    """
    chosen = [p for p in paths if p is not None]
    seen: set[Path] = set()
    for path in chosen:  # the second written would replace the first
        if path.resolve() in seen:
            raise UsageError(f"{path}: named for two outputs of this command; give each "
                             "output its own file")
        seen.add(path.resolve())
    clobbered = [str(p) for p in chosen if _overwrites_input(p, list(inputs))]
    if clobbered:
        raise UsageError(f"{', '.join(clobbered)}: is an input of this command (or a file "
                         "in an input folder); --force never writes over what it reads: "
                         "name another output file")
    folders = [str(p) for p in chosen if p.is_dir()]
    if folders:
        raise UsageError(f"{', '.join(folders)}: is a folder; name a file to write")
    existing = [str(p) for p in chosen if p.exists()]
    if existing and not force:
        verb = "exists" if len(existing) == 1 else "exist"
        raise OutputExistsError(f"{', '.join(existing)} already {verb}; pass --force to "
                                "overwrite")
    missing = sorted({str(p.parent) for p in chosen if not p.parent.is_dir()})
    if missing:
        raise UsageError(f"output folder {', '.join(missing)} does not exist; create it "
                         "first")
    # every output checked before the first is written: none written when one cannot be
    closed = sorted({str(p.parent) for p in chosen
                     if not os.access(p.parent, os.W_OK | os.X_OK)})
    if closed:
        raise UsageError(f"output folder {', '.join(closed)} is not writable; choose "
                         "another or fix its permissions")


def _overwrites_input(output: Path, inputs: list[Path]) -> bool:
    """Whether writing ``output`` would replace an input, or a file inside an input folder
    (links followed)."""
    target = output.resolve()
    for source in inputs:
        if not source.exists():
            continue
        if source.is_dir():
            if output.exists() and target.is_relative_to(source.resolve()):
                return True
        elif target == source.resolve():
            return True
    return False


def check_out_folder(out: Path, option: str = "--out", *, writable: bool = False) -> None:
    """Refuse, before any work, an output folder that cannot be made: a file is in its place
    or on its path; with ``writable``, also one whose nearest existing folder cannot be
    written (a dry run, which makes nothing, checks this the way the run will).

    Args:
        out: the folder (it need not exist yet; it is created if missing).
        option: the option that named it, for the message.
        writable: also try a file in the nearest folder that exists on its path.

    Raises:
        UsageError: ``out`` or a folder on its path is a file.
        OutputWriteError: with ``writable``, the folder cannot be written.
    """
    existing = next((folder for folder in (out, *out.parents)
                     if folder.exists() or folder.is_symlink()), None)
    if existing is None:
        return
    if not existing.is_dir():
        where = "" if existing == out else f" cannot be made: {existing}"
        raise UsageError(f"{option} {out}{where} is a file, not a folder; name a folder (it "
                         "is created if missing)")
    if not writable:
        return
    import tempfile

    try:  # as the run will: a file in it (permissions, a read-only or special file system)
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        what = "it" if existing == out else f"{existing}, where it would be made,"
        raise OutputWriteError(f"{option} {out}: {what} cannot be written "
                               f"({err.strerror}): pass {option} a folder you can write"
                               ) from None


def check_out_files(out: Path, written: Iterable[str], force: bool,
                    option: str = "--out") -> None:
    """Refuse, before any work, an output folder that holds a file the command writes,
    replaces or removes there, unless ``force``; files it never writes do not count.

    Args:
        out: the output folder (it need not exist).
        written: those files (or folders), relative to ``out``; glob patterns allowed.
        force: overwrite anyway.
        option: the option that named the folder, for the message.

    Raises:
        OutputExistsError: some exist and ``force`` is False.
    """
    if force or not out.is_dir():
        return
    held = sorted({path.relative_to(out).as_posix() for pattern in written
                   for path in out.glob(pattern)})
    if held:
        shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
        raise OutputExistsError(f"{out} already holds {shown}; pass --force to overwrite, "
                                f"or another {option}")


def kept_nothing(manifest: Path, worked: Callable[[Any], bool]) -> bool:
    """Whether ``manifest`` (a sweep's or a timeline's) records a run that kept nothing,
    ``worked`` being False of it (every shape failed, or a dry run): that run's folder is
    replaced without ``--force``, a failed run never blocking the next. A missing or
    unreadable manifest is not such a record."""
    import json

    try:
        return not worked(json.loads(manifest.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


@contextlib.contextmanager
def writing(path: Path) -> Iterator[Path]:
    """Turn a failure to write ``path`` into :class:`OutputWriteError`.

    Args:
        path: the output about to be written.

    Yields:
        ``path``.

    Raises:
        OutputWriteError: writing raised :class:`OSError`.
    """
    try:
        yield path
    except OSError as err:
        raise write_error(path, err) from err
