"""Temporary old name of :mod:`torch_nsight.report.focused_kernels` (issue 35: one name per
idea), kept only for ``torch_nsight/collect/parent/focus.py``'s import; delete it once that
imports from :mod:`torch_nsight.report.focused_kernels`."""

from __future__ import annotations

from torch_nsight.report.focused_kernels import TIMELINE_FOLDER, focus_set, kernel_filter

__all__ = ["TIMELINE_FOLDER", "focus_set", "kernel_filter"]
