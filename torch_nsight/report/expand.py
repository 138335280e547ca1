"""Compressed files (``.xz``, ``.gz``) expanded with a cap checked as they stream.

A few MiB of xz or gzip can expand to many GiB (a decompression bomb). Every reader expands
through here, a MiB at a time, and refuses a file once what came out of it passes the cap
(:func:`expansion_limit`): before it fills the memory or the disk. The cap is
:data:`DEFAULT_LIMIT` (4 times the largest real report or trace seen), raised by
``$TORCH_NSIGHT_MAX_EXPANDED`` (:data:`~torch_nsight.environment.MAX_EXPANDED_ENV`:
``4G``, ``800M``, a byte count), which the refusal names.
"""

from __future__ import annotations

import gzip
import lzma
import os
import re
import zlib
from pathlib import Path
from typing import IO, Any

from torch_nsight.environment import MAX_EXPANDED_ENV
from torch_nsight.errors import ReportError

__all__ = ["DEFAULT_LIMIT", "CHUNK", "expansion_limit", "is_compressed", "open_compressed",
           "read_expanded", "expand_into", "check_parquet_size", "EXPANSION_ERRORS"]

#: The most bytes a compressed file may expand to: 1 GiB (real reports and traces are up
#: to ~250 MB).
DEFAULT_LIMIT = 1 << 30
#: What is expanded at a time.
CHUNK = 1 << 20
#: What a damaged compressed file raises while it is expanded.
EXPANSION_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)
_OPENERS: dict[str, Any] = {".gz": gzip.open, ".xz": lzma.open}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def expansion_limit() -> int:
    """The most bytes a compressed file may expand to: ``$TORCH_NSIGHT_MAX_EXPANDED`` or
    :data:`DEFAULT_LIMIT`.

    Raises:
        ReportError: the variable is set to something that is not a size.
    """
    text = os.environ.get(MAX_EXPANDED_ENV, "").strip()
    if not text:
        return DEFAULT_LIMIT
    match = _SIZE.fullmatch(text)
    limit = int(float(match.group(1)) * _SCALE[match.group(2).lower()]) if match else 0
    if limit <= 0:
        raise ReportError(f"{MAX_EXPANDED_ENV}={text!r} is not a size: set it to a byte count "
                          "or a size such as 4G or 800M")
    return limit


def is_compressed(path: Path) -> bool:
    """Whether ``path`` is expanded before it is read (its name ends in ``.xz`` or ``.gz``)."""
    return path.suffix in _OPENERS


def open_compressed(path: Path) -> IO[bytes]:
    """``path`` opened for reading its expanded bytes (xz or gzip by its suffix, else the
    file itself). Read it with :func:`read_expanded` or :func:`expand_into`, which cap it."""
    opener = _OPENERS.get(path.suffix, open)
    return opener(path, "rb")


def _refusal(shown: str | os.PathLike[str], limit: int) -> ReportError:
    return ReportError(f"{shown} expands to more than {_size(limit)} (a decompression bomb, "
                       "or a file larger than the cap on expanding): refused; if it is a real "
                       f"report or trace, set {MAX_EXPANDED_ENV} to a larger size (e.g. "
                       f"{MAX_EXPANDED_ENV}={_size(limit * 4, short=True)}) and run again")


def _size(count: int, *, short: bool = False) -> str:
    for unit in ("T", "G", "M", "K"):
        scale = _SCALE[unit.lower()]
        if count >= scale and count % scale == 0:
            return f"{count // scale}{unit}" if short else f"{count // scale} {unit}iB"
    return f"{count}" if short else f"{count} bytes"


def read_expanded(path: Path, shown: str | os.PathLike[str] | None = None,
                  limit: int | None = None) -> bytes:
    """The expanded bytes of ``path`` (a plain file is read as it is).

    Args:
        path: a ``.xz``, ``.gz`` or plain file.
        shown: its name in the error (default: ``path``).
        limit: the most bytes it may expand to (default: :func:`expansion_limit`).

    Returns:
        The bytes.

    Raises:
        ReportError: it expands past ``limit`` (what was read is dropped at once).
        OSError, EOFError, lzma.LZMAError, zlib.error: it is damaged or unreadable.
    """
    if not is_compressed(path):
        return path.read_bytes()  # its size is what it holds
    limit = expansion_limit() if limit is None else limit
    parts: list[bytes] = []
    total = 0
    with open_compressed(path) as handle:
        while part := handle.read(min(CHUNK, limit + 1 - total)):
            total += len(part)
            if total > limit:
                parts.clear()
                raise _refusal(shown if shown is not None else path, limit)
            parts.append(part)
    return b"".join(parts)


def expand_into(path: Path, out: IO[bytes], shown: str | os.PathLike[str] | None = None,
                limit: int | None = None) -> int:
    """Write the expanded bytes of ``path`` into ``out``, a chunk at a time.

    Args:
        path: a ``.xz``, ``.gz`` or plain file.
        out: an open binary file.
        shown: its name in the error (default: ``path``).
        limit: the most bytes it may expand to (default: :func:`expansion_limit`).

    Returns:
        The bytes written.

    Raises:
        ReportError: it expands past ``limit``; at most ``limit`` bytes were written (the
            caller removes the file).
        OSError, EOFError, lzma.LZMAError, zlib.error: it is damaged, unreadable, or ``out``
            cannot be written.
    """
    limit = expansion_limit() if limit is None else limit
    total = 0
    with open_compressed(path) as handle:
        while part := handle.read(min(CHUNK, limit + 1 - total)):
            total += len(part)
            if total > limit:
                raise _refusal(shown if shown is not None else path, limit)
            out.write(part)
    return total


def check_parquet_size(path: Path, shown: str | os.PathLike[str] | None = None) -> None:
    """Refuse a Parquet file whose columns expand past :func:`expansion_limit`, as a
    compressed report or trace is: the sizes its footer declares, read before any column
    is, each value counted as at least 8 bytes (a run-length encoded column of a million
    zeros declares a few kilobytes). A string column encoded through a dictionary declares
    the dictionary's size, while each of its values expands to a whole entry: it counts at
    the length of its values (see :func:`_dictionary_expansion`).

    Raises:
        ReportError: it declares more than the cap. A file that is not Parquet passes (its
            reading then says what it is).
    """
    import pyarrow.parquet as pq

    try:
        with open(path, "rb") as file:  # pyarrow opens no name that is not UTF-8
            metadata = pq.read_metadata(file)
    except Exception:  # noqa: BLE001 - pyarrow raises several types for non-Parquet input
        return
    limit = expansion_limit()
    expanded = 0
    dictionary_chunks: list[tuple[int, int]] = []  # (row group, column)
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for column in range(row_group.num_columns):  # a run of one value: 8 bytes each
            chunk = row_group.column(column)
            expanded += max(chunk.total_uncompressed_size, 8 * chunk.num_values)
            if chunk.has_dictionary_page and chunk.physical_type == "BYTE_ARRAY":
                dictionary_chunks.append((group, column))
    if expanded > limit:
        raise _refusal(shown or path, limit)
    if dictionary_chunks:
        expanded += _dictionary_expansion(path, metadata, dictionary_chunks, limit - expanded)
    if expanded > limit:
        raise _refusal(shown or path, limit)


def _dictionary_expansion(path: Path, metadata: Any, chunks: list[tuple[int, int]],
                          room: int) -> int:
    """The bytes the dictionary-encoded string ``chunks`` hold once each value is its whole
    entry (counted on top of what the footer declared for them); past ``room`` it returns
    as soon as it knows.

    While the chunks' values times their declared sizes fit in ``room`` together, nothing
    is read (no entry is longer than its whole chunk). Otherwise each chunk is read as
    indices and dictionary, which the footer check has already bounded (``8 x values`` and
    the declared size), and the lengths of the entries are summed over the indices. A
    nested column is not read: it counts at the bound.
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    extra = 0
    to_read: list[tuple[int, str]] = []
    bounds = 0
    for group, column in chunks:
        chunk = metadata.row_group(group).column(column)
        bound = chunk.num_values * chunk.total_uncompressed_size
        bounds += bound
        if "." in chunk.path_in_schema:
            extra += bound
        else:
            to_read.append((group, chunk.path_in_schema))
    if bounds <= room:
        return bounds
    if extra > room or not to_read:
        return extra
    try:
        with open(path, "rb") as file:  # pyarrow opens no name that is not UTF-8
            parquet = pq.ParquetFile(file, read_dictionary=sorted({n for _, n in to_read}))
            for group, name in to_read:
                for part in parquet.read_row_group(group, columns=[name]).column(0).chunks:
                    if hasattr(part, "indices"):
                        lengths = pc.binary_length(part.dictionary)
                        extra += pc.sum(pc.take(lengths, part.indices)).as_py() or 0
                    else:  # values stored plainly: counted by the footer already
                        continue
                    if extra > room:
                        return extra
    except Exception:  # noqa: BLE001 - a damaged file: its reading then says what it is
        return extra
    return extra
