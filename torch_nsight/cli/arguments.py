"""Argument types the commands share (argparse ``type=`` callables and parsers); importing it
imports neither torch nor pandas."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from torch_nsight.cli.outputs import UsageError
from torch_nsight.environment import Steps
from torch_nsight.errors import StepsError


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


def read_steps(text: str | None, option: str) -> Steps | None:
    """The steps ``option`` (``--steps``, ``--verify-steps``) chooses, parsed from its text
    (None: not given). The one place the command line reads a choice of steps.

    Raises:
        UsageError: not a choice of steps (one line naming the option, what is wrong and
            what is expected).
    """
    if text is None:
        return None
    try:
        return Steps.parse(text)
    except StepsError as err:
        raise UsageError(f"{option}: {err}") from None


def accept_dashed_values(parser: argparse.ArgumentParser) -> None:
    """Let an option's value start with a dash and a digit (``--steps -1:2``), as Python
    3.13's argparse does by itself: older ones take ``-1:2`` for an unknown option and stop
    with "expected one argument", before :func:`read_steps` can say what is wrong."""
    parser._negative_number_matcher = re.compile(r"-\.?\d")
