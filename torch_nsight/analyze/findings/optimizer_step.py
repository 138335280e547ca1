"""``optimizer_not_fused``: an optimizer's step that ran op by op; gain: its time minus one
fused pass over its data.

The profile names the optimizer's class (the ``step:<class>`` range reads back as module
``AdamW``, direction ``step``) but not the flags it was made with: how the step ran is
read from its kernels (:func:`~.sites.optimizer_impl`). A step whose kernels are
``Fused*Functor`` ones already runs fused and gets nothing; a ``foreach`` step (one
multi-tensor kernel per op over all parameters) or a loop over parameters gets its own
class's flag: ``fused=True`` where the class has a fused CUDA implementation (Adam, AdamW,
SGD), ``foreach=True`` for a loop where it has only that, ``torch.compile`` of the step
otherwise. Multi-tensor kernels outside a step range are an optimizer's too, its class then
unknown; one op alone (plain SGD's ``_foreach_add_``) is already one pass.
"""

from __future__ import annotations

from torch_nsight.analyze.findings.codes import FOREACH_OPTIMIZERS, FUSED_OPTIMIZERS, FixCode
from torch_nsight.analyze.findings.prepare import per_run
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.registry import Context, finding_check
from torch_nsight.analyze.findings.sites import foreach_ops, optimizer_class, optimizer_impl
from torch_nsight.vocabulary import LABELS

#: A step of fewer passes over the parameters than this is one fused pass already.
MIN_PASSES = 2


def _fix(optimizer: str | None, impl: str) -> tuple[FixCode, dict[str, object]]:
    """The optimizer's own flag (or a compile of its step) for how it ran."""
    if optimizer is None or optimizer in FUSED_OPTIMIZERS:
        return "optimizer_fused", {"optimizer": optimizer, "flag": "fused",
                                   "classes": sorted(FUSED_OPTIMIZERS)}
    if impl == "for_loop" and optimizer in FOREACH_OPTIMIZERS:
        return "optimizer_foreach", {"optimizer": optimizer, "flag": "foreach"}
    return "compile_optimizer_step", {"optimizer": optimizer}


@finding_check("optimizer_not_fused")
def optimizer_not_fused(context: Context) -> list[Finding]:
    """One finding per optimizer step (per label and optimizer) that did not run fused."""
    work = context.work
    steps = work[work["is_optimizer"]]
    found: list[Finding] = []
    for _, rows in steps.groupby([*LABELS, "module_path", "direction"], sort=False):
        impl = optimizer_impl(rows["kernel_full"], rows["kernel"])
        if impl in ("fused", "compiled"):
            continue  # fused already: nothing to advise
        optimizer = optimizer_class(rows["direction"].iat[0], rows["module"].iat[0])
        passes = (len(foreach_ops(rows["kernel_full"])) if impl == "foreach"
                  else int(len(rows) / rows["runs"].iloc[0]))
        if passes < MIN_PASSES:
            continue
        known = rows["dram_bytes"].notna().all() and rows["dram_bytes"].sum() > 0
        # one fused pass moves about what the largest of its per-op kernels moves
        gain = (per_run(rows) * (1 - rows["dram_bytes"].max() / rows["dram_bytes"].sum())
                if known else float("nan"))
        fix, params = _fix(optimizer, impl)
        found.append(Finding(
            "optimizer_not_fused", rows, gain, "roofline", "medium", fix, cause="optimizer",
            module_kind="optimizer", module_class=optimizer, optimizer=optimizer,
            optimizer_impl=impl, fix_params=params,
            facts={"kernels_per_run": len(rows) / rows["runs"].iloc[0], "passes": passes,
                   "time_ns": per_run(rows),
                   "traffic_bytes": per_run(rows, rows["dram_bytes"]) if known else None,
                   "one_pass_bytes": float(rows["dram_bytes"].max()) if known else None}))
    return found
