"""The deferral alone, on a virtual clock: a request waits only while questions are out,
reading resumes from the event loop once the last is answered, and the request is handled
again once, from then, with the principal's sensors as they are then."""

from __future__ import annotations

from collections.abc import Sequence

from localkafka.inprocess.harness import RecordingTransport, VirtualClock
from localkafka.inprocess.wire import request_frame
from protocol.apis import METADATA
from protocol.headers import parse_request_header
from proxy.handlers.base import Request
from proxy.handlers.registry import ROUTES
from proxy.runtime.deferral import Deferral
from proxy.runtime.read_gate import Item, Pause, ReadGate
from quotas.principal import Principal

MS = 1_000_000


def deferral() -> tuple[Deferral, ReadGate, RecordingTransport, VirtualClock]:
    client, clock = RecordingTransport(), VirtualClock()

    def handle(items: Sequence[Item]) -> None:
        pass

    gate = ReadGate(client, clock, handle)
    return Deferral(clock, gate), gate, client, clock


def request() -> Request:
    frame = request_frame(METADATA, 12, b"\x01\x00\x00\x00")
    header = parse_request_header(frame)
    return Request(frame, header, ROUTES[METADATA], Principal("u", "app", 0), 0)


def test_nothing_asked_nothing_waited_for() -> None:
    questions, gate, _, _ = deferral()
    assert not questions.defer(request()) and not gate.pauses


def test_a_request_waits_until_the_last_question_is_answered() -> None:
    questions, gate, client, clock = deferral()
    first, second = questions.begin(), questions.begin()
    waiting = request()
    assert questions.defer(waiting) and questions.request is waiting
    assert gate.pauses == {Pause.DEFERRED} and not client.reading
    first()
    clock.advance(MS)
    assert not client.reading  # one question still out
    second()
    assert not client.reading  # resumed from the event loop, not inside the answer
    clock.advance(0)
    assert client.reading and not gate.pauses


def test_handled_again_it_is_refreshed_and_never_deferred_twice() -> None:
    questions, _, _, clock = deferral()
    questions.begin()
    waiting = request()
    questions.defer(waiting)
    clock.advance(5 * MS)
    again = questions.again(waiting, lambda kept: Principal(kept.user, kept.client_id, 1))
    assert again.refreshed and again.received_ns == 5 * MS and again.now_ms == 5
    assert again.principal.generation == 1 and questions.request is None
    assert not questions.defer(again)  # forwarded whatever its handler asked meanwhile
