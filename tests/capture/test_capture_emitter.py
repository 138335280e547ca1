"""The emitters: the NVTX fast path (against a stand-in domain) and the recorder."""

from __future__ import annotations

import threading

import nvtx
import torch
from capture_models import Stack

from torch_nsight.capture import NvtxEmitter, RangeEmitter, RecordingEmitter, instrument
from torch_nsight.naming import DOMAIN


class FakeDomain:
    """Stands in for ``nvtx.Domain``; records what the emitter asks of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def get_event_attributes(self, message: str) -> tuple[str, str]:
        self.calls.append(("attributes", message))
        return ("attrs", message)

    def push_range(self, attributes: object) -> None:
        self.calls.append(("push", attributes))

    def pop_range(self) -> None:
        self.calls.append(("pop", None))


def test_nvtx_emitter_builds_attributes_once_per_message() -> None:
    domain = FakeDomain()
    emitter = NvtxEmitter(domain)
    emitter.prepare("layers.0")
    emitter.prepare("layers.0")
    emitter.push("layers.0")
    emitter.push("op:mul")  # not prepared: registered on first use
    emitter.push("op:mul")
    emitter.pop()
    assert domain.calls == [
        ("attributes", "layers.0"), ("push", ("attrs", "layers.0")),
        ("attributes", "op:mul"), ("push", ("attrs", "op:mul")), ("push", ("attrs", "op:mul")),
        ("pop", None),
    ]


def test_instrument_prepares_every_message_up_front() -> None:
    domain = FakeDomain()
    model = Stack(layers=1)
    with instrument(model, enabled=True, emitter=NvtxEmitter(domain), ops={"mul"}):
        prepared = [message for kind, message in domain.calls if kind == "attributes"]
        assert sorted(prepared) == sorted(
            ["Stack", "bwd:Stack", "inp", "bwd:inp", "layers", "bwd:layers", "op:mul"]
            + [f"{prefix}layers.0{suffix}" for prefix in ("", "bwd:")
               for suffix in ("", ".gate", ".up", ".down", ".act")]
        )
        domain.calls.clear()
        with torch.no_grad():
            model(torch.randn(2, 4))
    assert {kind for kind, _ in domain.calls} == {"push", "pop"}  # no per-call registration
    assert len(domain.calls) == 2 * 8  # 7 module calls and one op:mul


def test_default_domain_is_the_torch_nsight_domain() -> None:
    emitter = NvtxEmitter()
    assert emitter._domain is nvtx.get_domain(DOMAIN)
    emitter.push("x")  # no tool attached: a no-op that must not fail
    emitter.pop()


def test_emitters_satisfy_the_protocol() -> None:
    assert isinstance(NvtxEmitter(FakeDomain()), RangeEmitter)
    assert isinstance(RecordingEmitter(), RangeEmitter)
    assert not isinstance(object(), RangeEmitter)


def test_recording_emitter_tracks_threads_and_unbalanced_pops() -> None:
    emitter = RecordingEmitter()
    emitter.push("a")
    worker = threading.Thread(target=emitter.pop)
    worker.start()
    worker.join()
    emitter.pop()
    main = threading.get_ident()
    assert emitter.events == [
        (main, "push", "a"), (worker.ident, "pop", RecordingEmitter.UNBALANCED), (main, "pop", "a"),
    ]
    assert emitter.open_ranges() == []
