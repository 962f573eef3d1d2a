"""A connection's place under its principal's connection guards
(proxy/enforcement/connections.py): judged at its first request past authentication, counted
until it closes, or refused: read no more, held for the delay its verdict gives (KIP-612's
for a creation rate; none over a count), then closed."""

from __future__ import annotations

from typing import Protocol

from proxy.enforcement.connections import ConnectionGuards
from proxy.handlers.base import Channel, Request
from proxy.runtime.clock import Clock
from proxy.runtime.read_gate import Pause, ReadGate
from quotas.principal_connections import Client


class Connection(Protocol):
    """The connection core, as a refusal closes it."""

    channel: Channel
    gate: ReadGate

    def close(self) -> None: ...


class PrincipalAdmission:
    __slots__ = ("_clock", "_connection", "_counted", "_guards", "waiting")

    def __init__(self, guards: ConnectionGuards, clock: Clock, connection: Connection) -> None:
        self._guards = guards
        self._clock = clock
        self._connection = connection
        self._counted: Client | None = None
        #: not judged yet: no request past authentication has come
        self.waiting = True

    def admit(self, request: Request) -> bool:
        """False: refused, and the request goes nowhere (the connection closes)."""
        self.waiting = False
        connection = self._connection
        verdict = self._guards.admit(request.principal, connection.channel.peer, request.now_ms)
        if verdict.counted is not None:
            self._counted = verdict.counted
            return True
        if request.usage is not None:
            request.usage.connections_refused += 1
        connection.gate.pause(Pause.REFUSED)
        # closed from a timer even without a delay: the read being handled finishes first
        self._clock.call_later(verdict.delay_ms * 1_000_000, connection.close)
        return False

    def close(self) -> None:
        """The connection closed: it no longer counts."""
        if self._counted is not None:
            self._guards.release(self._counted)
            self._counted = None
