"""The fuzz suite (issue 33): over 2,000 damaged copies of real recorded files, read in this
process by every reader: PyTorch profiler traces (.json, .json.gz), timeline and sweep
manifests, saved profiles, calls files and compressed Nsight Compute reports.

Every case ends in a :class:`~torch_nsight.errors.TorchNsightError` or a read whose numbers
are all finite (no negative time, nothing beyond the readers' range); one case in ten is
also analyzed, one in fifty printed, and a printed table holds no ``nan``, no ``inf``
and no raw escape code. No case may run past :data:`LIMIT_S` (a hang). The cases derive
from a seed (``TORCH_NSIGHT_FUZZ_SEED``, default :data:`SEED`), printed with the case on
failure. Damaged .ncu-rep contents (not their xz container) are read in separate processes
by tests/cli/test_fuzz_reader.py: a crash in NVIDIA's native reader would take this one
along.

A case is one damaged copy of a recorded fixture: a JSON document with one to three nodes
replaced by a hostile value (a wrong type, NaN, inf, huge, negative, nested too deeply,
escape codes) or deleted, then possibly cut short or with bytes flipped;
``random.Random(f"{seed}:{source}:{index}")`` makes it.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import random
import re
import shutil
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import torch_nsight
from tests.report.fuzz_inputs import Hung as _Hung
from tests.report.fuzz_inputs import json_paths as _nodes
from tests.report.fuzz_inputs import time_limit as _time_limit
from torch_nsight.calls_file import read_call_rows
from torch_nsight.errors import TorchNsightError
from torch_nsight.render import render_table
from torch_nsight.report.sources import ReadOptions, read_source

DATA = Path(__file__).resolve().parents[1] / "data"
SEED = 20261126
LIMIT_S = 20
CHUNKS = 8
#: Cases per source: 2,120 in all.
CASES = {"trace": 720, "timeline": 240, "sweep": 400, "saved": 320, "calls": 400, "xz": 40}
_PRINTED_NAN = re.compile(r"(?<![\w.])-?(nan|inf)(?![\w.])", re.IGNORECASE)


#: Values a field may be replaced by: every JSON type, the numbers no reader should take as
#: measurements, text that looks like a number, a terminal escape code.
HOSTILE: tuple[Any, ...] = (
    None, True, False, 0, -1, -5.5, 1, 3.0, 2**63, 10**30, -(10**30), 1e308, -1e308,
    float("nan"), float("inf"), float("-inf"), "", "12", "abc", "\x1b[2J\nforged",
    [], [1, 2, 3], ["a", None], {}, {"a": 1}, {"kind": None}, [[[]]],
)
#: Text that nests deeper than Python's JSON reader recurses.
DEEP = "[" * 50_000 + "]" * 50_000


def _set(document: Any, path: tuple[Any, ...], value: Any, *, delete: bool = False) -> Any:
    if not path:
        return value
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return document


def mutate_json(document: Any, rng: random.Random, *, focus: list[str] | None = None,
                ) -> bytes:
    """One damaged serialization of ``document`` (left unchanged).

    Args:
        document: a parsed JSON document from a recorded fixture.
        rng: the case's random source.
        focus: keys whose subtrees are mutated more often (the fields a reader takes).

    Returns:
        The damaged file's bytes.
    """
    changed = copy.deepcopy(document)
    nodes = _nodes(changed)
    if focus and rng.random() < 0.7:
        nodes = [p for p in nodes if any(k in p for k in focus)] or nodes
    deep = False
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        path = rng.choice(nodes)
        action = rng.random()
        if action < 0.15 and path:
            changed = _set(changed, path, None, delete=True)
        elif action < 0.2:
            deep = True
            changed = _set(changed, path, "@@DEEP@@")
        else:
            changed = _set(changed, path, copy.deepcopy(rng.choice(HOSTILE)))
        focused = set(nodes)
        nodes = [p for p in _nodes(changed) if p in focused] or _nodes(changed)
    text = json.dumps(changed).replace('"@@DEEP@@"', DEEP) if deep else json.dumps(changed)
    return mutate_bytes(text.encode(), rng)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """``data`` as it is most of the time; else cut short, or with a few bytes flipped."""
    roll = rng.random()
    if roll < 0.75 or not data:
        return data
    if roll < 0.88:
        return data[:rng.randrange(len(data))]
    flipped = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        flipped[rng.randrange(len(flipped))] = rng.randrange(256)
    return bytes(flipped)


def _seed() -> int:
    return int(os.environ.get("TORCH_NSIGHT_FUZZ_SEED", SEED))


def _check_numbers(table: pd.DataFrame | None, what: str) -> None:
    """No infinite number, no negative time, nothing beyond the readers' range."""
    if table is None or table.empty:
        return
    numbers = table.select_dtypes("number").astype("float64")
    assert not np.isinf(numbers.to_numpy()).any(), f"{what} holds inf"
    assert not (numbers.abs() > 1e30).any().any(), f"{what} holds a number beyond range"
    for column in ("duration_ns", "busy_ns", "cpu_ns"):
        if column in numbers:
            assert not (numbers[column] < 0).any(), f"{what}: negative {column}"


def _read(path: Path, index: int, cache_dir: Path) -> None:
    """Read ``path`` as ``torch-nsight report`` would; analyze and print some cases."""
    data = read_source(path, ReadOptions(cache=True, cache_dir=cache_dir))
    _check_numbers(data.kernels, "the kernel table")
    _check_numbers(data.timeline, "the timeline table")
    if index % 10:
        return
    profile = torch_nsight.load(path, cache_dir=cache_dir)
    _check_numbers(profile.kernels.drop(columns=["pct_of_roof"], errors="ignore"),
                   "the analyzed table")
    if index % 50 or profile.kernels.empty:
        return
    for kind in ("hotspots", "modules"):
        text = render_table(profile, kind)
        assert not _PRINTED_NAN.search(text), f"the {kind} table prints nan/inf:\n{text}"
        assert "\x1b" not in text, f"the {kind} table prints an escape code"


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The recorded files each source's cases damage, read once."""
    work = tmp_path_factory.mktemp("fuzz-fixtures")
    with gzip.open(DATA / "graph_captured_timeline" / "trace.json.gz", "rt") as handle:
        trace = json.load(handle)
    saved = work / "saved.parquet"
    torch_nsight.load(DATA / "timeline_decode", cache=False).save(saved)
    return {"trace": trace, "work": work, "saved": saved,
            "timeline": json.loads((DATA / "graph_captured_timeline" / "timeline.json")
                                   .read_text()),
            "sweep": json.loads((DATA / "findings_gemm" / "sweep.json").read_text()),
            "calls": json.loads((DATA / "hand_s128.calls.json").read_text())}


def _trace_case(fx: dict[str, Any], rng: random.Random, folder: Path) -> Path:
    data = mutate_json(fx["trace"], rng, focus=["args", "ts", "dur", "deviceProperties",
                                                "name", "cat", "tid", "ph"])
    if rng.random() < 0.15:
        packed = gzip.compress(data, mtime=0)  # the same bytes from the same seed, any second
        path = folder / "trace.json.gz"
        path.write_bytes(mutate_bytes(packed, rng) if rng.random() < 0.5 else packed)
        return path
    path = folder / "trace.json"
    path.write_bytes(data)
    return path


def _timeline_case(fx: dict[str, Any], rng: random.Random, folder: Path) -> Path:
    shutil.copy(DATA / "graph_captured_timeline" / "trace.json.gz", folder)
    (folder / "timeline.json").write_bytes(mutate_json(fx["timeline"], rng, focus=["items"]))
    return folder


def _sweep_case(fx: dict[str, Any], rng: random.Random, folder: Path) -> Path:
    sweep = fx["work"] / "sweep"
    if not sweep.exists():  # one copy: its report's cache is read by every case
        shutil.copytree(DATA / "findings_gemm", sweep)
    (sweep / "sweep.json").write_bytes(mutate_json(
        fx["sweep"], rng, focus=["children", "replication", "calls", "items", "options",
                                 "format", "settings"]))
    return sweep


def _saved_case(fx: dict[str, Any], rng: random.Random, folder: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(fx["saved"])
    metadata = dict(table.schema.metadata)
    roll = rng.random()
    if roll < 0.5:
        key = rng.choice([b"torch_nsight.profile", b"torch_nsight.timeline"])
        metadata[key] = mutate_json(json.loads(metadata[key]), rng, focus=["meta", "format"])
        table = table.replace_schema_metadata(metadata)
    else:
        name = rng.choice(table.schema.names)
        value = rng.choice(HOSTILE)
        values = [value if rng.random() < 0.3 else v for v in table.column(name).to_pylist()]
        try:
            column = pa.array(values)
            changed = table.set_column(table.schema.get_field_index(name), name, column)
            pq.write_table(changed, io.BytesIO())
        except (pa.ArrowException, OverflowError, TypeError):  # a mix Parquet cannot store
            column = pa.array([json.dumps(v) for v in values])
            changed = table.set_column(table.schema.get_field_index(name), name, column)
        table = changed
    path = folder / "profile.parquet"
    pq.write_table(table, path)
    if rng.random() < 0.1:
        path.write_bytes(mutate_bytes(path.read_bytes(), rng))
    return path


def _calls_case(fx: dict[str, Any], rng: random.Random, folder: Path) -> Path:
    path = folder / "run.calls.json"
    path.write_bytes(mutate_json(fx["calls"], rng, focus=["rows", "format", "kind"]))
    return path


def _xz_case(fx: dict[str, Any], rng: random.Random, folder: Path) -> Path:
    packed = (DATA / "findings_gemm" / "sweep.ncu-rep.xz").read_bytes()
    path = folder / "run.ncu-rep.xz"
    data = mutate_bytes(packed, rng)
    path.write_bytes(data if data != packed else packed[:rng.randrange(len(packed))])
    return path


MAKERS: dict[str, Callable[[dict[str, Any], random.Random, Path], Path]] = {
    "trace": _trace_case, "timeline": _timeline_case, "sweep": _sweep_case,
    "saved": _saved_case, "calls": _calls_case, "xz": _xz_case}


def test_the_suite_holds_over_two_thousand_cases() -> None:
    assert sum(CASES.values()) >= 2000 and set(CASES) == set(MAKERS)


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("source", sorted(CASES))
def test_damaged_sources_read_or_fail_with_the_librarys_error(
        fixtures: dict[str, Any], tmp_path: Path, source: str, chunk: int) -> None:
    seed, failures = _seed(), []
    for index in range(chunk, CASES[source], CHUNKS):
        rng = random.Random(f"{seed}:{source}:{index}")
        folder = tmp_path / str(index)
        folder.mkdir()
        try:
            with _time_limit(LIMIT_S), warnings_as_log():
                path = MAKERS[source](fixtures, rng, folder)
                if source == "calls":
                    read_call_rows(path)
                else:
                    _read(path, index, tmp_path / "caches")
        except TorchNsightError:
            pass  # refused in the library's own words: a correct ending
        except (Exception, _Hung) as err:  # noqa: BLE001 - every other ending is a bug
            failures.append(f"case {source}:{index} (TORCH_NSIGHT_FUZZ_SEED={seed}): "
                            f"{type(err).__name__}: {err}\n"
                            + "".join(traceback.format_tb(err.__traceback__)[-4:]))
        shutil.rmtree(folder, ignore_errors=True)
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:5])


@contextlib.contextmanager
def warnings_as_log() -> Iterator[None]:
    """numpy's RuntimeWarnings (a division by zero on a damaged value) fail the case."""
    with np.errstate(all="raise"), contextlib.redirect_stderr(io.StringIO()):
        yield


def test_a_case_is_rebuilt_from_its_seed(fixtures: dict[str, Any], tmp_path: Path) -> None:
    made = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        made.append(_trace_case(fixtures, random.Random(f"{SEED}:trace:7"),
                                tmp_path / name).read_bytes())
    assert made[0] == made[1]
