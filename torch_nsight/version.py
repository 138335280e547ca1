"""The package's version, in a module of its own: the CLI reads it without the package root."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
