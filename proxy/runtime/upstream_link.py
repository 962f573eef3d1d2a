"""A client's upstream connection as its core writes to it, and the proxy's own requests on it.

The proxy asks the cluster things on the client's own connection (a topic's partitions for
KIP-599), where Kafka answers them in order with the client's requests. A question may go
only once the client has a session and not while it authenticates again: a broker takes
nothing else in the middle of an exchange. A question asked while a read of the client is
being handled joins that read's requests, so it is answered after the ones before it.
"""

from __future__ import annotations

from collections.abc import Callable

from protocol.headers import OWN_CLIENT_ID, encode_request
from proxy.runtime.deferral import Deferral
from proxy.runtime.in_flight import InFlight
from proxy.runtime.peer import Peer


class UpstreamLink:
    __slots__ = ("_deferral", "_in_flight", "authenticated", "batch", "closed", "peer")

    def __init__(self, in_flight: InFlight, deferral: Deferral) -> None:
        self._in_flight = in_flight
        self._deferral = deferral
        #: None until the connection is made (the client's first bytes open it)
        self.peer: Peer | None = None
        #: whether the proxy may send requests of its own on it
        self.authenticated = False
        #: requests bound upstream while a read is being handled, written together after it
        self.batch: list[bytes] | None = None
        self.closed = False

    def ask(
        self, api_key: int, api_version: int, body: bytes, on_answer: Callable[[bytes], object]
    ) -> bool:
        """The handlers' Cluster: a request of the proxy's own, in the in-flight queue like
        the client's, its response consumed. False when it cannot go now."""
        if self.closed or self.peer is None or not self.authenticated:
            return False
        correlation_id = self._in_flight.own(on_answer)
        frame = encode_request(api_key, api_version, correlation_id, OWN_CLIENT_ID, body)
        self._deferral.asked += 1
        if self.batch is not None:
            self.batch.append(frame)
        else:
            self.peer.write(frame)
        return True

    def pause_reading(self) -> None:
        """The client reads slower than its responses come: the broker's responses wait in
        socket buffers, not in the proxy."""
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_reading(self) -> None:
        if self.peer is not None and not self.closed:
            self.peer.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.peer is not None:
            self.peer.close()
