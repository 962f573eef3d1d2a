"""The connection guards (issue 52; docs/guards.md#connection-guards): how many connections a
principal holds open across the fleet (`kafka-quota-proxy.connections`), and how fast it
opens them (`kafka-quota-proxy.connection_creation_rate`).

Each connection is judged once, when its principal is known: at its first request past
authentication (a SASL exchange or a certificate names its user before then; every request
names its client-id). In Kafka's order for an address (ConnectionQuotas.inc): the creation
rate first, then the count. Over the rate, the connection is held unread for the bucket's
throttle and then closed, as KIP-612 holds a connection over an address's rate; nothing is
taken from the bucket, so a storm of reconnects is slowed by its own connections and the
principal's admitted rate stays the rate. Over the count, it is closed at once (Kafka's
TooManyConnectionsException). Either way the client's request is not sent: a closed
connection is what every client retries, after its reconnect backoff. Shadow mode decides,
logs and counts, and lets the connection through.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from proxy.enforcement.sensors import Sensors
from proxy.enforcement.settlement import SHADOW_LOG_INTERVAL_MS, Settlement
from quotas.entities import QuotaType, sanitize
from quotas.principal import Principal, sensors_of
from quotas.principal_connections import Client

log = logging.getLogger(__name__)


class ConnectionAdmission(NamedTuple):
    #: the client the connection is counted as, to be released when it closes; None: refused
    counted: Client | None
    #: how long a refused connection is held before it is closed
    delay_ms: int = 0


class ConnectionGuards:
    def __init__(self, sensors: Sensors, settlement: Settlement) -> None:
        self._sensors = sensors
        self._settlement = settlement
        #: quota type -> when a shadow decision was last logged
        self._shadow_logged_ms: dict[QuotaType, int] = {}

    def admit(self, principal: Principal, peer: str, now_ms: int) -> ConnectionAdmission:
        engine = self._sensors.engine
        client = (principal.user, principal.client_id)
        connections = engine.connections
        rate = engine.connection_creation
        if rate.enabled:
            sensors = principal.sensors[rate.slot] or sensors_of(rate, principal, now_ms)
            admission = rate.record_strict(sensors, 1.0, now_ms)
            if not admission.admitted:
                key = (QuotaType.CONNECTION_CREATION_RATE, sensors.tags)
                if self._applies(QuotaType.CONNECTION_CREATION_RATE, peer, principal, now_ms):
                    connections.refused[key] += 1
                    rate.record_throttle(sensors, admission.throttle_ms, now_ms)
                    log.warning(
                        "holding client %s (User:%s, client-id %r) %d ms, then closing it: "
                        "its principal opens connections faster than %s (%g/s)",
                        peer,
                        principal.user,
                        principal.client_id,
                        admission.throttle_ms,
                        QuotaType.CONNECTION_CREATION_RATE.key,
                        sensors.limit,
                    )
                    return ConnectionAdmission(None, admission.throttle_ms)
                connections.shadowed[key] += 1
                rate.record_permissive(sensors, 1.0, now_ms)
        if connections.enabled:
            tags = connections.tags(*client)
            limit = connections.limit(tags)
            if limit is not None and not connections.room(tags, limit):
                key = (QuotaType.CONNECTIONS, tags)
                if self._applies(QuotaType.CONNECTIONS, peer, principal, now_ms):
                    connections.refused[key] += 1
                    log.warning(
                        "closing client %s (User:%s, client-id %r): its principal is at its "
                        "limit of connections across the fleet, %s = %d of %s (%d open as "
                        "this proxy knows them)",
                        peer,
                        principal.user,
                        principal.client_id,
                        QuotaType.CONNECTIONS.key,
                        limit,
                        connections.entity_for(tags),
                        connections.fleet(tags),
                    )
                    return ConnectionAdmission(None)
                connections.shadowed[key] += 1
        connections.connected(client)
        return ConnectionAdmission(client)

    def release(self, client: Client) -> None:
        self._sensors.engine.connections.closed(client)

    def _applies(self, guard: QuotaType, peer: str, principal: Principal, now_ms: int) -> bool:
        """Whether a refusal is carried out; in shadow mode it is logged (at most every
        SHADOW_LOG_INTERVAL_MS per guard) and counted instead."""
        if guard not in self._settlement.shadow:
            return True
        last = self._shadow_logged_ms.get(guard)
        if last is None or now_ms - last >= SHADOW_LOG_INTERVAL_MS:
            self._shadow_logged_ms[guard] = now_ms
            log.info(
                "shadow mode: would refuse client %s (user=%s client_id=%s) for %s",
                peer,
                sanitize(principal.user),
                principal.client_id,
                guard.key,
            )
        return False
