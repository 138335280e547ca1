"""What the range stack holds: a :class:`Range` (one range message, prepared once at
instrument time) and a :class:`BackwardFrame` (the backward range of one module call, with
the :class:`BackwardTask` it is open for). The rules for opening and closing them are the
stack's (:mod:`torch_nsight.capture.ranges.stack`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch_nsight.capture.ranges.emitter import RangeEmitter

__all__ = ["Range", "BackwardFrame", "BackwardTask"]


class Range:
    """One range message that the capture stage can open, prepared once at instrument time.

    Attributes:
        message: The NVTX message.
        name: Qualified module name (``""`` for the root module) or op name.
        emitter: Where pushes and pops of this range go.
        open: Zero-argument callable that pushes the range (from the emitter's ``bind``
            when it has one, else ``emitter.push(message)``).
        close: Zero-argument callable that pops it.
        owner: The object that created the range (an :class:`Instrumentation`).
        is_module: True for module ranges, False for op ranges.
        names_ops: Whether functional ops called directly inside this range get ranges of
            their own (False for PyTorch's own leaf modules such as ``nn.SiLU``, whose
            range already names their single op).
    """

    __slots__ = ("message", "name", "prefix", "emitter", "owner", "is_module", "names_ops",
                 "open", "close")

    def __init__(
        self,
        message: str,
        name: str,
        emitter: RangeEmitter,
        owner: object = None,
        *,
        is_module: bool = True,
        names_ops: bool = True,
    ) -> None:
        self.message = message
        self.name = name
        self.prefix = f"{name}." if name else ""
        self.emitter = emitter
        self.owner = owner
        self.is_module = is_module
        self.names_ops = names_ops
        bind = getattr(emitter, "bind", None)
        if bind is not None:  # the emitter's own prebuilt calls (NVTX event attributes)
            self.open, self.close = bind(message)
        else:
            self.open, self.close = functools.partial(emitter.push, message), emitter.pop

    def contains(self, other: Range) -> bool:
        """Whether ``other`` is a module strictly inside this range's module."""
        return other.name != self.name and other.name.startswith(self.prefix)

    def __repr__(self) -> str:
        return f"Range({self.message!r})"


class BackwardTask:
    """One backward pass (an autograd graph task) seen on one thread."""

    __slots__ = ("task_id", "done")

    def __init__(self, task_id: int) -> None:
        self.task_id = task_id
        self.done = False


class BackwardFrame:
    """The backward range of one module call, made in its forward when gradients are on.

    Attributes:
        range: The module's backward range.
        parent: The frame of the instrumented call this one ran inside, or None.
        deferred: True when no input node closes it: the range closes when something
            outside it starts or its backward pass ends.
        task: The backward pass it is open for, or None.
        graph_task: Id of the last autograd graph task that opened it.
        is_open: Whether the range is open now (on some thread).
    """

    __slots__ = ("range", "parent", "deferred", "task", "graph_task", "is_open")

    def __init__(self, rng: Range, parent: BackwardFrame | None = None,
                 deferred: bool = False) -> None:
        self.range = rng
        self.parent = parent
        self.deferred = deferred
        self.task: BackwardTask | None = None
        self.graph_task = -2
        self.is_open = False

    def inside(self, other: BackwardFrame) -> bool:
        """Whether this call ran inside ``other``'s call, or its module is a submodule."""
        if other.range.contains(self.range):
            return True
        parent = self.parent
        while parent is not None:
            if parent is other:
                return True
            parent = parent.parent
        return False

    def __repr__(self) -> str:
        return f"BackwardFrame({self.range.message!r}, deferred={self.deferred})"
