"""One width for everything the command line prints: prose lines and log records wrap at
spaces to ``$COLUMNS`` / the terminal / 120 (:func:`torch_nsight.render.fit.terminal_width`),
never inside a word; tables fit themselves (:mod:`torch_nsight.render.fit`); csv, json and
markdown are written whole by their commands, never through here
(:func:`torch_nsight.render.table_output.frame_text`).

Every line said here is escaped first (:func:`~torch_nsight.render.readable_numbers.printable`): a
GPU, module or file name read from a file cannot move the cursor, set the window title,
open a link or reverse the text of the terminal it is printed to.
"""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Sequence
from typing import TextIO

from torch_nsight.render.fit import terminal_width, wrap_text
from torch_nsight.render.readable_numbers import printable

__all__ = ["say", "say_comment", "shell_command", "joined_command", "LogFormatter",
           "log_handler", "LOG_FORMAT"]

#: The tool's own voice for the library's log records: ``warning: ...``, ``note: ...``
#: (the logger's name only at -vv, where it helps to find the line that said it).
LOG_FORMAT = "%(message)s"
_LEVEL_WORDS = {logging.DEBUG: "debug", logging.INFO: "note", logging.WARNING: "warning",
                logging.ERROR: "error", logging.CRITICAL: "error"}


def say(text: str = "", stream: TextIO | None = None) -> None:
    """Print ``text`` escaped (one line: a newline in it shows as ``\\n``) and wrapped to
    the terminal's width (continuation lines indented by two spaces) to ``stream`` (default:
    standard output)."""
    print(wrap_text(printable(text), terminal_width()) if text else text,
          file=stream if stream is not None else sys.stdout)


def say_comment(text: str, stream: TextIO | None = None) -> None:
    """Print ``text`` as shell comment lines (``# ...``, continued by ``#   ...``), wrapped
    to the terminal's width, so that a block of them pastes into a shell as it is."""
    import textwrap

    lines = textwrap.wrap(printable(text.removeprefix("# ")), terminal_width(), initial_indent="# ",
                          subsequent_indent="#   ", break_long_words=False,
                          break_on_hyphens=False) or ["#"]
    print("\n".join(lines), file=stream if stream is not None else sys.stdout)


def shell_command(words: Sequence[str], width: int | None = None, *,
                  quoted: Sequence[str] = ()) -> str:
    """A command line to copy, wrapped to ``width`` (default: the terminal's) with shell
    continuations (`` \\`` at the end of a line, four spaces before the next); a word is
    never cut, one longer than a line gets a line of its own.

    Args:
        words: the command's words, quoted here (:func:`shlex.quote`).
        width: the characters a line may take.
        quoted: words already quoted that come first (``VAR=value`` assignments).

    Returns:
        The lines, joined by ``\\n``; :func:`joined_command` gives the words back.
    """
    width = width or terminal_width()
    lines: list[str] = []
    line = ""
    for word in [*quoted, *(shlex.quote(w) for w in words)]:
        if line and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
        if len(line) + 2 > width and "," in word and not word.startswith("'"):
            # a long list (ncu's --metrics): broken after commas by backslash-newlines,
            # which the shell removes, the next part at the line's start
            *full, line = _split_after_commas(line, width - 1)
            lines += [part + "\\" for part in full]
    lines.append(line)
    return "\n".join(lines)


def _split_after_commas(text: str, limit: int) -> list[str]:
    parts: list[str] = [""]
    for piece in text.split(","):
        piece = piece + ","
        if parts[-1] and len(parts[-1]) + len(piece) > limit:
            parts.append("")
        parts[-1] += piece
    parts[-1] = parts[-1][:-1]  # the last piece has no comma after it
    return parts


def joined_command(text: str) -> str:
    """The command line :func:`shell_command` wrapped, on one line again (as the shell
    reads it: `` \\`` + newline + indent is a space, ``\\`` + newline nothing)."""
    import re

    return re.sub(r" \\\n\s*", " ", text).replace("\\\n", "")


class LogFormatter(logging.Formatter):
    """The CLI's log records as the tool's own lines, wrapped like :func:`say`:
    ``warning: message``, ``note: message`` (info), ``debug: logger: message``."""

    def __init__(self) -> None:
        super().__init__(LOG_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        word = _LEVEL_WORDS.get(record.levelno, record.levelname.lower())
        where = f"{record.name}: " if record.levelno < logging.INFO else ""
        # names quoted from files escaped: no escape codes, no forged lines
        return printable(f"{word}: {where}{super().formatMessage(record)}")

    def format(self, record: logging.LogRecord) -> str:
        return wrap_text(super().format(record), terminal_width())


class _StandardError(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record comes (a test's
    capture, a redirection)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def log_handler() -> logging.Handler:
    """A handler that writes the CLI's log records to standard error, wrapped."""
    handler = _StandardError()
    handler.setFormatter(LogFormatter())
    return handler
