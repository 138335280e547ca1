"""Turn what the children left (reports, result JSON, ncu output) into one Profile.

Per child: check ncu's output (:func:`torch_nsight.collect.ncu.raise_for_output`), load its
report, copy the rows of replicated siblings (:func:`expand_replicas`); then merge the
children (``Profile.concat``) and record each (variant, shape)'s status in ``meta``.
A shape that failed costs only itself: its error is in ``meta["failures"]``, and
:class:`ShapeFailedError` is raised only when every shape failed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torch_nsight.collect.expand import expand_replicas
from torch_nsight.collect.launch import ChildOutcome
from torch_nsight.collect.ncu import raise_for_output
from torch_nsight.errors import CounterPermissionError, ShapeFailedError, TorchNsightError

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)


def child_items(outcome: ChildOutcome) -> list[dict[str, Any]]:
    """The (variant, shape) records of one child, with what the parent knows added: a child
    that died leaves its unfinished items as failed, with its last output lines."""
    results = outcome.results or {}
    items = [dict(item, child=outcome.spec.name) for item in results.get("items", [])]
    died = results.get("fatal") or (
        None if results.get("finished") else
        f"the child process ended (exit status {outcome.returncode}) before finishing"
        + (f"; it was stopped because {outcome.stopped}" if outcome.stopped else "")
        + f". Its last output lines:\n{outcome.output.last_lines(12)}")
    for item in items:
        if item.get("status") in ("pending", "running"):
            item.update(status="failed", error=died)
    if not items and not results.get("finished"):
        items = [{"variant": None, "shape": None, "status": "failed", "error": died,
                  "child": outcome.spec.name}]
    return items


def why_nothing(results: dict[str, Any] | None, items: list[dict[str, Any]]) -> str:
    """The likely reason a child's ncu profiled nothing, from its results."""
    if results is None:
        return ("The child exited before it wrote its results: " + (items[0].get("error") or "")
                if items else "The child exited before it wrote its results.")
    if results.get("device") == "cpu":
        return ("The model ran on the CPU: torch.cuda.is_available() was False in the child "
                "(check CUDA_VISIBLE_DEVICES, the driver, and that torch is a CUDA build).")
    failed = [i for i in items if i.get("status") != "ok"]
    if items and len(failed) == len(items):
        return "Every shape failed in the child: " + "; ".join(
            f"{i.get('shape')}: {i.get('error')}" for i in failed[:3])
    return (f"The child ran on {results.get('device')} but no CUDA kernel launched inside the "
            "torch_nsight@measure range: do a factory or make_inputs keep the model or inputs "
            "on the CPU, or do ncu_args (--kernel-name, --launch-count) filter every kernel?")


def replication_groups(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The verified sibling groups of every item, labelled by variant and shape (failed
    items too: the runs they measured before failing had their replicas left out)."""
    return [{**group, "variant": item.get("variant"), "shape": item.get("shape")}
            for item in items
            for group in (item.get("replication") or {}).get("groups", [])]


def _empty_profile() -> Profile:
    import pandas as pd

    from torch_nsight.profile import KERNEL_COLUMNS, Profile

    return Profile(pd.DataFrame({c: pd.Series(dtype=object)
                                 for c in (*KERNEL_COLUMNS, "replicated_from")}), {})


def assemble(outcomes: Sequence[ChildOutcome], *, variants: Sequence[str],
             shapes: Sequence[str], dry_run: bool, cache: bool = True) -> Profile:
    """Merge the children's results into one Profile.

    Args:
        outcomes: how each child ended.
        variants: variant labels, in order (``""`` for a single model).
        shapes: shape labels, in order.
        dry_run: no ``ncu`` ran (no reports to load).
        cache: let the report reader keep its cache next to each report.

    Returns:
        The profile, with ``meta`` keys ``results``, ``failures``, ``replication``,
        ``reports``, ``dry_run``, ``shapes``, ``variants``.

    Raises:
        CounterPermissionError: counters not permitted.
        ShapeFailedError: every (variant, shape) failed.
        NothingProfiledError, TorchNsightError: no child produced a usable report.
    """
    from torch_nsight.profile import Profile, load

    profiles: list[Profile] = []
    errors: list[TorchNsightError] = []
    items: list[dict[str, Any]] = []
    for outcome in outcomes:
        mine = child_items(outcome)
        items.extend(mine)
        if dry_run or outcome.spec.report_path is None:
            continue
        report = outcome.spec.report_path
        try:
            raise_for_output(outcome.output, report_exists=report.is_file(),
                             returncode=outcome.returncode,
                             why_nothing=why_nothing(outcome.results, mine))
        except CounterPermissionError:
            raise
        except TorchNsightError as err:
            errors.append(err)
            continue
        profile = load([report], cache=cache)
        profile.kernels = expand_replicas(profile.kernels, replication_groups(mine))
        profiles.append(profile)

    failures = [{"variant": i.get("variant") or None, "shape": i.get("shape"),
                 "status": i.get("status"), "error": i.get("error"), "child": i.get("child")}
                for i in items if i.get("status") != "ok"]
    real = [i for i in items if i.get("shape") is not None]
    if not real:  # no child got as far as writing its results
        raise errors[0] if errors else TorchNsightError(
            "the sweep's child wrote no results: " + str(items[0]["error"] if items else ""))
    if len(failures) == len(items):
        raise ShapeFailedError("every shape failed: " + "; ".join(
            f"{f['shape']}{' (' + f['variant'] + ')' if f['variant'] else ''}: {f['error']}"
            for f in failures[:5]) + ("" if len(failures) <= 5 else f"; and {len(failures) - 5} "
                                      "more (see the log)"))
    if not dry_run and not profiles:
        raise errors[0] if errors else TorchNsightError("no child produced a report")
    for err in errors:
        logger.warning("a child produced no usable report (its shapes are missing): %s", err)
        failures.append({"variant": None, "shape": None, "status": "no report",
                         "error": str(err), "child": None})
    for failure in failures:
        logger.warning("shape %s%s %s: %s", failure["shape"],
                       f" ({failure['variant']})" if failure["variant"] else "",
                       failure["status"], failure["error"])
    profile = (_empty_profile() if dry_run else
               profiles[0] if len(profiles) == 1 else Profile.concat(profiles))
    if "replicated_from" not in profile.kernels:
        profile.kernels["replicated_from"] = None
    replicated = int(profile.kernels["replicated_from"].notna().sum())
    profile.meta.update({
        "dry_run": dry_run,
        "shapes": list(shapes),
        "variants": [v for v in variants if v],
        "failures": failures,
        "results": items,
        "replication": {f"{i.get('variant') or ''}|{i.get('shape')}": i.get("replication")
                        for i in items if i.get("replication")},
        "replicated_rows": replicated,
        "reports": [str(o.spec.report_path) for o in outcomes
                    if o.spec.report_path is not None and o.spec.report_path.is_file()],
    })
    return profile


def derive_columns(kernels: pd.DataFrame, derive: Mapping[str, Any],
                   shapes: Mapping[str, Any]) -> pd.DataFrame:
    """Add ``derive``'s columns: ``fn(row, shape)`` per kernel row.

    A function that raises leaves its column NaN (logged), so a long profile is not lost to
    a slip in a derived column.

    Args:
        kernels: the kernel table.
        derive: column name -> ``fn(row, shape)``.
        shapes: shape label -> the shape as the user gave it.

    Returns:
        A copy with the columns added.
    """
    out = kernels.copy()
    for name, fn in derive.items():
        values = []
        try:
            for _, row in out.iterrows():
                values.append(fn(row, shapes.get(row.get("shape"))))
        except Exception as err:
            logger.error("derive[%r] failed (%s: %s); its column is left empty",
                         name, type(err).__name__, err)
            values = [float("nan")] * len(out)
        out[name] = values
    return out
