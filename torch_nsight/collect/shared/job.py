"""The job a sweep hands to its child process, and how it travels.

A job file holds two pickles back to back:

1. a plain-``pickle`` :class:`Assignment` (no user code): which shapes this child runs, where
   it writes its status lines and result JSON, and the parent's ``sys.path``, so that the
   child can import the user's modules *before* it reads the second part;
2. a ``cloudpickle`` :class:`Job`: the models or factories, ``make_inputs`` and the options.
   cloudpickle carries classes and functions defined in ``__main__`` or a notebook by value.

The file is code: it is written into a private directory (``tempfile.mkdtemp``: mode 0700)
with mode 0600 and deleted by the parent when the child is done.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch_nsight.naming import format_measure_range

JOB_FORMAT = 1
#: The file beside the job files that holds the model's tensor data.
TENSOR_FILE = "tensors.bin"
DTYPE_NAMES = {
    "bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
    "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32",
    "fp64": "float64", "float64": "float64", "double": "float64",
}


@dataclass
class Job:
    """What the child runs (pickled with cloudpickle).

    Attributes:
        variants: variant label -> ``nn.Module`` or zero-argument factory returning one. The
            label is ``""`` when a single model was given.
        shapes: (label, shape or config) pairs, in sweep order.
        make_inputs: ``make_inputs(shape)`` -> a tensor (one positional input), a tuple or
            list (positional inputs) or a dict (keyword inputs); None for
            ``torch.randn(shape)`` in the model's dtype.
        backward: run backward on ``sum(mean(output.float()))`` too.
        dtype: torch dtype name to cast the model (and default inputs) to; None keeps it.
        warmup: un-profiled iterations before each shape's measured ones.
        runs: measured iterations per shape (``run`` 0..runs-1).
        ops: passed to :func:`torch_nsight.instrument` (name functional ops).
        replicate: detect identical siblings and profile one of each group.
        settings: the parent's global PyTorch settings (see
            :func:`torch_nsight.capture.calls.settings.read_settings`), applied in the child.
        record_calls: record the calls table in one un-profiled iteration per shape.
    """

    variants: dict[str, Any]
    shapes: list[tuple[str, Any]]
    make_inputs: Callable[[Any], Any] | None = None
    backward: bool = False
    dtype: str | None = None
    warmup: int = 2
    runs: int = 1
    ops: Any = False
    replicate: bool = True
    settings: dict[str, Any] = field(default_factory=dict)
    record_calls: bool = True


@dataclass(frozen=True)
class Target:
    """A callable named by ``package.module:name`` or ``path/to/file.py:name``, imported only
    when called: the sweep's parent never imports the user's model, the child does.

    Attributes:
        spec: the name as the user wrote it, a file's path made absolute (the child may
            start elsewhere).
        role: what it names, for messages (``model``, ``make_inputs``, ``--inputs``...).

    Raises:
        ValueError: ``spec`` is not of either form, or names a file that does not exist or
            that plainly defines no such name.
    """

    spec: str
    role: str = "target"

    def __post_init__(self) -> None:
        module, sep, name = self.spec.rpartition(":")
        if not sep or not module or not name.isidentifier():
            raise ValueError(f"{self.role} {self.spec!r}: expected package.module:factory or "
                             "path/to/file.py:factory")
        if _names_a_file(module):
            path = Path(module).resolve()
            if not path.is_file():
                raise ValueError(f"{self.role} {self.spec!r}: {path} does not exist")
            if not _may_define(path, name):
                raise ValueError(f"{self.role} {self.spec!r}: {path.name} defines no {name!r}")
            object.__setattr__(self, "spec", f"{path}:{name}")

    def resolve(self) -> Callable[..., Any]:
        """Import the module (or run the file, once per process) and return the named
        callable.

        Raises:
            ImportError: the module or file cannot be imported, or has no such name.
        """
        import importlib
        import importlib.machinery
        import importlib.util

        module_name, _, name = self.spec.rpartition(":")
        if _names_a_file(module_name):
            path = Path(module_name)
            try:  # run once per process, and again when the file changes (a notebook)
                stat = path.stat()
            except OSError:
                raise ImportError(f"{self.role} {self.spec!r}: {path} does not exist") from None
            key = "_tn_target_{}_{:08x}".format(path.stem.replace(".", "_"), zlib.crc32(
                os.fsencode(f"{module_name}|{stat.st_mtime_ns}|{stat.st_size}")))
            module = sys.modules.get(key)
            if module is None:
                loader = importlib.util.spec_from_file_location(
                    key, path, loader=importlib.machinery.SourceFileLoader(key, str(path)))
                if loader is None or loader.loader is None:
                    raise ImportError(f"{self.role} {self.spec!r}: {path} cannot be "
                                      "imported")
                module = importlib.util.module_from_spec(loader)
                sys.modules[key] = module
                try:
                    loader.loader.exec_module(module)
                except BaseException:
                    del sys.modules[key]
                    raise
        else:
            try:
                module = importlib.import_module(module_name)
            except ImportError as err:
                raise ImportError(f"{self.role} {self.spec!r}: {err}") from err
        value = getattr(module, name, None)
        if value is None or not callable(value):
            raise ImportError(f"{self.role} {self.spec!r}: {module_name} has no callable "
                              f"{name!r}")
        return value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Resolve the target and call it."""
        return self.resolve()(*args, **kwargs)


def _names_a_file(module: str) -> bool:
    return module.endswith(".py") or os.sep in module or bool(os.altsep and os.altsep in module)


def _may_define(path: Path, name: str) -> bool:
    """Whether the file may bind ``name`` at module level, read without running it (so
    that a misspelt name fails here, not seconds later in the child). True whenever it
    cannot tell: unreadable or invalid source, ``import *``, a module ``__getattr__``, or
    anything that can set names at run time (``globals()``, ``setattr``, ``sys.modules``,
    ``exec``...), wherever it appears."""
    import ast

    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return True
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and node.id in _DYNAMIC
                or isinstance(node, ast.Attribute) and node.attr == "modules"
                or isinstance(node, ast.Global) and name in node.names):
            return True
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in (name, "__getattr__"):
                return True
            continue  # names bound inside belong to that scope
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" or (a.asname or a.name.split(".")[0]) == name
                   for a in node.names):
                return True
        elif isinstance(node, ast.Name) and node.id == name:
            return True
        elif isinstance(node, ast.Lambda):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


#: Names through which a module can bind names that no statement of it shows.
_DYNAMIC = frozenset({"globals", "locals", "vars", "exec", "eval", "setattr", "__import__"})


@dataclass
class Assignment:
    """This child's share of a job (plain pickle: nothing here needs user code).

    Attributes:
        shape_indices: indices into :attr:`Job.shapes` that this child runs.
        status_path: file the child appends JSON progress lines to.
        result_path: file the child writes its result JSON to (after every shape).
        sys_path: the parent's ``sys.path``, appended to the child's before unpickling.
        name: a short name for logs (``sweep`` or ``sweep-dev1``).
    """

    shape_indices: list[int]
    status_path: str
    result_path: str
    sys_path: list[str] = field(default_factory=list)
    name: str = "sweep"
    fmt: int = JOB_FORMAT


def label_shape(shape: Any) -> str:
    """Return the label of a shape: ``4x128`` for ``(4, 128)``, ``batch:4,seq:128`` for a
    dict, ``str(shape)`` otherwise.

    Args:
        shape: an int, a sequence of ints (``torch.Size`` too), a dict or any object.

    Returns:
        A label usable in the sweep's NVTX range (no ``;``, ``=`` or ``/``).
    """
    if isinstance(shape, int):  # bool too
        text = str(shape)
    elif isinstance(shape, Sequence) and not isinstance(shape, str) \
            and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        text = "x".join(str(d) for d in shape) or "scalar"
    elif isinstance(shape, Mapping):
        text = ",".join(f"{k}:{label_shape(v)}" for k, v in shape.items())
    else:
        text = str(shape)
    for bad, good in ((";", ","), ("=", ":"), ("/", "|")):
        text = text.replace(bad, good)
    return text


def normalize_shapes(shapes: Any) -> list[tuple[str, Any]]:
    """Turn the ``shapes`` argument of :func:`torch_nsight.sweep` into (label, shape) pairs.

    Args:
        shapes: a list of shapes or configs (labelled by :func:`label_shape`), or a mapping
            label -> shape or config.

    Returns:
        The pairs, in order.

    Raises:
        TypeError: ``shapes`` is a string or not a collection.
        ValueError: it is empty, or two shapes get the same label, or a label is invalid.
    """
    if isinstance(shapes, (str, bytes)):
        raise TypeError("shapes must be a list of shapes (or a dict label -> shape), "
                        f"not a string: {shapes!r}")
    if isinstance(shapes, Mapping):
        pairs = [(str(k), v) for k, v in shapes.items()]
    elif isinstance(shapes, Sequence) or hasattr(shapes, "__iter__"):
        items = list(shapes)
        if items and all(isinstance(d, int) and not isinstance(d, bool) for d in items):
            raise TypeError(f"shapes must be a list of shapes, got the single shape {items}: "
                            f"write shapes=[{tuple(items)}]")
        pairs = [(label_shape(s), s) for s in items]
    else:
        raise TypeError(f"shapes must be a list or a dict, got {type(shapes).__name__}")
    if not pairs:
        raise ValueError("shapes is empty: give at least one shape")
    labels = [label for label, _ in pairs]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ValueError(f"shapes has duplicate labels {duplicates}: pass a dict "
                         "label -> shape to name them")
    for label in labels:
        try:
            format_measure_range(shape=label)
        except ValueError as err:
            raise ValueError(f"shape label {label!r}: {err}") from err
    return pairs


def normalize_dtype(dtype: Any) -> str | None:
    """Return the torch dtype name for ``dtype`` (a ``torch.dtype``, ``"bf16"``...), or None.

    Raises:
        ValueError: the name is not a floating-point dtype torch_nsight knows.
        TypeError: ``dtype`` is neither None, a str nor a torch.dtype.
    """
    if dtype is None:
        return None
    if isinstance(dtype, str):
        name = DTYPE_NAMES.get(dtype.lower().removeprefix("torch."))
        if name is None:
            raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPE_NAMES)}")
        return name
    import torch

    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
        return str(dtype).removeprefix("torch.")
    raise TypeError(f"dtype must be a torch.dtype, a str or None, got {type(dtype).__name__}")


def make_private_dir(prefix: str = "torch_nsight-job-") -> Path:
    """Create a directory only the current user can read (mode 0700)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def serialize_job(job: Job, directory: Path | None = None) -> bytes:
    """Pickle ``job`` with cloudpickle, modules by reference (see
    :mod:`torch_nsight.collect.shared.pickling`).

    Args:
        job: the job.
        directory: where the model's tensor data is written, raw, beside the pickle
            (``tensors.bin``, owner-only; the children read it from there); None keeps it
            inside the pickle.

    Raises:
        TypeError: something in the job cannot be pickled (the message says what to do).
    """
    from torch_nsight.collect.shared.pickling import dumps

    try:
        if directory is None:
            return dumps(job)
        with open(directory / TENSOR_FILE, "wb",
                  opener=lambda path, flags: os.open(path, flags, 0o600)) as side:
            return dumps(job, side=side)
    except Exception as err:
        raise TypeError(
            f"the sweep's job could not be pickled for the child process ({type(err).__name__}: "
            f"{err}). Keep the model, its factory and make_inputs free of open files, locks, "
            "threads and CUDA streams; a model holding such state can be passed as a "
            "zero-argument factory that builds it") from err


def write_job(payload: bytes, assignment: Assignment, directory: Path) -> Path:
    """Write one job file (owner-only) into ``directory``.

    Args:
        payload: :func:`serialize_job` output (shared by every child of a sweep).
        assignment: this child's share.
        directory: a private directory (see :func:`make_private_dir`).

    Returns:
        The job file's path.
    """
    path = directory / f"{assignment.name}.job"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        pickle.dump(assignment, handle, protocol=pickle.HIGHEST_PROTOCOL)
        handle.write(payload)
    return path


def read_job(path: str | os.PathLike[str]) -> tuple[Assignment, Job]:
    """Read a job file written by :func:`write_job` (in the child).

    The parent's ``sys.path`` entries missing here are appended before the job is unpickled,
    so that models defined in the user's own modules import.

    Returns:
        (assignment, job).

    Raises:
        ValueError: the file is not a job file of this format.
    """
    from torch_nsight.collect.shared.pickling import load

    with open(path, "rb") as handle:
        assignment = pickle.load(handle)
        if not isinstance(assignment, Assignment) or assignment.fmt != JOB_FORMAT:
            raise ValueError(f"{path} is not a torch_nsight job file (format {JOB_FORMAT})")
        for entry in assignment.sys_path:
            if entry not in sys.path:
                sys.path.append(entry)
        job = load(handle)
    if not isinstance(job, Job):
        raise ValueError(f"{path} holds {type(job).__name__}, not a torch_nsight Job")
    return assignment, job


def parent_sys_path() -> list[str]:
    """The parent's ``sys.path`` with ``""`` made absolute (the current directory)."""
    return [entry or os.getcwd() for entry in sys.path]


def describe_job(job: Job) -> dict[str, Any]:
    """A JSON-ready description of ``job`` (what ``output_dir/job.json`` holds)."""

    def describe(value: Any) -> str:
        if isinstance(value, Target):
            return f"named {value.spec}"
        if isinstance(value, type):
            return f"class {value.__module__}.{value.__qualname__}"
        if hasattr(value, "named_parameters"):
            params = sum(p.numel() for p in value.parameters())
            return f"module {type(value).__module__}.{type(value).__qualname__} ({params} params)"
        name = getattr(value, "__qualname__", type(value).__qualname__)
        return f"factory {getattr(value, '__module__', '?')}.{name}"

    return {
        "variants": {label: describe(v) for label, v in job.variants.items()},
        "shapes": {label: repr(shape) for label, shape in job.shapes},
        "make_inputs": None if job.make_inputs is None else describe(job.make_inputs),
        "backward": job.backward, "dtype": job.dtype, "warmup": job.warmup,
        "runs": job.runs, "ops": job.ops if isinstance(job.ops, (bool, str)) else
        sorted(job.ops), "replicate": job.replicate, "settings": job.settings,
        "record_calls": job.record_calls,
    }
