"""Fixtures of the capture-stage tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from capture_models import Recorder


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """A :class:`Recorder` whose instrumentations are removed after the test."""
    rec = Recorder()
    yield rec
    for handle in rec.handles:
        handle.remove()
