"""Findings: the few fixes worth making, each with the time per run it may recover, as typed
records of codes (:class:`~.record.Finding`): what is wrong, in what kind of module, why,
and the fix with its parameters. Render words them (:mod:`torch_nsight.render.finding_words`);
nothing here reads a sentence.

Eight checks read the analyzed kernel table (and the calls table, the PyTorch settings and
a timeline where the profile has them): ``gemm_misaligned``, ``fp32_no_tensor_cores``,
``conv_no_tensor_cores``, ``optimizer_not_fused``, ``elementwise_chain``,
``layout_conversion``, ``nchw_kernels`` and ``small_grid``
(with ``latency_bound``); a timeline adds the rows of
:func:`~torch_nsight.analyze.timeline_analysis.timeline_findings`. A kernel claimed by an
earlier check is not reported again as ``small_grid``; Nsight Compute's own rules, where the
report has their sections, are evidence on the findings of their kernels
(:mod:`torch_nsight.analyze.rules`). ``profile --verify`` adds one more from the bare step
it timed (:mod:`.step_idle`). Rules, thresholds and gain formulas, with the gains
checked against recorded fixes, are in ``docs/findings.md``.

The package: :mod:`.codes` (the codes and which fixes fit which kind of module),
:mod:`.record` (the typed record), :mod:`.registry` (``@finding_check`` and the order checks
run in), one module per check (codes and numbers only), :mod:`.sites` (what a site is: its
module's kind, its layout, an optimizer's implementation), :mod:`.prepare` and :mod:`.calls`
(the tables the checks read) and :mod:`.table` (the front door).
"""

from torch_nsight.analyze.findings.call_shapes import gemm_dims
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.run_checks import findings, fold_findings

__all__ = ["Finding", "findings", "fold_findings", "gemm_dims"]
