"""Findings: the few fixes worth making, each with the time per run it may recover.

Five checks read the analyzed kernel table (and the calls table, the PyTorch settings and a
timeline where the profile has them): ``gemm_misaligned``, ``fp32_no_tensor_cores``,
``elementwise_chain``, ``layout_conversion`` and ``small_grid``; a timeline adds the rows of
:func:`~torch_nsight.analyze.timeline_analysis.timeline_findings`. A kernel claimed by one of the
first four is not reported again as ``small_grid``; Nsight Compute's own rules, where the
report has their sections, add ``ncu_<rule>`` rows (:mod:`torch_nsight.analyze.rules`).
Rules, thresholds and gain formulas, with the gains checked against recorded fixes, are in
``docs/findings.md``.

The package: :mod:`.registry` (``@finding_check`` and the order checks run in), one module
per check (numbers only), :mod:`.wording` (evidence sentences and fixes), :mod:`.prepare`
and :mod:`.calls` (the tables the checks read) and :mod:`.table` (the front door).
"""

from torch_nsight.analyze.findings.calls import gemm_dims
from torch_nsight.analyze.findings.table import findings, fold_findings

__all__ = ["findings", "fold_findings", "gemm_dims"]
