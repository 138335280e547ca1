"""Argument types the commands share (argparse ``type=`` callables and parsers); importing it
imports neither torch nor pandas."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from torch_nsight.cli.outputs import UsageError


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum`` (anything else is a usage error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        return value
    return parse


def parse_target(text: str, option: str) -> Any:
    """A model or inputs target (``package.module:name``, ``path/to/file.py:name``) from
    ``option``; a bad one is a usage error naming it."""
    from torch_nsight.collect.shared.job import Target

    try:
        return Target(text, role=option)
    except ValueError as err:
        raise UsageError(str(err)) from None
