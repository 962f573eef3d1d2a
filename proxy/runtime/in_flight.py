"""The requests of one connection awaiting their responses, in the order they went upstream.

A broker answers a connection's requests in order. The proxy's own requests (a handler asks
the cluster on the client's connection) and its own answers (a request answered here, with
no broker response) take their places in the same queue, so each response reaches the client
in its request's order, and each response from the broker is checked against the request it
answers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import ClassVar, Final

from protocol.errors import ProtocolError
from protocol.headers import response_correlation_id
from proxy.handlers.base import Request

#: requests of one connection awaiting responses before the proxy stops reading it. A broker
#: handles one request of a connection at a time; clients pipeline a few (Java producers 5),
#: and a client that would pipeline thousands past a throttle is held here instead. Every
#: request in flight is charged its request time when it is answered, even after the first
#: answer throttled the connection, and Kafka caps a request-time throttle at one window:
#: with 64 a raw pipelining client got 1.15 x its request_percentage (tests/support/fidelity.py).
MAX_IN_FLIGHT: Final = 5
#: the proxy's own requests are numbered from here, apart from what clients use in practice
_OWN_CORRELATION_IDS: Final = 0x7F000000


class OwnRequest:
    """A request of the proxy's own in the queue: its response is the asker's."""

    __slots__ = ("correlation_id", "on_answer")
    #: as a client's Request: it holds no reading, and the proxy does not answer it
    stops_reading: ClassVar[bool] = False
    local_response: ClassVar[None] = None

    def __init__(self, correlation_id: int, on_answer: Callable[[bytes], object]) -> None:
        self.correlation_id = correlation_id
        self.on_answer = on_answer


class InFlight:
    __slots__ = ("_own_correlation_id", "entries")

    def __init__(self) -> None:
        #: oldest first
        self.entries: deque[Request | OwnRequest] = deque()
        self._own_correlation_id = _OWN_CORRELATION_IDS

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def full(self) -> bool:
        return len(self.entries) >= MAX_IN_FLIGHT

    def add(self, entry: Request | OwnRequest) -> bool:
        """True when the queue is full with it: reading pauses until a response comes."""
        entries = self.entries
        entries.append(entry)
        return len(entries) >= MAX_IN_FLIGHT

    def own(self, on_answer: Callable[[bytes], object]) -> int:
        """A request of the proxy's own, queued; the correlation id it is sent with."""
        self._own_correlation_id = correlation_id = self._own_correlation_id % 0x7FFFFFFF + 1
        self.entries.append(OwnRequest(correlation_id, on_answer))
        return correlation_id

    def answered(self, frame: bytes) -> Request | OwnRequest:
        """The oldest entry, which the broker's response `frame` answers; a response that
        answers nothing, or carries another correlation id, is not this connection's
        protocol (ProtocolError)."""
        entries = self.entries
        if not entries:
            raise ProtocolError("response without an outstanding request")
        entry = entries.popleft()
        got = response_correlation_id(frame)
        if isinstance(entry, OwnRequest):
            expected = entry.correlation_id
        else:
            expected = entry.header.correlation_id
        if got != expected:
            raise ProtocolError(f"response correlation id {got}, expected {expected}")
        return entry

    def take_local_responses(self, out: list[bytes]) -> None:
        """Move the proxy's own answers now at the head of the queue to `out`: every earlier
        response is already there, so they go next, in order."""
        entries = self.entries
        while entries and (local_response := entries[0].local_response) is not None:
            entries.popleft()
            out.append(local_response)

    def stops_reading(self) -> bool:
        """Whether a request still waiting forbids reading until its response has gone."""
        return any(entry.stops_reading for entry in self.entries)

    def oldest_received_ns(self) -> int | None:
        """When the oldest client request was read (None: none waits; 0: the oldest is the
        proxy's own)."""
        if not self.entries:
            return None
        first = self.entries[0]
        return first.received_ns if isinstance(first, Request) else 0
