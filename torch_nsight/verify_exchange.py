"""Fixes switched on inside the user's script, and the step times it writes back
(``torch-nsight profile --verify``). Stage-neutral: the command writes what the script reads,
and reads what it writes, without torch.

The command sets these variables for the script it runs bare (no ncu; their names and the
typed whole, :class:`~torch_nsight.environment.ScriptEnv`, are in
:mod:`torch_nsight.environment`):

* :data:`~torch_nsight.environment.APPLY_ENV`: the fixes :func:`torch_nsight.instrument`
  applies to the model it is given, before anything else (also when it installs no hooks). JSON, a list of objects
  ``{"fix": KIND, "target": NAME, ...options}`` (:func:`format_fixes`), or by hand the
  compact form ``KIND[@TARGET][:KEY=VALUE,...]``, several joined by ``;``::

      TORCH_NSIGHT_APPLY='pad_linear@lm_head:multiple=64'
      TORCH_NSIGHT_APPLY='tf32;compile@layers.*.mlp:mode=reduce-overhead'

  ``TARGET`` is a module's name as in ``model.named_modules()`` (``""`` or absent: the
  whole model), each dotted part an fnmatch glob (``layers.*.mlp`` matches
  ``layers.3.mlp``, not ``layers.3.x.mlp``).
* :data:`~torch_nsight.environment.ALTERNATE_ENV` (``1``): the fixes applied are switched
  off and on at every step boundary, in the ABBA order :func:`fix_on_at` gives (off, on, on, off, off, on, on, off
  ..., counted from the first timed step, over the warm-up too), so that each pair of
  timed steps (first, second; third, fourth; ...) holds one step with the fix and one
  without, and a linear drift of the step time weighs on both alike.
* :data:`~torch_nsight.environment.TIMING_ENV`: the JSON file the chosen steps' times go to
  (:mod:`torch_nsight.capture.script.step_timer`), read back by :func:`read_timing`::

      {"schema": 2, "clock": "cuda_events" | "perf_counter", "steps": [{"index": 10,
       "time_ns": 1234.0, "status": "ok", "loss": 2.31 | null,
       "fix_on": true | false | null}, ...],
       "requested": [fix, ...], "fixes": [{"fix": ..., "target": ..., "options": {...},
       "status": "applied" | "failed", "error": null | "...", "modules": [...]}, ...],
       "toggle_error": null | "..."}

  ``fix_on`` is null when the fixes are not alternated; ``toggle_error`` says why switching
  them off or on failed (the steps after it are not alternated). Schema 1 (no ``fix_on``,
  no ``toggle_error``) is still read.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch_nsight.vocabulary import HALF_DTYPES

__all__ = ["FIX_OPTIONS", "FixSpec", "StepTimes", "check_fix", "fix_on_at", "target_matches",
           "format_fixes", "parse_fixes", "read_timing", "TIMING_SCHEMA"]

TIMING_SCHEMA = 2
#: The step-times files :func:`read_timing` reads (1: before the fixes alternated).
_READ_SCHEMAS = (1, TIMING_SCHEMA)

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")
#: Each fix kind and the options it takes, with the type each must have.
FIX_OPTIONS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "compile": {"mode": str, "backend": str, "fullgraph": bool, "dynamic": bool},
    "channels_last": {},
    "tf32": {},
    "pad_linear": {"multiple": int},
    "sdpa_backend": {"backend": str},
    "gelu_tanh": {},
    "cudnn_benchmark": {},
    "fused_optimizer": {},
    "cast": {"dtype": str},
}
#: The options a kind must be given.
REQUIRED = {"sdpa_backend": ("backend",)}


@dataclass(frozen=True)
class FixSpec:
    """One fix to switch on in the user's script.

    Attributes:
        fix: its kind, a key of :data:`FIX_OPTIONS`.
        target: the module it applies to (a name of ``named_modules()``, each dotted part a
            glob); ``""`` the whole model.
        options: the kind's options (``{"mode": "reduce-overhead"}``).
    """

    fix: str
    target: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """The fix in the compact form (``pad_linear@lm_head:multiple=64``)."""
        text = self.fix + (f"@{self.target}" if self.target else "")
        if self.options:
            text += ":" + ",".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return text

    def to_json(self) -> dict[str, Any]:
        """The fix as one object of the fixes' JSON list (:func:`format_fixes`)."""
        return {"fix": self.fix, "target": self.target, **dict(self.options)}


def check_fix(spec: FixSpec) -> FixSpec:
    """Check a fix's kind and options.

    Raises:
        ValueError: an unknown kind, an unknown or badly typed option, a bad value.
    """
    if spec.fix not in FIX_OPTIONS:
        raise ValueError(f"unknown fix {spec.fix!r}: expected one of "
                         f"{', '.join(FIX_OPTIONS)}")
    if not isinstance(spec.target, str):
        raise ValueError(f"fix {spec.fix}: target must be a module name, got {spec.target!r}")
    allowed = FIX_OPTIONS[spec.fix]
    for key, value in spec.options.items():
        if key not in allowed:
            raise ValueError(f"fix {spec.fix}: unknown option {key!r} (it takes "
                             f"{', '.join(allowed) or 'none'})")
        wanted = allowed[key]
        if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
            raise ValueError(f"fix {spec.fix}: option {key} must be "
                             f"{getattr(wanted, '__name__', wanted)}, got {value!r}")
    missing = [key for key in REQUIRED.get(spec.fix, ()) if key not in spec.options]
    if missing:
        raise ValueError(f"fix {spec.fix}: needs option {missing[0]}")
    _check_values(spec)
    return spec


def _check_values(spec: FixSpec) -> None:
    options = spec.options
    if spec.fix == "compile" and options.get("mode", "default") not in COMPILE_MODES:
        raise ValueError(f"fix compile: mode must be one of {', '.join(COMPILE_MODES)}, got "
                         f"{options['mode']!r}")
    if spec.fix == "pad_linear" and options.get("multiple", 64) < 2:
        raise ValueError(f"fix pad_linear: multiple must be >= 2, got {options['multiple']}")
    if spec.fix == "cast" and options.get("dtype", HALF_DTYPES[0]) not in HALF_DTYPES:
        raise ValueError(f"fix cast: dtype must be one of {', '.join(HALF_DTYPES)}, got "
                         f"{options['dtype']!r}")
    if spec.fix == "sdpa_backend" and options["backend"] not in SDPA_BACKENDS:
        raise ValueError(f"fix sdpa_backend: backend must be one of {', '.join(SDPA_BACKENDS)}"
                         f", got {options['backend']!r}")


def _value(text: str) -> Any:
    """A compact option's value: an int, true/false, else the text."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        return text.strip()


def _compact(part: str) -> FixSpec:
    head, _, tail = part.partition(":")
    kind, _, target = head.partition("@")
    options: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in tail.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"fix {part!r}: option {item!r} is not KEY=VALUE")
        options[key.strip()] = _value(value)
    return FixSpec(kind.strip(), target.strip(), options)


def _from_json(item: object) -> FixSpec:
    if not isinstance(item, dict) or not isinstance(item.get("fix"), str):
        raise ValueError(f"each fix must be an object with a \"fix\" name, got {item!r}")
    options = {k: v for k, v in item.items() if k not in ("fix", "target")}
    return FixSpec(item["fix"], item.get("target") or "", options)


#: A folded block index in a target: ``{0-7}``, ``{0,2,5}``, ``{0-3,7}``.
_BLOCKS = re.compile(r"^\{([0-9][0-9,\-]*)\}$")


def target_matches(pattern: str, name: str) -> bool:
    """Whether module ``name`` is one that the fix target ``pattern`` names: each dotted
    part matches, a folded index (``{0-3,7}``) by its numbers, any other part as an fnmatch
    pattern (``*``)."""
    wanted, parts = pattern.split("."), name.split(".")
    return len(wanted) == len(parts) and all(
        _part_matches(w, p) for w, p in zip(wanted, parts, strict=True))


def _part_matches(wanted: str, part: str) -> bool:
    blocks = _BLOCKS.match(wanted)
    if blocks is None:
        return fnmatch.fnmatchcase(part, wanted)
    if not part.isdigit():
        return False
    for item in blocks.group(1).split(","):
        low, _, high = item.partition("-")
        if low.isdigit() and (high or low).isdigit() and int(low) <= int(part) <= int(high or low):
            return True
    return False


def parse_fixes(text: str) -> list[FixSpec]:
    """Read fixes: a JSON list (or one object), or the compact form.

    Raises:
        ValueError: malformed text, or a fix :func:`check_fix` refuses (the message names it).
    """
    text = text.strip()
    if text.startswith(("[", "{")):
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"the fixes are not valid JSON: {err}") from None
        specs = [_from_json(i) for i in (loaded if isinstance(loaded, list) else [loaded])]
    else:
        specs = [_compact(p) for p in text.split(";") if p.strip()]
    return [check_fix(s) for s in specs]


def format_fixes(specs: Iterable[FixSpec]) -> str:
    """The fixes' JSON (what :func:`parse_fixes` reads) for ``specs`` (each checked).

    Raises:
        ValueError: a fix :func:`check_fix` refuses.
    """
    return json.dumps([check_fix(s).to_json() for s in specs], sort_keys=True)


@dataclass(frozen=True)
class StepTimes:
    """What a script wrote to its step-times file (``ScriptEnv.timing``).

    Attributes:
        clock: ``cuda_events`` or ``perf_counter``.
        steps: one dict per timed step (``index``, ``time_ns``, ``status``, ``loss``,
            ``fix_on``: None when the fixes did not alternate).
        requested: the fixes asked for (``ScriptEnv.fixes``), as JSON objects.
        fixes: how each was applied (``status`` ``applied`` or ``failed``, ``error``).
        toggle_error: why switching the fixes off or on failed, or None.
    """

    clock: str
    steps: list[dict[str, Any]]
    requested: list[dict[str, Any]]
    fixes: list[dict[str, Any]]
    toggle_error: str | None = None

    @property
    def times_ns(self) -> list[float]:
        """The times of the steps that ended without an exception."""
        return [float(s["time_ns"]) for s in self.steps if s.get("status") == "ok"]


def read_timing(path: str | os.PathLike[str]) -> StepTimes:
    """Read a step-times file.

    Raises:
        FileNotFoundError: no file (the script wrote none).
        ValueError: not a step-times file of this schema.
    """
    try:
        loaded = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON: {err}") from None
    if not isinstance(loaded, dict) or loaded.get("schema") not in _READ_SCHEMAS:
        raise ValueError(f"{path} is not a step-times file of schema "
                         f"{' or '.join(map(str, _READ_SCHEMAS))}")
    steps = loaded.get("steps")
    if not isinstance(steps, list) or not all(
            isinstance(s, dict) and isinstance(s.get("time_ns"), (int, float))
            and isinstance(s.get("index"), int) for s in steps):
        raise ValueError(f"{path}: steps must be a list of objects with index and time_ns")
    toggle_error = loaded.get("toggle_error")
    return StepTimes(str(loaded.get("clock")), [{"fix_on": None, **s} for s in steps],
                     list(loaded.get("requested") or []), list(loaded.get("fixes") or []),
                     None if toggle_error is None else str(toggle_error))


def fix_on_at(index: int, first: int) -> bool:
    """Whether the fixes are on for step ``index`` when they alternate: ABBA from step
    ``first`` (the first timed step, off), extended back over the warm-up (step
    ``first - 1`` off, ``first - 2`` and ``first - 3`` on, ...)."""
    return (index - first) % 4 in (1, 2)
