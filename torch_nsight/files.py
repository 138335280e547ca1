"""Writing files safely: whole or not at all, never through a planted link, one writer per
output folder.

:func:`atomic_output` gives a writer a temporary file created exclusively (a fresh name,
``O_EXCL | O_NOFOLLOW``) in the target's own folder and renames it into place once written;
on any failure, an interrupt included, the temporary file goes and the target is untouched
(a full disk leaves no 0-byte output behind). A full disk or a file-size limit becomes one
:class:`~torch_nsight.errors.OutputWriteError` naming the path and the free space.
:func:`locked_folder` keeps a second process from writing the same output folder at the
same time. :func:`path_text` writes a path whose name is not UTF-8 as text that can be
stored and printed. Stage-neutral: no torch, no pandas.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from torch_nsight.errors import OutputBusyError, OutputWriteError

__all__ = ["atomic_output", "locked_folder", "rank_lock", "gzip_file", "LOCK_NAME", "write_error",
           "is_full", "free_space", "path_text"]

#: The lock file of an output folder being written (removed when the writer is done).
LOCK_NAME = ".torch_nsight.lock"
_FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: (folder, lock file's name) -> (lock file descriptor, holders)
_held: dict[tuple[Path, str], tuple[int, int]] = {}


def _size(count: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def is_full(err: BaseException) -> bool:
    """Whether ``err`` says the disk is full or a file-size limit was reached."""
    return isinstance(err, OSError) and err.errno in _FULL


def free_space(folder: Path) -> str:
    """``"1.2 GiB free there"``: the free space of ``folder``'s file system, in words."""
    try:
        return f"{_size(shutil.disk_usage(folder).free)} free there"
    except OSError:
        return "free space unknown"


def write_error(path: Path, err: OSError) -> OutputWriteError:
    """The one-line error of a failed write of ``path``: for a full disk or a file-size
    limit, the free space of its folder and what to do."""
    reason = err.strerror or str(err)
    if is_full(err):
        return OutputWriteError(f"cannot write {path}: {reason} ({free_space(path.parent)}); "
                                "free some space or raise the file-size limit (ulimit -f), "
                                "or write elsewhere")
    return OutputWriteError(f"cannot write {path}: {reason}")


#: The longest file name most file systems take, in bytes.
NAME_MAX = 255


def path_text(path: str | os.PathLike[str]) -> str:
    """``path`` as text that Parquet, JSON and a terminal take: a byte of a name that is not
    UTF-8 (Python holds it as a lone surrogate, ``"\\udcff"``) is written ``\\xff``, as
    ``ls -b`` shows it. For a table's ``source`` and messages; open files by the path."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _name_within(name: str, limit: int) -> str:
    """``name`` cut to at most ``limit`` bytes on a character (a temporary name beside a
    legal 244-byte output name must stay legal too); a byte of a name that is not UTF-8 is
    kept as it is."""
    kept, size = [], 0
    for char in name:
        size += len(os.fsencode(char))
        if size > max(limit, 1):
            break
        kept.append(char)
    return "".join(kept) or "out"


def _create(target: Path) -> Path:
    """A new, empty file beside ``target``, created exclusively (mode 0666 less the umask:
    a team can share the folder)."""
    for _ in range(100):
        tail = f".{os.getpid()}.{secrets.token_hex(4)}.tmp"
        temp = target.with_name(f".{_name_within(target.name, NAME_MAX - 1 - len(tail))}{tail}")
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666))
        except FileExistsError:
            continue
        return temp
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target))


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path to write instead of ``path``; renamed over it on success.

    Args:
        path: the file to write (an existing one, or a link there, is replaced, never
            written through).

    Yields:
        The temporary file (exclusively created, empty) in ``path``'s folder.

    Raises:
        OutputWriteError: the disk is full or the file-size limit was reached (the
            temporary file is removed, ``path`` untouched).
    """
    target = Path(path)
    try:
        temp = _create(target)
    except OSError as err:
        raise write_error(target, err) from err
    try:
        yield temp
        os.replace(temp, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(err, OSError) and is_full(err):
            raise write_error(target, err) from err
        raise


def gzip_file(source: Path) -> Path:
    """Compress ``source`` into ``source.gz`` (whole or not at all), then remove it.

    Returns:
        The compressed file.
    """
    import gzip

    packed = source.with_name(source.name + ".gz")
    with atomic_output(packed) as temp, open(source, "rb") as src, \
            gzip.open(temp, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    source.unlink()
    return packed


@contextlib.contextmanager
def locked_folder(folder: str | os.PathLike[str], name: str = LOCK_NAME) -> Iterator[Path]:
    """Hold ``folder`` (created if missing) as this process's output folder while the
    ``with`` block runs; the same process may enter it again (a focused sweep's passes).

    Args:
        folder: the output folder.
        name: the lock file's name: one per writer of its own files in a shared folder (the
            ranks of ``profile --ranks``, each writing ``report-rank<R>``: :func:`rank_lock`).

    Raises:
        OutputBusyError: another process holds it.
    """
    where = Path(folder).resolve()
    try:
        where.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:
        raise OutputWriteError(f"cannot use {folder} as an output folder: it, or a folder it "
                               "lies in, is a file; name a folder") from err
    key = (where, name)
    if key in _held:
        handle, holders = _held[key]
        _held[key] = (handle, holders + 1)
    else:
        _held[key] = (_lock(where, name), 1)
    try:
        yield where
    finally:
        handle, holders = _held.pop(key)
        if holders > 1:
            _held[key] = (handle, holders - 1)
        else:
            with contextlib.suppress(OSError):
                os.unlink(where / name)
            os.close(handle)  # closing releases the lock


def rank_lock(rank: int | None) -> str:
    """The lock file's name of a writer of an output folder: :data:`LOCK_NAME`, or one per
    rank of a distributed run, whose ranks write their own files into one folder."""
    return LOCK_NAME if rank is None else f".torch_nsight-rank{rank}.lock"


def _lock(folder: Path, name: str = LOCK_NAME) -> int:
    """Lock ``folder``'s lock file ``name``, writing this process's id in it."""
    try:
        import fcntl
    except ImportError:  # no advisory locks (Windows): nothing to hold
        return os.open(os.devnull, os.O_RDONLY)
    handle = os.open(folder / name, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o666)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        holder = os.read(handle, 32).decode(errors="replace").strip() or "unknown"
        os.close(handle)
        if err.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        raise OutputBusyError(f"{folder} is being written by process {holder}: wait for it "
                              "to finish, or choose another output folder") from None
    os.ftruncate(handle, 0)
    os.write(handle, f"{os.getpid()}\n".encode())
    return handle
