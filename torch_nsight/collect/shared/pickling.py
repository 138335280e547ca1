"""Pickle the sweep's job with cloudpickle, modules included.

cloudpickle carries functions and classes defined in ``__main__`` or a notebook by value,
and with them the modules they use, by reference, but only modules whose type is exactly
``types.ModuleType``. PyTorch replaces some of its modules in ``sys.modules`` with instances
of ``ModuleType`` subclasses (``torch.backends.cudnn`` is a ``CudnnModule``,
``torch.backends`` a ``GenericModule``, ``torch.utils.deterministic`` a
``_Deterministic``...), which cloudpickle then tries to pickle as plain objects: a factory
that sets ``torch.backends.cudnn.benchmark`` fails with ``cannot pickle 'CudnnModule'
object``. :func:`dumps` pickles every module that ``sys.modules`` holds under its name by
reference (imported again by name when loaded), whatever its type, and leaves everything
else to cloudpickle.

Tensor data can travel beside the pickle instead of inside it. PyTorch pickles each storage
by running ``torch.save`` into a bytes object, which the child then reads back with
``torch.load``: for a 124M-parameter model that is half a gigabyte copied four times (about
6 s of the sweep on a 2-core machine). Given a side file, :func:`dumps` writes each storage of
:data:`SIDE_FILE_MIN_BYTES` or more into it once, raw (storages shared by several tensors are
written once and shared again when loaded), and the pickle holds only where to find it (a
pickle persistent id, read back by :func:`load`).
"""

from __future__ import annotations

import importlib
import io
import pickle
import sys
import types
from typing import IO, Any

import cloudpickle

__all__ = ["dumps", "load", "loads"]

#: Storages this large or larger go to the side file (smaller ones stay in the pickle).
SIDE_FILE_MIN_BYTES = 1 << 16
#: The persistent id's tag for a storage in a side file.
SIDE_FILE_STORAGE = "torch_nsight.side_file_storage"


def _pickled_by_value(module: types.ModuleType) -> bool:
    """Whether the user asked cloudpickle to pickle ``module`` by value."""
    check = getattr(cloudpickle.cloudpickle, "_is_registered_pickle_by_value", None)
    try:
        return bool(check(module)) if check is not None else False
    except Exception:  # a cloudpickle whose private helper changed
        return False


class ModulePickler(cloudpickle.CloudPickler):
    """A ``CloudPickler`` that pickles importable modules by reference, subclasses too.

    A module is importable when ``sys.modules[module.__name__]`` is that very module.
    Modules registered with ``cloudpickle.register_pickle_by_value`` and modules that are
    not importable are left to cloudpickle.
    """

    def __init__(self, file: IO[bytes], *, side: IO[bytes] | None = None, **kwargs: Any
                 ) -> None:
        super().__init__(file, **kwargs)
        self._side = side
        self._written: dict[tuple[int, int], tuple[int, int]] = {}  # (ptr, nbytes) -> offset
        torch = sys.modules.get("torch")  # never imported here: a job without torch has none
        self._storage_type = getattr(getattr(torch, "storage", None), "TypedStorage", None)

    def reducer_override(self, obj: Any) -> Any:
        """Reduce importable modules to ``importlib.import_module(name)``."""
        if isinstance(obj, types.ModuleType):
            name = getattr(obj, "__name__", None)
            if isinstance(name, str) and sys.modules.get(name) is obj \
                    and not _pickled_by_value(obj):
                return importlib.import_module, (name,)
        return super().reducer_override(obj)

    def persistent_id(self, obj: Any) -> Any:
        """A large tensor storage: write it to the side file (once) and pickle its place."""
        if self._side is None or self._storage_type is None \
                or type(obj) is not self._storage_type:
            return None
        untyped = obj._untyped_storage
        if untyped.device.type not in ("cpu", "cuda") or untyped.nbytes() < SIDE_FILE_MIN_BYTES:
            return None
        key = (untyped.data_ptr(), untyped.nbytes())
        if key not in self._written:
            import torch

            data = torch.empty(0, dtype=torch.uint8, device=untyped.device).set_(untyped)
            self._written[key] = (self._side.tell(), untyped.nbytes())
            self._side.write(data.cpu().numpy().data)  # a memoryview of the array
        offset, nbytes = self._written[key]
        return SIDE_FILE_STORAGE, self._side.name, offset, nbytes, obj.dtype


class _SideFileUnpickler(pickle.Unpickler):
    """Reads storages from the side file their persistent ids name (on the CPU), each once:
    storages shared when pickled are shared again."""

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file)
        self._storages: dict[tuple[str, int], Any] = {}

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == SIDE_FILE_STORAGE):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        import torch

        _, path, offset, nbytes, dtype = pid
        if (path, offset) not in self._storages:
            data = torch.empty(nbytes, dtype=torch.uint8)
            with open(path, "rb") as handle:
                handle.seek(offset)
                if handle.readinto(data.numpy().data) != nbytes:
                    raise pickle.UnpicklingError(f"{path} ends before the tensor data it "
                                                 f"should hold at {offset} (+{nbytes} bytes)")
            self._storages[path, offset] = data.untyped_storage()
        return torch.storage.TypedStorage(wrap_storage=self._storages[path, offset],
                                          dtype=dtype, _internal=True)


def dumps(obj: Any, *, side: IO[bytes] | None = None) -> bytes:
    """Pickle ``obj`` as ``cloudpickle.dumps`` does, modules of any type by reference.

    Args:
        obj: Anything cloudpickle can pickle, or that only failed for holding a module
            whose type is a ``ModuleType`` subclass (``torch.backends.cudnn``).
        side: an open binary file (with a ``name`` the loading process can open) for large
            tensor storages; None keeps them inside the pickle. Keep it until loaded.

    Returns:
        The pickle, to be read back with :func:`loads` (``pickle.loads`` too when no side
        file was given) in a process that can import the same modules.

    Raises:
        pickle.PicklingError: If something in ``obj`` cannot be pickled (also TypeError or
            AttributeError, as cloudpickle raises them).
    """
    with io.BytesIO() as buffer:
        ModulePickler(buffer, side=side, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return buffer.getvalue()


def loads(data: bytes) -> Any:
    """Unpickle what :func:`dumps` wrote (tensors written to a side file are read from it, on
    the CPU).

    Args:
        data: The pickle.

    Returns:
        The object.

    Raises:
        pickle.UnpicklingError: If ``data`` is not a pickle (also ImportError when a
            module it refers to cannot be imported here).
    """
    with io.BytesIO(data) as handle:
        return load(handle)


def load(handle: IO[bytes]) -> Any:
    """Unpickle one object from an open file, as :func:`loads` does."""
    return _SideFileUnpickler(handle).load()
