"""A client's request frames as the handlers see them: each header parsed, the principal
resolved and the clock read, once; and the usage samples' count of this connection under
the principal of its latest request.

A connection keeps its last principal while its user, client-id and the sensors'
generation stay the same (they almost always do), so a request looks nothing up.
"""

from __future__ import annotations

from protocol.headers import parse_request_header
from proxy.enforcement.sensors import Sensors
from proxy.handlers.base import Channel, Request
from proxy.handlers.registry import ROUTES
from proxy.runtime.clock import Clock
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.principal import Principal


class RequestReader:
    __slots__ = ("_channel", "_client_ip", "_clock", "_closed", "_counted", "_principal",
                 "_sensors", "usage")  # fmt: skip

    def __init__(
        self, channel: Channel, clock: Clock, sensors: Sensors, usage: UsageRecorder | None
    ) -> None:
        self._channel = channel
        self._clock = clock
        self._sensors = sensors
        #: where this connection's requests are counted for usage samples (None: not counted)
        self.usage = usage
        #: the address the usage samples name, kept: its key is built for every request
        self._client_ip = channel.address
        #: the principal of this connection's last request, kept while it still applies
        self._principal: Principal | None = None
        #: (user, client_id, client_ip) this connection is counted under in usage samples
        self._counted: tuple[str, str, str] | None = None
        self._closed = False

    def read(self, frame: bytes) -> Request:
        header = parse_request_header(frame)
        now_ns = self._clock.now_ns()
        client_id = header.client_id or ""
        user = self._channel.user
        principal = self._principal
        if (
            principal is None
            or principal.generation != self._sensors.generation
            or principal.client_id != client_id
            or principal.user != user
        ):
            principal = self._principal = Principal(user, client_id, self._sensors.generation)
            if self.usage is not None:
                self._count_connection((user, client_id, self._client_ip))
        usage = self.usage
        counters = (
            None
            if usage is None
            else usage.counters(user, client_id, header.api_key, self._client_ip)
        )
        return Request(frame, header, ROUTES[header.api_key], principal, now_ns, counters)

    def close(self) -> None:
        """The connection is no longer counted."""
        self._closed = True
        if self._counted is not None:
            assert self.usage is not None
            self.usage.disconnected(self._counted)
            self._counted = None

    def _count_connection(self, counted: tuple[str, str, str]) -> None:
        assert self.usage is not None
        if counted != self._counted and not self._closed:
            if self._counted is not None:
                self.usage.disconnected(self._counted)
            self.usage.connected(counted)
            self._counted = counted
