"""What ``profile --dry-run`` checks of a command without running it: its program is found,
and the script or module it names is there, for the ways a PyTorch script is started::

    python [options] train.py ARGS             the file train.py
    python [options] -m package.module ARGS    the module, found by that interpreter
    torchrun [options] train.py ARGS           the file (with --run-path too)
    torchrun [options] -m package.module ARGS  the module
    torchrun [options] --no-python PROGRAM     the program
    python -m torch.distributed.run [options] train.py ARGS   as torchrun

Each failure is one :class:`UsageError` naming what is missing. What cannot be told without
running the command (code given with ``-c``, an interpreter that does not answer) is left
to the run.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from torch_nsight.cli.outputs import UsageError

__all__ = ["cannot_start", "check_command"]

#: Options of ``python`` that take the next word as their value.
_PYTHON_VALUES = frozenset({"-W", "-X", "-Q", "--check-hash-based-pycs"})
#: Options of torchrun (torch.distributed.run) that take no value; every other option takes
#: one, as the next word or after ``=``.
_TORCHRUN_FLAGS = frozenset({"--standalone", "-m", "--module", "--no-python", "--no_python",
                             "--run-path", "--run_path", "--virtual-local-rank",
                             "--virtual_local_rank", "-h", "--help"})
_TORCHRUN_MODULE = "torch.distributed.run"
#: Finds a module as ``python -m`` would, without importing it or its packages (a
#: package's ``__init__`` is user code): the top level through the import system, each
#: further part in its package's folders. Exit status 3: no such module.
_FIND_MODULE = """\
import importlib.machinery, importlib.util, sys
parts = sys.argv[1].split(".")
spec = importlib.util.find_spec(parts[0])
for part in parts[1:]:
    folders = spec.submodule_search_locations if spec is not None else None
    spec = importlib.machinery.PathFinder.find_spec(part, list(folders)) if folders else None
sys.exit(0 if spec is not None else 3)
"""
_NOT_CHECKED = "the dry run could not check the command"


def cannot_start(command: Sequence[str], err: OSError | None = None) -> UsageError:
    """The error for a command whose program could not be started (not found, or not a file
    that can run): a script given without its interpreter is told to put one first.

    Raises:
        OSError: ``err`` again where it names another file than the program (a file the run
            reads or writes): not the program's start.
    """
    if err is not None and err.filename not in (None, *command[:1]):
        raise err
    if not command or not command[0]:
        return UsageError("the command is empty: give the program to run after --, e.g. "
                          "-- python train.py")
    program = command[0]
    if program.endswith(".py"):
        return UsageError(f"could not start {program}: to run a Python script, put the "
                          f"interpreter first: -- python {shlex.join(command)}")
    return UsageError(f"could not start {program}: not on PATH, or not a file that can run")


def check_command(command: Sequence[str]) -> None:
    """Check, without running it, what a dry run without ``--steps`` can: that the
    command's program is found and that the script, module or program it starts exists.

    Args:
        command: the command, its program first.

    Raises:
        UsageError: the program is not found, or the script, module or program the
            command starts is not there.
    """
    program = command[0]
    found = shutil.which(program)
    if found is None:
        raise UsageError(f"{program}: no such program (not on PATH, not a file that can run): "
                         f"{_NOT_CHECKED}")
    name = Path(program).name
    if name.startswith("python"):
        _check_python(program, command[1:])
    elif name == "torchrun":
        _check_torchrun(_interpreter_of(Path(found)), command[1:])


def _check_python(python: str, words: Sequence[str]) -> None:
    """``python [options] SCRIPT.py`` or ``python [options] -m MODULE [ARGS]``."""
    rest = iter(words)
    for word in rest:
        if word in ("-c", "-"):  # code: nothing to look for
            return
        if word == "-m" or (word.startswith("-m") and not word.startswith("--")):
            module = word[2:] or next(rest, "")
            if module:
                _check_module(python, module)
                if module == _TORCHRUN_MODULE:
                    _check_torchrun(python, list(rest))
            return
        if word in _PYTHON_VALUES:
            next(rest, None)
        elif not word.startswith("-"):
            if word.endswith(".py"):
                _check_file(word)
            return


def _check_torchrun(python: str | None, words: Sequence[str]) -> None:
    """torchrun's options, then its script: a file, or a module with ``-m``, or a program
    with ``--no-python``."""
    options, script = _torchrun_split(words)
    if script is None:
        return
    if {"-m", "--module"} & set(options):
        if python is not None:
            _check_module(python, script)
    elif {"--no-python", "--no_python"} & set(options):
        if shutil.which(script) is None:
            raise UsageError(f"{script}: no such program (torchrun --no-python runs it; not "
                             f"on PATH, not a file that can run): {_NOT_CHECKED}")
    else:
        _check_file(script)


def _torchrun_split(words: Sequence[str]) -> tuple[list[str], str | None]:
    """A torchrun command line's options (their names, without values) and its script
    (None where the words hold none)."""
    options: list[str] = []
    rest = iter(words)
    for word in rest:
        if word == "--":
            return options, next(rest, None)
        if not word.startswith("-") or word == "-":
            return options, word
        options.append(word.split("=", 1)[0])
        attached = "=" in word or (not word.startswith("--") and len(word) > 2)  # -r3
        if word not in _TORCHRUN_FLAGS and not attached:
            next(rest, None)  # its value
    return options, None


def _check_file(script: str) -> None:
    if not Path(script).is_file():
        raise UsageError(f"{script}: no such file (from {Path.cwd()}): {_NOT_CHECKED}")


def _check_module(python: str, module: str) -> None:
    """Ask ``python`` whether it finds ``module`` (from this folder, as ``-m`` does); an
    interpreter that cannot answer leaves the question to the run."""
    try:
        found = subprocess.run([python, "-c", _FIND_MODULE, module], capture_output=True,
                               timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return
    if found.returncode == 3:
        raise UsageError(f"{module}: no such module (for {python}, from {Path.cwd()}): "
                         f"{_NOT_CHECKED}")


def _interpreter_of(program: Path) -> str | None:
    """The Python a console script (torchrun) runs with: its ``#!`` line's, else the
    ``python`` beside it (a version manager's shims), else None."""
    try:
        with program.open("rb") as file:
            first = file.readline(512).decode(errors="replace")
    except OSError:
        first = ""
    if first.startswith("#!"):
        words = first[2:].split()
        if words and Path(words[0]).name.startswith("python") and Path(words[0]).is_file():
            return words[0]
    beside = program.parent / "python"
    return str(beside) if beside.is_file() else None
