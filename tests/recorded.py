"""The recorded sources of tests/data (and the demo's report), each read once per test
process and handed out as copies.

A test that needs a recording's rows, and does not test reading itself, calls
:func:`load_recorded` (or :func:`read_recorded` for the raw table) instead of
``torch_nsight.load(path, cache=False)``: the first call in a process reads the recording
with the real reader, exactly as that call would (no report cache: a cache read gives text
columns of another dtype); every call, the first included, gets its own deep copy, so no
test sees what another changed. Tests of reading, caching, labelling or the warnings of a
load keep calling ``torch_nsight.load`` on the real path: a copy logs nothing.

Only files and folders of the checkout are kept (they never change during a run); a copy in
a test's ``tmp_path`` is refused, since it may be edited between two reads.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
#: Where recordings may be kept from: the test data and the packaged demo report.
RECORDINGS = (ROOT / "tests" / "data", ROOT / "torch_nsight" / "demo")

_PROFILES: dict[tuple[Any, ...], Any] = {}
_TABLES: dict[str, tuple[pd.DataFrame, dict[str, Any]]] = {}


def _recording(path: str | os.PathLike[str]) -> str:
    """``path`` as a key: absolute (the profile stores the path as given) and inside
    :data:`RECORDINGS`."""
    given = Path(path)
    if not given.is_absolute() or not any(given.resolve().is_relative_to(folder)
                                          for folder in RECORDINGS):
        raise ValueError(f"{path}: only the checkout's recordings (an absolute path under "
                         "tests/data or torch_nsight/demo) are read once and shared")
    return os.fspath(path)


def _frozen(value: Any) -> Any:
    """An option's value as part of a dictionary key."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    if isinstance(value, os.PathLike):
        return _recording(value)
    return value


def copy_frame(frame: pd.DataFrame | None) -> pd.DataFrame | None:
    """A copy of ``frame`` that shares nothing with it: the values of object columns
    that can be changed in place (lists, dicts, arrays) copied too."""
    if frame is None:
        return None
    out = frame.copy(deep=True)
    for column in out.columns:
        values = out[column]
        if pd.api.types.is_object_dtype(values) and any(
                isinstance(value, (list, dict, set)) or hasattr(value, "__array__")
                for value in values):
            out[column] = [copy.deepcopy(value) for value in values]
    return out


def copy_profile(profile: Any) -> Any:
    """A new :class:`~torch_nsight.profile.Profile` holding copies of ``profile``'s tables
    and metadata, with nothing computed yet (its findings and hotspots are its own)."""
    return dataclasses.replace(profile, kernels=copy_frame(profile.kernels),
                               meta=copy.deepcopy(profile.meta),
                               calls=copy_frame(profile.calls),
                               timeline=copy_frame(profile.timeline))


def load_recorded(paths: Any, **options: Any) -> Any:
    """``torch_nsight.load(paths, cache=False, **options)``, read once per process.

    Args:
        paths: one recording or a list of them (absolute paths under :data:`RECORDINGS`).
        options: the other arguments of ``load`` (``labels``, ``strict`` ...).

    Returns:
        A copy of the profile (:func:`copy_profile`).

    Raises:
        ValueError: a path outside the recordings, or ``cache`` given.
    """
    import torch_nsight

    if "cache" in options or "cache_dir" in options:
        raise ValueError("load_recorded reads without a cache: call torch_nsight.load to "
                         "test caching")
    single = isinstance(paths, (str, os.PathLike))
    files = [paths] if single else list(paths)
    key = (single, tuple(_recording(path) for path in files),
           tuple(sorted((name, _frozen(value)) for name, value in options.items())))
    if key not in _PROFILES:
        _PROFILES[key] = torch_nsight.load(paths if single else files, cache=False, **options)
    return copy_profile(_PROFILES[key])


def read_recorded(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``torch_nsight.report.read_report(path, cache=False)``, read once per process.

    Args:
        path: a report (absolute, under :data:`RECORDINGS`).

    Returns:
        Copies of the raw kernel table and the report's metadata.
    """
    from torch_nsight.report import read_report

    key = _recording(path)
    if key not in _TABLES:
        _TABLES[key] = read_report(path, cache=False)
    frame, meta = _TABLES[key]
    copied = copy_frame(frame)
    assert copied is not None
    return copied, copy.deepcopy(meta)
