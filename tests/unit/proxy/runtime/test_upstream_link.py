"""The upstream link alone: the proxy's own questions go only on a connection made, whose
client has a session, and never after it closed; one asked while a read is handled joins that
read's requests, in order, and is queued in flight like them."""

from __future__ import annotations

from collections.abc import Sequence

from localkafka.inprocess.harness import RecordingTransport, VirtualClock
from protocol.apis import METADATA
from protocol.headers import OWN_CLIENT_ID, parse_request_header
from proxy.runtime.deferral import Deferral
from proxy.runtime.in_flight import InFlight, OwnRequest
from proxy.runtime.read_gate import Item, ReadGate
from proxy.runtime.upstream_link import UpstreamLink


def link() -> tuple[UpstreamLink, InFlight, Deferral]:
    def handle(items: Sequence[Item]) -> None:
        pass

    clock = VirtualClock()
    in_flight = InFlight()
    deferral = Deferral(clock, ReadGate(RecordingTransport(), clock, handle))
    return UpstreamLink(in_flight, deferral), in_flight, deferral


def ask(upstream: UpstreamLink) -> bool:
    return upstream.ask(METADATA, 12, b"\x01\x00\x00\x00", lambda frame: None)


def test_no_question_before_the_connection_and_the_session_nor_after_close() -> None:
    upstream, in_flight, deferral = link()
    assert not ask(upstream)  # not connected
    broker = RecordingTransport()
    upstream.peer = broker
    assert not ask(upstream)  # the client has no session yet (or authenticates again)
    upstream.authenticated = True
    assert ask(upstream)
    upstream.close()
    assert broker.closed and not ask(upstream)
    assert len(broker.written) == 1 and len(in_flight.entries) == 1 and deferral.asked == 1


def test_a_question_asked_during_a_read_joins_its_requests() -> None:
    upstream, in_flight, _ = link()
    broker = RecordingTransport()
    upstream.peer, upstream.authenticated = broker, True
    upstream.batch = [b"client request"]
    assert ask(upstream)
    assert not broker.written and len(upstream.batch) == 2
    header = parse_request_header(upstream.batch[1])
    entry = in_flight.entries[0]
    assert isinstance(entry, OwnRequest)
    assert header.client_id == OWN_CLIENT_ID
    assert header.correlation_id == entry.correlation_id


def test_reading_resumes_only_while_open() -> None:
    upstream, _, _ = link()
    broker = RecordingTransport()
    upstream.peer = broker
    upstream.pause_reading()
    assert not broker.reading
    upstream.close()
    upstream.resume_reading()
    assert not broker.reading
