"""What is particular to a sweep on the engine's route (:class:`~.plan.SweepPlan`'s methods):
its children (``ncu <flags> python -m torch_nsight.collect.child.start <job>``, one per GPU
or one per shape on an executor), its manifest (``sweep.json``), and its directory read back
(``torch_nsight.load(output_dir)``: every report, replicated rows, the calls table and what
happened per shape), with the asked columns derived and the profile saved.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_nsight import formats
from torch_nsight.collect.parent.engine import Manifest, Settled, child_env
from torch_nsight.collect.parent.launch import ChildSpec
from torch_nsight.collect.parent.outcomes import replication_groups
from torch_nsight.collect.shared import job as jobs
from torch_nsight.collect.shared import timing as timings
from torch_nsight.environment import EARLY_CUDA_ENV
from torch_nsight.record import CollectionRecord, now

if TYPE_CHECKING:
    from torch_nsight.collect.parent.plan import SweepPlan
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

WORKER_MODULE = "torch_nsight.collect.child.start"


def child_specs(plan: SweepPlan, private: Path) -> list[ChildSpec]:
    """One child per device (shapes dealt round-robin), each with its own job file; with an
    executor, one child per shape (its own job), devices dealt round-robin. A kept sweep
    writes its job description (``job.json``) too."""
    payload = jobs.serialize_job(plan.job, private)
    shapes, variants, visible = plan.shape_labels, list(plan.job.variants), plan.visible
    devices, work, keep = plan.devices, plan.work, plan.keep
    ncu_command = None if plan.ncu is None else plan.build_ncu_command
    specs = []
    n_shapes = len(shapes)
    slots = ([([i], visible[i % len(visible)], f"sweep-shape{i}") for i in range(n_shapes)]
             if plan.executor is not None else
             [(list(range(n_shapes))[slot::len(visible)], device,
               formats.sweep_child(None if devices is None else devices[slot]))
              for slot, device in enumerate(visible)])
    for indices, device, name in slots:
        if not indices:
            continue
        assignment = jobs.Assignment(indices, str(work / f"{name}.status.jsonl"),
                                     str(work / f"{name}.result.json"),
                                     jobs.parent_sys_path(), name)
        app = [sys.executable, "-m", WORKER_MODULE,
               str(jobs.write_job(payload, assignment, private))]
        report = None if ncu_command is None else work / f"{name}.ncu-rep"
        if report is not None:
            report.unlink(missing_ok=True)
        env = child_env(device)
        if ncu_command is None:  # a dry run: the CUDA context comes when (if) torch wants it
            env[EARLY_CUDA_ENV] = "0"
        specs.append(ChildSpec(
            name, app if ncu_command is None else ncu_command(work / name, app),
            env, Path(assignment.status_path), Path(assignment.result_path),
            report, work / f"{name}.log" if keep else None, len(indices) * len(variants),
            [(v or None, shapes[i]) for i in indices for v in variants]))
    if keep:
        description = {**jobs.describe_job(plan.job), "options": plan.options,
                       "commands": {s.name: s.command for s in specs}, "created": now()}
        formats.write_json(work / formats.SWEEP_JOB, description)
    return specs


def manifest(plan: SweepPlan, settled: Settled, timing: dict[str, Any]) -> Manifest:
    """The sweep's manifest record: its items (their calls rows apart), the children's
    reports, the replicated groups, the calls table and the settings the children ran with
    (the parent's, and whatever a factory changed)."""
    items = [{k: v for k, v in item.items() if k != "calls"} for item in settled.items]
    calls = [{**row, "variant": item.get("variant") or None, "shape": item.get("shape")}
             for item in settled.items for row in item.get("calls") or []]
    record = CollectionRecord(
        shapes=tuple(plan.shape_labels), variants=tuple(v for v in plan.job.variants if v),
        options=plan.options, items=tuple(items), problems=tuple(settled.problems),
        commands={o.spec.name: o.spec.command for o in settled.outcomes},
        output_dir=str(plan.work) if plan.keep else None, dry_run=plan.ncu is None,
        created=settled.created, timing=timing)
    ran = next((c["settings"] for c in settled.children if c.get("settings")),
               plan.job.settings)
    return Manifest(plan.work / formats.SWEEP_MANIFEST, record, settled.children,
                    replication_groups(items), calls, ran, tag=formats.SWEEP_KIND)


def load(plan: SweepPlan) -> Profile:
    """Read the sweep directory back and derive the asked columns."""
    from torch_nsight.loading import load as load_folder

    profile = load_folder(plan.work, cache=plan.keep)
    if plan.derive:
        from torch_nsight.analyze import derive_columns

        profile = profile.with_kernels(derive_columns(profile.kernels, plan.derive,
                                                      dict(plan.job.shapes)))
    return profile


def finish(plan: SweepPlan, profile: Profile, final: Manifest) -> Profile:
    """The profile with its final timing (loading included), logged once; saved into a
    kept sweep's directory."""
    timing = final.record.timing
    logger.info("sweep took %s", timings.describe(timing))
    sweeps = tuple(dataclasses.replace(s, timing=timing) for s in profile.meta.sweeps)
    profile = dataclasses.replace(profile, meta=dataclasses.replace(profile.meta,
                                                                    sweeps=sweeps))
    if plan.keep:
        _save(profile, plan.work)
    return profile


def _save(profile: Profile, work: Path) -> None:
    try:
        path = profile.save(work / formats.PROFILE_FILE)
    except OSError as err:  # the Profile is still returned
        logger.warning("could not save the profile into %s: %s", work, err)
        return
    logger.info("saved %s", path)
