"""The read gate alone: reading resumes only when no reason is left, requests read while
paused wait in order, a mute lasts its throttle on the clock, and a closed gate reads no
more."""

from __future__ import annotations

from collections.abc import Sequence

from localkafka.inprocess.harness import RecordingTransport, VirtualClock
from proxy.runtime.read_gate import Item, Pause, ReadGate

MS = 1_000_000


def gate() -> tuple[ReadGate, RecordingTransport, VirtualClock, list[list[Item]]]:
    client, clock = RecordingTransport(), VirtualClock()
    handled: list[list[Item]] = []

    def handle(items: Sequence[Item]) -> None:
        handled.append(list(items))

    return ReadGate(client, clock, handle), client, clock, handled


def test_the_client_is_read_again_once_no_reason_is_left() -> None:
    read_gate, client, _, _ = gate()
    read_gate.pause(Pause.IN_FLIGHT)
    read_gate.pause(Pause.MEMORY)
    assert not client.reading
    read_gate.resume(Pause.IN_FLIGHT)
    assert not client.reading and read_gate.pauses == {Pause.MEMORY}
    read_gate.granted()
    assert client.reading and not read_gate.pauses


def test_requests_held_are_handled_in_order_once_only_the_backlog_is_left() -> None:
    read_gate, client, _, handled = gate()
    read_gate.pause(Pause.UNTIL_RESPONSE)
    read_gate.hold([b"two", b"three"])
    assert read_gate.pauses == {Pause.UNTIL_RESPONSE, Pause.BACKLOG}
    read_gate.resume(Pause.UNTIL_RESPONSE)
    assert handled == [[b"two", b"three"]] and not read_gate.backlog and client.reading


def test_a_mute_lasts_its_throttle_and_a_shorter_one_does_not_cut_it() -> None:
    read_gate, client, clock, _ = gate()
    read_gate.mute(100)
    clock.advance(50 * MS)
    read_gate.mute(20)  # ends before the mute being served: nothing changes
    clock.advance(49 * MS)
    assert not client.reading
    clock.advance(1 * MS)
    assert client.reading
    read_gate.mute(10)
    read_gate.mute(30)  # a longer one replaces it
    clock.advance(10 * MS)
    assert not client.reading
    clock.advance(20 * MS)
    assert client.reading and not clock.pending()


def test_a_closed_gate_drops_its_backlog_and_reads_no_more() -> None:
    read_gate, client, clock, handled = gate()
    read_gate.mute(100)
    read_gate.hold([b"dropped"])
    read_gate.close()
    assert not read_gate.backlog and not clock.pending()
    read_gate.resume(Pause.THROTTLED)
    read_gate.mute(5)
    assert handled == [] and not client.reading
