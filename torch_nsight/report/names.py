"""Kernel names and launch shapes as people read them (pure string work, no reader needed)."""

from __future__ import annotations

import functools

# Kernels whose own name says nothing: their first template argument names the real work.
_WRAPPERS = frozenset({"Kernel", "Kernel2", "device_kernel", "kernel", "cutlass_kernel"})
# Demangler spellings of unnamed namespaces that would confuse the bracket scan below.
_PLACEHOLDERS = {"<unnamed>": "{unnamed}", "(anonymous namespace)": "{anonymous}"}


def _split_top_level(name: str) -> tuple[str, list[str]]:
    """Split ``ns::f<A, B<C>>(args)`` into (``ns::f``, [``A``, ``B<C>``]) at bracket depth 0."""
    head: list[str] = []
    args: list[str] = []
    current: list[str] = []
    angle = paren = 0
    for char in name:
        if char == "(" and angle == 0 and paren == 0:
            break  # the parameter list: everything after it is dropped
        if char == "<":
            angle += 1
            if angle == 1:
                continue
        elif char == ">" and angle > 0:
            angle -= 1
            if angle == 0:
                args.append("".join(current).strip())
                current = []
                continue
        elif char == "(":
            paren += 1
        elif char == ")":
            paren = max(paren - 1, 0)
        if angle == 0:
            head.append(char)
        elif char == "," and angle == 1 and paren == 0:
            args.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    return "".join(head), args


@functools.lru_cache(maxsize=8192)
def short_kernel_name(full_name: str) -> str:
    """Return the short name of a demangled kernel: no return type, namespace, template or
    parameter list.

    ``void at::native::vectorized_elementwise_kernel<4, ...>(int, T2, T3)`` becomes
    ``vectorized_elementwise_kernel``; a generic wrapper such as ``cutlass::Kernel2<Op>`` is
    named after its first template argument (``Op``).

    Args:
        full_name: the demangled kernel name as Nsight Compute stores it.

    Returns:
        The short name; ``full_name`` itself when it cannot be shortened.
    """
    name = full_name.strip()
    for placeholder, replacement in _PLACEHOLDERS.items():
        name = name.replace(placeholder, replacement)
    head, template_args = _split_top_level(name)
    tokens = head.split()
    if not tokens:
        return full_name.strip()
    short = tokens[-1].split("::")[-1] or tokens[-1]
    if short in _WRAPPERS and template_args and template_args[0]:
        inner = short_kernel_name(template_args[0])
        if inner:
            return inner
    return short


@functools.lru_cache(maxsize=8192)
def function_name(full_name: str) -> str:
    """Return the name Nsight Compute matches ``-k`` against by default (its ``function``
    name base): the function's own name, without return type, namespace, template or
    parameter list, and unlike :func:`short_kernel_name` never unwrapped
    (``void cutlass::Kernel2<Op>(...)`` is ``Kernel2``).

    Args:
        full_name: the demangled kernel name as Nsight Compute stores it.

    Returns:
        The function name; ``full_name`` itself when it has none.
    """
    name = full_name.strip()
    for placeholder, replacement in _PLACEHOLDERS.items():
        name = name.replace(placeholder, replacement)
    tokens = _split_top_level(name)[0].split()
    if not tokens:
        return full_name.strip()
    return tokens[-1].split("::")[-1] or tokens[-1]


def format_dims(x: float | None, y: float | None, z: float | None) -> str | None:
    """Return a launch dimension as ``"(x, y, z)"``, or None when any part is unknown.

    Args:
        x: size along x.
        y: size along y.
        z: size along z.

    Returns:
        The formatted triple, e.g. ``"(2, 64, 1)"``.
    """
    if x is None or y is None or z is None:
        return None
    return f"({int(x)}, {int(y)}, {int(z)})"
