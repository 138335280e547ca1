"""The per-thread range stack on its own: what it does with hooks that do not pair up."""

from __future__ import annotations

import logging
import threading

import pytest

from torch_nsight.capture.ranges.emitter import RecordingEmitter
from torch_nsight.capture.ranges.frames import BackwardFrame, Range
from torch_nsight.capture.ranges.stack import RangeStack


@pytest.fixture
def emitter() -> RecordingEmitter:
    return RecordingEmitter()


def ranges(emitter: RecordingEmitter, *names: str) -> list[Range]:
    return [Range(name or "Root", name, emitter) for name in names]


def kinds(emitter: RecordingEmitter) -> list[tuple[str, str]]:
    return [(kind, message) for _, kind, message in emitter.events]


def test_pop_of_the_top_range(emitter: RecordingEmitter) -> None:
    stack = RangeStack()
    root, child = ranges(emitter, "", "a")
    stack.push(root)
    stack.push(child)
    assert stack.snapshot() == ["Root", "a"]
    stack.pop(child)
    stack.pop(root)
    assert kinds(emitter) == [("push", "Root"), ("push", "a"), ("pop", "a"), ("pop", "Root")]
    assert stack.snapshot() == []


def test_pop_of_a_range_not_open_is_refused_with_a_warning(
    emitter: RecordingEmitter, caplog: pytest.LogCaptureFixture
) -> None:
    stack = RangeStack()
    root, stranger = ranges(emitter, "", "b")
    stack.push(root)
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        stack.pop(stranger)
    assert kinds(emitter) == [("push", "Root")]
    assert stack.snapshot() == ["Root"]
    assert "'b'" in caplog.text and "not open on this thread" in caplog.text


def test_pop_of_a_buried_range_closes_the_stale_ones_above(
    emitter: RecordingEmitter, caplog: pytest.LogCaptureFixture
) -> None:
    stack = RangeStack()
    root, a, b = ranges(emitter, "", "a", "a.b")
    for rng in (root, a, b):
        stack.push(rng)
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        stack.pop(a)  # the post-hook of a.b never ran
    assert kinds(emitter)[3:] == [("pop", "a.b"), ("pop", "a")]
    assert stack.snapshot() == ["Root"]
    assert "['a.b']" in caplog.text


def test_ranges_are_per_thread(emitter: RecordingEmitter, caplog: pytest.LogCaptureFixture) -> None:
    stack = RangeStack()
    (root,) = ranges(emitter, "")
    stack.push(root)
    seen: list[list[str]] = []

    def other_thread() -> None:
        seen.append(stack.snapshot())
        stack.pop(root)  # not open on this thread: refused

    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert seen == [[]]
    assert stack.snapshot() == ["Root"]
    assert "not open on this thread" in caplog.text
    stack.pop(root)
    assert kinds(emitter) == [("push", "Root"), ("pop", "Root")]


def test_deferred_backward_range_stays_open_for_its_submodules_only(
    emitter: RecordingEmitter,
) -> None:
    stack = RangeStack()
    root, a, a_b, c = (BackwardFrame(rng) for rng in ranges(emitter, "", "a", "a.b", "c"))
    a.deferred = True  # no pop hook: stays open until something outside it starts
    stack.push_backward(root, -1)
    stack.push_backward(a, -1)
    stack.push_backward(a_b, -1)  # inside a: a stays open
    stack.pop_backward(a_b)
    assert stack.snapshot() == ["Root", "a"]
    stack.push_backward(c, -1)  # not inside a: a is closed first
    assert stack.snapshot() == ["Root", "c"]
    stack.pop_backward(c)
    stack.pop_backward(a)  # closed already: nothing happens
    stack.pop_backward(root)
    assert kinds(emitter) == [
        ("push", "Root"), ("push", "a"), ("push", "a.b"), ("pop", "a.b"), ("pop", "a"),
        ("push", "c"), ("pop", "c"), ("pop", "Root"),
    ]


def test_backward_range_of_a_call_outside_closes_the_open_ones(
    emitter: RecordingEmitter, caplog: pytest.LogCaptureFixture
) -> None:
    # A module whose input gets its gradient late (the input is used elsewhere too) is
    # done when a call that did not run inside it starts its backward.
    stack = RangeStack()
    root_range, a_range, shared_range = ranges(emitter, "", "a", "shared")
    root = BackwardFrame(root_range)
    a = BackwardFrame(a_range, root)
    shared_in_a = BackwardFrame(shared_range, a)  # a shared module that `a` called
    b = BackwardFrame(a_range, root)  # `a` called a second time
    with caplog.at_level(logging.DEBUG, logger="torch_nsight"):
        stack.push_backward(root, -1)
        stack.push_backward(b, -1)
        stack.push_backward(a, -1)  # the first call of `a` is not inside the second
        stack.push_backward(shared_in_a, -1)  # ran inside `a`, though not its submodule
        stack.pop_backward(a)  # closes the shared module's range too
        stack.pop_backward(b)
        stack.pop_backward(root)
    assert kinds(emitter) == [
        ("push", "Root"), ("push", "a"), ("pop", "a"), ("push", "a"), ("push", "shared"),
        ("pop", "shared"), ("pop", "a"), ("pop", "Root"),
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_ranges_of_a_finished_backward_close_before_the_next_range(
    emitter: RecordingEmitter,
) -> None:
    # What happens on a CUDA device thread: the end-of-backward callback runs on the thread
    # that called backward(), so the device thread closes its leftovers on its next push.
    stack = RangeStack()
    root_range, a = ranges(emitter, "", "a")
    root = BackwardFrame(root_range, deferred=True)
    stack.push_backward(root, 7)  # outside a backward pass: no callback can be queued
    task = stack.local.state.tasks[7]  # the calling thread's state (slots, one lookup)
    finisher = threading.Thread(target=lambda: setattr(task, "done", True))
    finisher.start()
    finisher.join()
    assert stack.snapshot() == ["Root"]
    stack.push(a)
    assert stack.snapshot() == ["a"]
    stack.pop(a)
    assert kinds(emitter) == [("push", "Root"), ("pop", "Root"), ("push", "a"), ("pop", "a")]
    assert stack.local.state.tasks == {}


def test_close_owned(emitter: RecordingEmitter) -> None:
    stack = RangeStack()
    mine = Range("mine", "x", emitter, owner="me")
    theirs = Range("theirs", "y", emitter, owner="them")
    stack.push(theirs)
    stack.push(mine)
    assert stack.close_owned("me") == 1
    assert stack.snapshot() == ["theirs"]
    assert stack.close_owned("me") == 0
    stack.pop(theirs)
