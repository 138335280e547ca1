"""Every environment variable torch_nsight reads or writes, and the typed contract between
``torch-nsight profile`` (the parent) and the user's script that it runs.

The command tells the script which steps to profile, where to write, which fixes to switch,
through environment variables. Both sides hold that as one frozen :class:`ScriptEnv`: the
command writes it with :meth:`ScriptEnv.to_env`, the script (:func:`torch_nsight.step`,
:func:`torch_nsight.instrument`) reads it back with :meth:`ScriptEnv.from_env`; strings
exist only at that edge. A choice of steps is a :class:`Steps`, parsed once from the user's
text (:meth:`Steps.parse`: ``--steps``, ``--verify-steps``, or the variable).

Stage-neutral: the command imports it without torch, the script without the command.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from torch_nsight.errors import StepsError
from torch_nsight.verify_exchange import FixSpec, format_fixes, parse_fixes

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["ScriptEnv", "Steps", "SCRIPT_VARIABLES", "STEPS_ENV", "STATUS_ENV",
           "REPLICATE_ENV", "REHEARSAL_ENV", "INSTRUMENT_ENV", "TIMELINE_ENV", "APPLY_ENV",
           "ALTERNATE_ENV", "TIMING_ENV", "CARRY_LAST_ENV", "REPLICATE_OPS_ENV",
           "PROBE_LAUNCHES_ENV", "NCU_ENV", "CACHE_DIR_ENV", "SILENCE_ENV",
           "EARLY_CUDA_ENV", "MAX_EXPANDED_ENV"]

# What ``torch-nsight profile`` tells the script it runs (one field of ScriptEnv each):
#: ``--timeline``: the folder the chosen steps' trace goes to (PyTorch's profiler records
#: them, and the ranges go to that profiler: :mod:`torch_nsight.capture.script.profiler_steps`).
TIMELINE_ENV = "TORCH_NSIGHT_TIMELINE"
#: the steps to profile, or to time (``10:12``, ``10:``).
STEPS_ENV = "TORCH_NSIGHT_STEPS"
#: ``1``: identical siblings are checked on the step before the chosen ones and profiled once.
REPLICATE_ENV = "TORCH_NSIGHT_REPLICATE"
#: the status file the chosen steps write their progress lines to (:mod:`torch_nsight.status`).
STATUS_ENV = "TORCH_NSIGHT_STATUS"
#: ``1``: a rehearsal (``profile --dry-run``): the script runs as under ncu but without it (the
#: steps, the calls table and the sibling check run, nothing is carried), and its steps say
#: what they did in their status lines.
REHEARSAL_ENV = "TORCH_NSIGHT_REHEARSAL"
#: ``1``/``0``: instrument() installs its hooks, or not, whatever else the environment says
#: (``0`` in ``profile --verify``'s bare runs: the step as the user runs it).
INSTRUMENT_ENV = "TORCH_NSIGHT_INSTRUMENT"
#: the fixes instrument() applies (JSON, or the compact form: :mod:`torch_nsight.verify_exchange`).
APPLY_ENV = "TORCH_NSIGHT_APPLY"
#: ``1``: the fixes applied are switched off and on step by step (``switches.fix_on_at``).
ALTERNATE_ENV = "TORCH_NSIGHT_VERIFY_ALTERNATE"
#: the JSON file the chosen steps' times go to (``switches.read_timing`` reads it).
TIMING_ENV = "TORCH_NSIGHT_TIMING"
#: ``1``: ncu profiles the chosen steps' launches by their numbers in a launch list
#: (``profile --replicate-launches``), so the calls table is carried at the last chosen step's
#: end, after every launch ncu numbers, instead of the first's.
CARRY_LAST_ENV = "TORCH_NSIGHT_CARRY_LAST"
#: ``1``: in the first chosen step, an op call that repeats an earlier one (same op, same
#: arguments' shapes, strides, dtypes and alignment) runs inside the ``replica`` range ncu
#: leaves out, and takes that call's rows (:mod:`torch_nsight.capture.replicas.op_calls`).
REPLICATE_OPS_ENV = "TORCH_NSIGHT_REPLICATE_OPS"
#: ``1``: the first step the script enters looks for cuDNN recurrent layers in the instrumented
#: models; where it finds them, it says so and ends the process (under ncu, before any launch is
#: profiled), so that ``profile`` runs it again with its launches replicated
#: (:mod:`torch_nsight.capture.script.recurrent`).
PROBE_LAUNCHES_ENV = "TORCH_NSIGHT_PROBE_LAUNCHES"
#: The variables of :class:`ScriptEnv`, in the order :meth:`ScriptEnv.to_env` writes them.
SCRIPT_VARIABLES = (TIMELINE_ENV, STEPS_ENV, REPLICATE_ENV, STATUS_ENV, REHEARSAL_ENV,
                    INSTRUMENT_ENV, APPLY_ENV, ALTERNATE_ENV, TIMING_ENV, CARRY_LAST_ENV,
                    REPLICATE_OPS_ENV, PROBE_LAUNCHES_ENV)

# The user's settings for torch_nsight's own processes, and the sweep's word to its child:
#: the ``ncu`` executable (:func:`torch_nsight.collect.shared.ncu.find_ncu`).
NCU_ENV = "TORCH_NSIGHT_NCU"
#: the folder for the readers' caches (:mod:`torch_nsight.report.cache`).
CACHE_DIR_ENV = "TORCH_NSIGHT_CACHE_DIR"
#: seconds a child may show no sign of life (:mod:`torch_nsight.collect.parent.launch`).
SILENCE_ENV = "TORCH_NSIGHT_SILENCE_S"
#: ``0``: the sweep's child does not start CUDA while it imports
#: (:mod:`torch_nsight.collect.child.start`).
EARLY_CUDA_ENV = "TORCH_NSIGHT_EARLY_CUDA"
#: the most bytes a compressed report or trace may expand to (``4G``, ``800M``; default
#: 1G): a decompression bomb is refused past it (:mod:`torch_nsight.report.expand`).
MAX_EXPANDED_ENV = "TORCH_NSIGHT_MAX_EXPANDED"
#: ``1``: reports are read in the calling process, not in a reader worker
#: (:mod:`torch_nsight.report.read_worker`).
READ_IN_PROCESS_ENV = "TORCH_NSIGHT_READ_IN_PROCESS"

_FORM = "expected N, A:B or A: (step indices from 0, B excluded)"
_FROM_ZERO = ("step indices start at 0 (torch_nsight.step() numbers the loop's steps 0, 1, "
              "2...); there is no step from the end")


@dataclass(frozen=True)
class Steps:
    """The steps chosen: those :func:`torch_nsight.step` numbers ``first`` to ``stop - 1``,
    or every one from ``first`` on (``stop`` None).

    Written ``A:B`` (``A:`` without an end); :meth:`parse` also reads ``N`` (one step) and
    ``:B`` (from 0).

    Attributes:
        first: the first chosen step's index, from 0.
        stop: the index after the last chosen step, or None: no last step.

    Raises:
        StepsError: ``first < 0`` or ``stop <= first``.
        TypeError: a bound that is not an int.
    """

    first: int
    stop: int | None

    def __post_init__(self) -> None:
        if not _is_int(self.first) or not (self.stop is None or _is_int(self.stop)):
            raise TypeError(f"Steps(first, stop) takes ints (stop may be None), got "
                            f"{self.first!r}, {self.stop!r}")
        _check(self.first, self.stop, str(self))

    @classmethod
    def parse(cls, text: str) -> Steps:
        """Read a choice of steps: ``12`` (one step), ``10:12`` (10 and 11), ``10:`` (10 on),
        ``:12`` (0 to 11).

        Raises:
            StepsError: the text is not of that form, or chooses no step (the message
                quotes it and says what is expected).
        """
        head, sep, tail = text.strip().partition(":")
        if not head and not sep:
            raise StepsError(f"steps {text!r}: {_FORM}")
        try:
            first = int(head) if head else 0
            stop = (int(tail) if tail else None) if sep else first + 1
        except ValueError:
            raise StepsError(f"steps {text!r}: {_FORM}") from None
        _check(first, stop, repr(text))
        return cls(first, stop)

    def __str__(self) -> str:
        return f"{self.first}:{'' if self.stop is None else self.stop}"

    def __contains__(self, index: object) -> bool:
        return (isinstance(index, int) and index >= self.first
                and (self.stop is None or index < self.stop))

    @property
    def count(self) -> int | None:
        """How many steps are chosen (None: no last step)."""
        return None if self.stop is None else self.stop - self.first

    @property
    def last(self) -> int | None:
        """The last chosen step's index (None: no last step)."""
        return None if self.stop is None else self.stop - 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(first: int, stop: int | None, shown: str) -> None:
    if first < 0:
        raise StepsError(f"steps {shown}: {_FROM_ZERO}")
    if stop is not None and stop <= first:
        raise StepsError(f"steps {shown}: need 0 <= A < B (A:B chooses steps A to B-1)")


@dataclass(frozen=True)
class ScriptEnv:
    """What ``torch-nsight profile`` tells the script it runs (every field has its variable,
    named above; a default one is not written).

    Attributes:
        steps: the steps to profile (to time, with ``timing``); None: none chosen.
        status: the file the chosen steps write their status lines to.
        replicate: identical siblings are checked on the step before the chosen ones and
            profiled once.
        rehearsal: ``profile --dry-run``: the script runs as under ncu, without it.
        instrument: True or False: :func:`torch_nsight.instrument` installs its hooks, or
            not, whatever else the environment says; None: it decides (a profiler attached).
        timeline: ``profile --timeline``: the folder the chosen steps' trace goes to.
        fixes: the fixes :func:`torch_nsight.instrument` applies (``profile --verify``).
        alternate: the fixes applied are switched off and on step by step.
        timing: the file the chosen steps' times go to (``profile --verify``).
        carry_last: ncu profiles launches by their numbers in a launch list
            (``profile --replicate-launches``): the calls table is carried at the last
            chosen step's end.
        replicate_ops: repeated op calls of the first chosen step are profiled once.
        probe_launches: the first step entered ends the process where the instrumented
            models hold cuDNN recurrent layers (a rehearsal only says so).
        refused: what :meth:`from_env` left out: (variable, why) for each malformed value
            (not written, not compared).
    """

    steps: Steps | None = None
    status: Path | None = None
    replicate: bool = False
    rehearsal: bool = False
    instrument: bool | None = None
    timeline: Path | None = None
    fixes: tuple[FixSpec, ...] = ()
    alternate: bool = False
    timing: Path | None = None
    carry_last: bool = False
    replicate_ops: bool = False
    probe_launches: bool = False
    refused: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def to_env(self) -> dict[str, str]:
        """The variables to set (in :data:`SCRIPT_VARIABLES`' order; defaults left out).

        Raises:
            ValueError: a fix :func:`~torch_nsight.verify_exchange.check_fix` refuses.
        """
        values = {
            TIMELINE_ENV: None if self.timeline is None else str(self.timeline),
            STEPS_ENV: None if self.steps is None else str(self.steps),
            REPLICATE_ENV: "1" if self.replicate else None,
            STATUS_ENV: None if self.status is None else str(self.status),
            REHEARSAL_ENV: "1" if self.rehearsal else None,
            INSTRUMENT_ENV: None if self.instrument is None else str(int(self.instrument)),
            APPLY_ENV: format_fixes(self.fixes) if self.fixes else None,
            ALTERNATE_ENV: "1" if self.alternate else None,
            TIMING_ENV: None if self.timing is None else str(self.timing),
            CARRY_LAST_ENV: "1" if self.carry_last else None,
            REPLICATE_OPS_ENV: "1" if self.replicate_ops else None,
            PROBE_LAUNCHES_ENV: "1" if self.probe_launches else None,
        }
        return {name: value for name, value in values.items() if value is not None}

    def environment(self, base: Mapping[str, str], *, inherit: bool = True) -> dict[str, str]:
        """The whole environment of a script told this: ``base`` and :meth:`to_env` over it.

        Args:
            base: the environment the command itself runs in.
            inherit: keep what ``base`` sets of :data:`SCRIPT_VARIABLES` and this leaves
                unset (False: a run that must not inherit them, as a bare run from a
                profile's environment).
        """
        kept = base if inherit else {k: v for k, v in base.items()
                                     if k not in SCRIPT_VARIABLES}
        return {**kept, **self.to_env()}

    def shown(self) -> dict[str, str]:
        """The variables to print before a command a user may run by hand (a dry run):
        those that change what is recorded, not the status file (the command's own)."""
        return {k: v for k, v in self.to_env().items() if k != STATUS_ENV}

    def refusal(self, name: str) -> str | None:
        """Why :meth:`from_env` left variable ``name`` out, or None."""
        return next((why for refused, why in self.refused if refused == name), None)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ScriptEnv:
        """Read what the command told this process. Never raises (it runs in the user's
        script): a malformed value is left out, noted in :attr:`refused` and logged (a
        warning, once per process); an empty one counts as unset."""
        refused: list[tuple[str, str]] = []

        def read(name: str, parse: Callable[[str], T], default: T) -> T:
            text = environ.get(name)
            if text is None or not text.strip():
                return default
            try:
                return parse(text)
            except ValueError as err:
                refused.append((name, str(err)))
                if (name, text) not in _WARNED:  # once per process: it is read every step
                    _WARNED.add((name, text))
                    logger.warning("torch_nsight: ignoring %s=%r: %s", name, text, err)
                return default

        return cls(steps=read(STEPS_ENV, Steps.parse, None),
                   status=read(STATUS_ENV, Path, None),
                   replicate=read(REPLICATE_ENV, _flag, False),
                   rehearsal=read(REHEARSAL_ENV, _flag, False),
                   instrument=read(INSTRUMENT_ENV, _switch, None),
                   timeline=read(TIMELINE_ENV, Path, None),
                   fixes=read(APPLY_ENV, lambda text: tuple(parse_fixes(text)), ()),
                   alternate=read(ALTERNATE_ENV, _flag, False),
                   timing=read(TIMING_ENV, Path, None),
                   carry_last=read(CARRY_LAST_ENV, _flag, False),
                   replicate_ops=read(REPLICATE_OPS_ENV, _flag, False),
                   probe_launches=read(PROBE_LAUNCHES_ENV, _flag, False),
                   refused=tuple(refused))


#: The malformed values already logged, (variable, value).
_WARNED: set[tuple[str, str]] = set()
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _flag(text: str) -> bool:
    """``1`` or ``0``."""
    value = text.strip()
    if value not in ("0", "1"):
        raise ValueError("expected 1 or 0")
    return value == "1"


def _switch(text: str) -> bool:
    """``1``/``0``, also ``true``/``false``, ``yes``/``no``, ``on``/``off``."""
    value = text.strip().lower()
    if value not in _TRUE | _FALSE:
        raise ValueError("expected 1 or 0")
    return value in _TRUE
