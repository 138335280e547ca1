"""A Parquet cache of a report's tidy table, so that the next load skips Nsight's reader.

By default ``run.ncu-rep`` is cached as ``run.ncu-rep.tn-cache.parquet`` beside it; with a
cache folder (``load(..., cache_dir=DIR)`` or the environment variable
:data:`CACHE_DIR_ENV`) the cache goes there instead, named after the report's absolute path.
The cache is used only when it still belongs to its report and holds what was written:
the report's size, modification time and content digest (:func:`source_digest`: the
whole file's up to :data:`FULL_DIGEST_MAX`, its head and tail beyond), the table's schema
version, the column list the caller expects and the digest of the table itself
(:func:`table_digest`: numbers edited in a cache are not trusted). A cache that fails any
of these, or declares columns that expand past the cap on expanding
(:func:`~torch_nsight.report.expand.check_parquet_size`), is read again from the report and
rewritten. A location that cannot be written (a read-only folder) is skipped quietly
(debug log).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight.environment import CACHE_DIR_ENV
from torch_nsight.errors import OutputWriteError
from torch_nsight.files import atomic_output
from torch_nsight.report.expand import check_parquet_size

logger = logging.getLogger(__name__)

CACHE_SUFFIX = ".tn-cache.parquet"
_META_KEY = b"torch_nsight.report_cache"


def cache_path(report: str | os.PathLike[str],
               cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return where the cache of ``report`` lives.

    Args:
        report: the report file.
        cache_dir: a folder for caches; None: ``$TORCH_NSIGHT_CACHE_DIR`` if set, else beside
            the report.

    Returns:
        The cache file's path.
    """
    report = Path(report)
    folder = cache_dir if cache_dir is not None else os.environ.get(CACHE_DIR_ENV) or None
    if folder is None:
        return report.with_name(report.name + CACHE_SUFFIX)
    digest = hashlib.sha1(os.fsencode(report.resolve())).hexdigest()[:12]  # any name's bytes
    return Path(folder) / f"{report.name}.{digest}{CACHE_SUFFIX}"


#: Reports up to this size are digested whole (about 0.4 s at the 165 MB/s of blake2b on
#: a busy 2-core machine); larger ones by their size and first and last :data:`_EDGE` bytes.
FULL_DIGEST_MAX = 64 << 20
_EDGE = 4 << 20


def source_digest(report: Path) -> str:
    """A digest of the report's content (see :data:`FULL_DIGEST_MAX`)."""
    digest = hashlib.blake2b(digest_size=16)
    size = report.stat().st_size
    with open(report, "rb") as file:
        if size <= FULL_DIGEST_MAX:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
        else:
            digest.update(str(size).encode())
            digest.update(file.read(_EDGE))
            file.seek(size - _EDGE)
            digest.update(file.read(_EDGE))
    return digest.hexdigest()


def table_digest(table: Any) -> str:
    """A digest of an Arrow table's columns and values (its schema metadata aside)."""
    import pyarrow as pa

    plain = table.replace_schema_metadata(None).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, plain.schema) as writer:
        writer.write_table(plain)
    return hashlib.blake2b(sink.getvalue(), digest_size=16).hexdigest()


def _key(report: Path, schema_version: int) -> dict[str, Any]:
    stat = report.stat()
    return {"schema": schema_version, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def plain_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """Give string columns read from Parquet the in-memory form: object dtype, None if missing.

    Args:
        frame: a table as pyarrow's ``to_pandas`` returns it.

    Returns:
        The same frame, its string columns converted in place.
    """
    for column in frame.columns:
        if pd.api.types.is_string_dtype(frame[column].dtype) and frame[column].dtype != object:
            values = frame[column].astype(object)
            frame[column] = values.mask(values.isna(), None)
    return frame


def _of_kind(kind: str, type_: Any) -> bool:
    """Whether an Arrow type holds values of ``kind`` (a key of :data:`COLUMN_KINDS`); a
    column of nothing but missing values (Arrow's null type) holds any kind."""
    import pyarrow as pa

    if pa.types.is_null(type_):
        return True
    if kind == "texts":
        return ((pa.types.is_list(type_) or pa.types.is_large_list(type_))
                and _of_kind("text", type_.value_type))
    if kind == "text":
        return bool(pa.types.is_string(type_) or pa.types.is_large_string(type_))
    if kind == "integer":
        return bool(pa.types.is_integer(type_))
    return bool(pa.types.is_integer(type_) or pa.types.is_floating(type_))


#: The kinds of column a cache's schema is checked against: a name, an integer, a number,
#: a list of names (a tuple once read).
COLUMN_KINDS = ("text", "integer", "number", "texts")


def _wrong_types(arrow: Any, kinds: Mapping[str, str]) -> list[str]:
    return [f"{f.name} ({f.type})" for f in arrow.schema
            if f.name in kinds and not _of_kind(kinds[f.name], f.type)]


def read_cache(report: str | os.PathLike[str], schema_version: int,
               cache_dir: str | os.PathLike[str] | None = None,
               columns: Sequence[str] | None = None, kinds: Mapping[str, str] | None = None,
               ) -> tuple[pd.DataFrame, dict[str, Any]] | None:
    """Return the cached (table, report meta) of ``report``, or None when absent, stale or
    not what was written (see the module docstring: the caller then reads the report and
    writes the cache again).

    Args:
        report: the report file the cache belongs to.
        schema_version: the table schema the caller expects.
        cache_dir: see :func:`cache_path`.
        columns: the columns the table must have, in order (None: any).
        kinds: what columns hold, a kind of :data:`COLUMN_KINDS` by column name: a cache
            whose types differ (a forged one) is not used.

    Returns:
        The cached table and metadata, or None.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = cache_path(report, cache_dir)
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as file:  # pyarrow opens no name that is not UTF-8
            stored = json.loads(pq.read_schema(file).metadata[_META_KEY])
        if not isinstance(stored, dict) or stored.get("key") != {
                **_key(Path(report), schema_version),
                "source_digest": source_digest(Path(report))}:
            logger.debug("cache %s is stale; reading the report again", path)
            return None
        check_parquet_size(path)
        with open(path, "rb") as file:
            arrow = pq.read_table(file)
        if columns is not None and arrow.column_names != list(columns):
            logger.info("cache %s does not hold the table's columns; reading the report "
                        "again", path)
            return None
        if kinds is not None and (wrong := _wrong_types(arrow, kinds)):
            logger.info("cache %s holds columns of other types (%s); reading the report "
                        "again", path, ", ".join(wrong[:3]))
            return None
        if stored.get("table_digest") != table_digest(arrow):
            logger.info("cache %s was changed after it was written; reading the report "
                        "again", path)
            return None
        table = plain_strings(arrow.to_pandas())
        lists = [f.name for f in arrow.schema
                 if _of_kind("texts", f.type) and not pa.types.is_null(f.type)]
        for column in dict.fromkeys([*stored.get("tuple_columns", []), *lists]):
            if column in table:
                table[column] = [tuple(value) if value is not None else ()
                                 for value in table[column]]
        meta = stored.get("meta", {})
        if not isinstance(meta, dict):
            raise TypeError(f"its metadata is a {type(meta).__name__}, not a mapping")
    except Exception as err:  # a damaged cache is never fatal: read the report instead
        logger.debug("ignoring unreadable cache %s: %s", path, err)
        return None
    logger.debug("read %d kernels of %s from its cache", len(table), report)
    return table, meta


def write_cache(report: str | os.PathLike[str], table: pd.DataFrame, meta: dict[str, Any],
                schema_version: int, cache_dir: str | os.PathLike[str] | None = None
                ) -> Path | None:
    """Write the cache of ``report``; skip quietly (debug log) where that is not possible.

    Args:
        report: the report file the table was read from.
        table: its tidy table.
        meta: the report's metadata (JSON-serializable).
        schema_version: the table schema written.
        cache_dir: see :func:`cache_path` (created if missing).

    Returns:
        The cache path, or None when it could not be written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = cache_path(report, cache_dir)
    tuple_columns = [c for c in table.columns
                     if len(table) and isinstance(table[c].iloc[0], tuple)]
    try:
        stored = {"key": {**_key(Path(report), schema_version),
                          "source_digest": source_digest(Path(report))},
                  "meta": meta, "tuple_columns": tuple_columns}
        path.parent.mkdir(parents=True, exist_ok=True)
        arrow = pa.Table.from_pandas(table, preserve_index=False)
        # the digest of the table as it reads back (its strings come back as large_string)
        written = pa.BufferOutputStream()
        pq.write_table(arrow, written)
        stored["table_digest"] = table_digest(pq.read_table(pa.BufferReader(
            written.getvalue())))
        arrow = arrow.replace_schema_metadata(
            {**(arrow.schema.metadata or {}), _META_KEY: json.dumps(stored, default=str)})
        with atomic_output(path) as temp, open(temp, "wb") as file:
            pq.write_table(arrow, file)  # pyarrow opens no name that is not UTF-8
    except (OSError, OutputWriteError, pa.ArrowException) as err:
        logger.debug("not caching %s (%s)", report, err)
        return None
    return path
