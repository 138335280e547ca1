"""What the children left (result JSON, ncu output, reports): which items ended how, which
reports can be used, and the errors that end a sweep.

Per child: check ncu's output (:func:`torch_nsight.collect.shared.ncu.raise_for_output`).
A shape that failed costs only itself: it is recorded in the sweep's manifest, and
:class:`ShapeFailedError` is raised only when every shape failed. Loading the reports and
copying replicated rows is :func:`torch_nsight.load`'s job (the sweep directory reader).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch_nsight.collect.parent.launch import ChildOutcome
from torch_nsight.collect.shared.arguments import every_shape_failed
from torch_nsight.collect.shared.ncu import raise_for_output
from torch_nsight.errors import CounterPermissionError, TorchNsightError

logger = logging.getLogger(__name__)


def _last_lines(text: str) -> str:
    """What ends a dead child's message: its last output lines, or that it printed none
    (an ncu that ran no program, a child killed before its first line)."""
    if text.strip():
        return f". Its last output lines:\n{text}"
    return (". It printed nothing: was the child started at all (a wrapper or an ncu that "
            "ran no program)? Rerun with -v")


def child_items(outcome: ChildOutcome) -> list[dict[str, Any]]:
    """The (variant, shape) records of one child, with what the parent knows added: a child
    that died leaves its unfinished items as failed, with its last output lines."""
    results = outcome.results or {}
    items = [dict(item, child=outcome.spec.name) for item in results.get("items", [])]
    died = results.get("fatal") or (
        None if results.get("finished") else
        f"the child process ended (exit status {outcome.returncode}) before finishing"
        + (f"; it was stopped because {outcome.stopped}" if outcome.stopped else "")
        + _last_lines(outcome.output.last_lines(12)))
    for item in items:
        if item.get("status") in ("pending", "running"):
            item.update(status="failed", error=died)
        elif item.get("status") == "stopped" and outcome.stopped:  # why the parent stopped it
            item.update(error=f"stopped because {outcome.stopped}")
    if not items and not results.get("finished"):
        planned: list[tuple[str | None, str | None]] = list(outcome.spec.planned)
        items = [{"variant": variant or None, "shape": shape, "status": "failed", "error": died,
                  "child": outcome.spec.name}
                 for variant, shape in planned or [(None, None)]]
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


def check_children(outcomes: Sequence[ChildOutcome],
                   yielded: Callable[[ChildOutcome], list[dict[str, Any]]],
                   check: Callable[[ChildOutcome, list[dict[str, Any]]], str | None]
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                              list[tuple[str, TorchNsightError]]]:
    """What each child yielded and which report it left.

    Args:
        outcomes: how each child ended.
        yielded: what one child yielded (its items).
        check: the file name of its usable report (None: none made); raises
            :class:`TorchNsightError` when it cannot be used.

    Returns:
        (items, children, errors): every item; per child its name, usable report file name
        (None when it has none), exit status, device, settings; the children whose report
        cannot be used, with why.

    Raises:
        CounterPermissionError: counters not permitted.
    """
    errors: list[tuple[str, TorchNsightError]] = []
    items: list[dict[str, Any]] = []
    children: list[dict[str, Any]] = []
    for outcome in outcomes:
        mine = yielded(outcome)
        items.extend(mine)
        usable = None
        try:
            usable = check(outcome, mine)
        except CounterPermissionError:
            raise
        except TorchNsightError as err:
            errors.append((outcome.spec.name, err))
        children.append({"name": outcome.spec.name, "report": usable,
                         "returncode": outcome.returncode, "stopped": outcome.stopped,
                         "seconds": outcome.seconds, "device": (outcome.results or {}).get(
                             "device"), "torch": (outcome.results or {}).get("torch"),
                         "settings": (outcome.results or {}).get("settings")})
    return items, children, errors


def check_report(outcome: ChildOutcome, items: list[dict[str, Any]], *, dry_run: bool
                 ) -> str | None:
    """A sweep child's usable report (None in a dry run).

    Raises:
        TorchNsightError: ncu's output says the report cannot be used.
    """
    report = outcome.spec.report_path
    if dry_run or report is None:
        return None
    raise_for_output(outcome.output, report_exists=report.is_file(),
                     returncode=outcome.returncode,
                     why_nothing=why_nothing(outcome.results, items))
    return report.name


def judge(items: list[dict[str, Any]], children: list[dict[str, Any]],
          errors: list[tuple[str, TorchNsightError]], *, dry_run: bool
          ) -> tuple[list[dict[str, Any]], TorchNsightError | None]:
    """What a sweep's children amount to: the children whose report cannot be used
    (child, error), and the error that ends the sweep, if any (:class:`ShapeFailedError`
    when every shape failed, :class:`NothingProfiledError` or another
    :class:`TorchNsightError` when no child produced a usable report), for the caller to
    raise once it has written down what happened. Each failure is logged once, here."""
    failed = [i for i in items if i.get("status") != "ok"]
    real = [i for i in items if i.get("shape") is not None]
    fatal: TorchNsightError | None = None
    if not real:  # no child got as far as writing its results
        fatal = errors[0][1] if errors else TorchNsightError(
            "the sweep's child wrote no results: " + str(items[0]["error"] if items else ""))
    elif len(failed) == len(items):
        fatal = every_shape_failed(failed)
    elif not dry_run and not any(c["report"] for c in children):
        fatal = errors[0][1] if errors else TorchNsightError("no child produced a report")
    if fatal is not None:
        return [], fatal
    problems = [{"child": name, "error": str(err)} for name, err in errors]
    for problem in problems:
        logger.warning("%s produced no usable report (its shapes are missing): %s",
                       problem["child"], problem["error"])
    for item in failed:
        logger.warning("shape %s%s %s: %s", item.get("shape"),
                       f" ({item['variant']})" if item.get("variant") else "",
                       item.get("status"), item.get("error"))
    return problems, None


def judge_sweep(outcomes: Sequence[ChildOutcome], *, dry_run: bool
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]],
                           TorchNsightError | None]:
    """Decide what a sweep's children's work amounts to, before anything is loaded (the
    engine's settle, :func:`torch_nsight.collect.parent.engine.settle`, without a plan).

    Args:
        outcomes: how each child ended.
        dry_run: no ``ncu`` ran (no reports to check).

    Returns:
        (items, children, problems, fatal): see :func:`check_children` and :func:`judge`.

    Raises:
        CounterPermissionError: counters not permitted.
    """
    items, children, errors = check_children(
        outcomes, child_items, lambda outcome, mine: check_report(outcome, mine,
                                                                  dry_run=dry_run))
    problems, fatal = judge(items, children, errors, dry_run=dry_run)
    return items, children, problems, fatal



def warm_the_reader() -> None:
    """Import the report reader and the analysis in a thread while the children run (the
    parent only waits then), so that loading their reports starts at once."""

    def imports() -> None:
        try:
            import torch_nsight.loading  # noqa: F401
            from torch_nsight.report.reader import import_reader

            import_reader()
        except Exception as err:  # noqa: BLE001 - loading imports them again and says why
            logger.debug("could not import the reader ahead: %s", err)

    threading.Thread(target=imports, name="torch_nsight-reader", daemon=True).start()
