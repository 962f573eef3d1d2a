"""Kafka's connection quotas (SocketServer's ConnectionQuotas): how many connections the
proxy holds, how many one address holds, and how fast one address may open them.

- max.connections: at the limit the acceptor waits for a slot (KIP-402), so further clients
  wait in the kernel's accept queue rather than being refused.
- max.connections.per.ip, with per-address overrides: the connection over the limit is
  closed at once (TooManyConnectionsException).
- connection_creation_rate per IP (KIP-612; `kafka-configs --entity-type ips`): a connection
  that would take the address over its rate is unrecorded, held for the throttle time, and
  then closed (ConnectionThrottledException), so a reconnect storm from one address is
  slowed by its own connections while other addresses connect freely.

The order of checks and the arithmetic are ConnectionQuotas.inc's: wait for a slot, record
the address's rate (unrecording a throttled connection), then count the connection and
refuse it if the address is over its maximum. Pure: the caller passes the time.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from quotas.entities import DEFAULT
from quotas.javamath import INT_MAX
from quotas.managers import SENSOR_EXPIRATION_MS, throttle_time_ms
from quotas.stats import MetricConfig, Rate


def canonical_ip(text: str) -> str | None:
    """An address as the [ips] entities and per-address limits name it, or None if `text` is
    not one: written as Python writes it, and an IPv4 address in its IPv6-mapped form
    (::ffff:a.b.c.d, how a dual-stack listener reports IPv4 clients) as plain IPv4, as
    Java's InetAddress reads it."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


@dataclass(frozen=True)
class ConnectionLimits:
    """The [proxy] connection settings and the [ips] quota entities, as Kafka names them."""

    #: max.connections
    max_connections: int = INT_MAX
    #: max.connections.per.ip
    max_connections_per_ip: int = INT_MAX
    #: max.connections.per.ip.overrides: address -> maximum
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    #: connection_creation_rate by ips entity: an address or `<default>`
    connection_creation_rate: Mapping[str, float] = field(default_factory=dict)

    def max_for(self, ip: str) -> int:
        return self.max_connections_per_ip_overrides.get(ip, self.max_connections_per_ip)

    def rate_for(self, ip: str) -> float | None:
        """The address's own quota, else the `<default>` one (Kafka's ips entity lookup)."""
        rates = self.connection_creation_rate
        rate = rates.get(ip)
        return rate if rate is not None else rates.get(DEFAULT)


class ConnectionVerdict(Enum):
    ACCEPT = "accepted"
    #: over max.connections.per.ip: closed at once
    REFUSE = "refused"
    #: over connection_creation_rate: held for the throttle, then closed
    THROTTLE = "throttled"


class ConnectionAdmission(NamedTuple):
    verdict: ConnectionVerdict
    #: how long a throttled connection is held before it is closed
    throttle_ms: int = 0


class _IpRate:
    __slots__ = ("last_record_ms", "rate")

    def __init__(self) -> None:
        self.rate = Rate()
        self.last_record_ms = 0


class ConnectionQuotas:
    def __init__(self, limits: ConnectionLimits, window: MetricConfig) -> None:
        self.limits = limits
        #: quota.window.num x quota.window.size.seconds, as Kafka's connection rate sensors
        self.window = window
        #: connections open now, by address
        self.counts: dict[str, int] = {}
        self.total = 0
        #: sockets accepted whose client is not known yet (a load balancer's PROXY protocol
        #: header being read): they hold a slot of max.connections, and no address's
        self.pending = 0
        self._rates: dict[str, _IpRate] = {}

    def update(self, limits: ConnectionLimits, window: MetricConfig) -> None:
        """A reload: counts stay; rate sensors restart only if their window changed, and
        take a new quota in place (as Kafka updates a sensor's quota config)."""
        if window != self.window:
            self._rates.clear()
        self.limits = limits
        self.window = window

    def has_slot(self) -> bool:
        """Whether the acceptor may take the next connection (max.connections)."""
        return self.total + self.pending < self.limits.max_connections

    def hold_slot(self) -> None:
        """A socket accepted before its client is known takes a slot until it is known
        (admit, after unhold_slot) or closed (unhold_slot)."""
        self.pending += 1

    def unhold_slot(self) -> None:
        self.pending -= 1

    def admit(self, ip: str, now_ms: int) -> ConnectionAdmission:
        """ConnectionQuotas.inc for an accepted socket; an accepted one must be released."""
        limit = self.limits.rate_for(ip)
        if limit is not None:
            sensor = self._rates.get(ip)
            if sensor is None:
                sensor = self._rates[ip] = _IpRate()
            sensor.last_record_ms = now_ms
            observed, window_ms = sensor.rate.record_and_measure(self.window, 1.0, now_ms)
            if observed > limit:
                # "unrecord the connection since we won't accept the connection"
                sensor.rate.record(self.window, -1.0, now_ms)
                throttle = throttle_time_ms(observed, limit, window_ms, self.window.window_ms)
                return ConnectionAdmission(ConnectionVerdict.THROTTLE, throttle)
        count = self.counts.get(ip, 0)
        self.counts[ip] = count + 1
        self.total += 1
        if count >= self.limits.max_for(ip):
            self.release(ip)
            return ConnectionAdmission(ConnectionVerdict.REFUSE)
        return ConnectionAdmission(ConnectionVerdict.ACCEPT)

    def release(self, ip: str) -> None:
        """ConnectionQuotas.dec: an admitted connection closed."""
        count = self.counts[ip] - 1
        if count:
            self.counts[ip] = count
        else:
            del self.counts[ip]
        self.total -= 1

    def expire(self, now_ms: int) -> int:
        """Drop the rate sensors of addresses quiet for an hour, as Kafka's sensors expire."""
        stale = [
            ip
            for ip, sensor in self._rates.items()
            if now_ms - sensor.last_record_ms >= SENSOR_EXPIRATION_MS
        ]
        for ip in stale:
            del self._rates[ip]
        return len(stale)
