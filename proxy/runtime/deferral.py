"""A request a handler deferred (Defer) until the questions it asked the cluster on this
connection are answered, and the count of questions still out.

A handler that needs to know something first (a topic's partitions for KIP-599's mutation
count) asks on the client's own connection and defers the request; reading stops, and the
request is handled again, first, once every question is answered: from then, as the broker
handles it.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.handlers.base import Request
from proxy.runtime.clock import Clock
from proxy.runtime.read_gate import Pause, ReadGate
from quotas.principal import Principal


class Deferral:
    __slots__ = ("_clock", "_gate", "asked", "request")

    def __init__(self, clock: Clock, gate: ReadGate) -> None:
        self._clock = clock
        self._gate = gate
        #: questions of the proxy's own not answered yet
        self.asked = 0
        #: the request waiting for them
        self.request: Request | None = None

    def begin(self) -> Callable[[], None]:
        """The handlers' Cluster: a deferral also waits for the callback returned."""
        self.asked += 1
        return self.answered

    def answered(self) -> None:
        self.asked -= 1
        if not self.asked and self.request is not None:
            # resumed from the event loop, once the responses that came with the answer
            # have gone to the client
            self._clock.call_later(0, self._resume)

    def defer(self, request: Request) -> bool:
        """Whether `request` waits: only for questions still out, and only once (handled
        again, it is forwarded whatever its handler asked meanwhile)."""
        if request.refreshed or not self.asked:
            return False
        self.request = request
        self._gate.pause(Pause.DEFERRED)
        return True

    def again(self, request: Request, principal: Callable[[Principal], Principal]) -> Request:
        """The deferred request, handled again now that the cluster has answered: from now,
        as the broker handles it, with what the topic cache knows, and the principal's
        sensors as they are now (`principal`)."""
        self.request = None
        request.refreshed = True
        request.received_ns = now_ns = self._clock.now_ns()
        request.now_ms = now_ns // 1_000_000
        request.principal = principal(request.principal)
        return request

    def _resume(self) -> None:
        self._gate.resume(Pause.DEFERRED)
