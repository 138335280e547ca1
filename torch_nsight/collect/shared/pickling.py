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
"""

from __future__ import annotations

import importlib
import io
import pickle
import sys
import types
from typing import Any

import cloudpickle

__all__ = ["dumps", "loads"]


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

    def reducer_override(self, obj: Any) -> Any:
        """Reduce importable modules to ``importlib.import_module(name)``."""
        if isinstance(obj, types.ModuleType):
            name = getattr(obj, "__name__", None)
            if isinstance(name, str) and sys.modules.get(name) is obj \
                    and not _pickled_by_value(obj):
                return importlib.import_module, (name,)
        return super().reducer_override(obj)


def dumps(obj: Any) -> bytes:
    """Pickle ``obj`` as ``cloudpickle.dumps`` does, modules of any type by reference.

    Args:
        obj: Anything cloudpickle can pickle, or that only failed for holding a module
            whose type is a ``ModuleType`` subclass (``torch.backends.cudnn``).

    Returns:
        The pickle, to be read back with :func:`loads` (or ``pickle.loads``) in a process
        that can import the same modules.

    Raises:
        pickle.PicklingError: If something in ``obj`` cannot be pickled (also TypeError or
            AttributeError, as cloudpickle raises them).
    """
    with io.BytesIO() as buffer:
        ModulePickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return buffer.getvalue()


def loads(data: bytes) -> Any:
    """Unpickle what :func:`dumps` wrote (plain ``pickle.loads``).

    Args:
        data: The pickle.

    Returns:
        The object.

    Raises:
        pickle.UnpicklingError: If ``data`` is not a pickle (also ImportError when a
            module it refers to cannot be imported here).
    """
    return pickle.loads(data)
