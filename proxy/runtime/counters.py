"""The proxy's own counters, kept where they are counted.

The runtime, the shell and the control side add to them as things happen; the metrics
collector (proxy/observability/metrics.py) only reads them at scrape time, so nothing that
counts needs to import Prometheus.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from proxy.enforcement.failed_logins import FailedLoginCounts


@dataclass
class ProxyStats:
    """Counters of the proxy itself, next to Kafka's quota metrics."""

    reloads_succeeded: int = 0
    reloads_failed: int = 0
    #: False from a refused reload until one is taken: the running config is not the file's
    last_reload_succeeded: bool = True
    #: quota sensors dropped after an hour without activity
    expired_sensors: int = 0
    #: client connections by listener: served, refused (max.connections.per.ip), and held
    #: then closed (connection_creation_rate)
    connections_accepted: Counter[str] = field(default_factory=Counter)
    connections_refused: Counter[str] = field(default_factory=Counter)
    connections_throttled: Counter[str] = field(default_factory=Counter)
    #: connections closed for their PROXY protocol header (missing, malformed, untrusted)
    proxy_header_refused: Counter[str] = field(default_factory=Counter)
    #: connections closed by connections.max.idle.ms
    connections_idle_closed: int = 0
    #: usage samples written, and dropped, by sink ("file", "kafka")
    usage_samples: Counter[str] = field(default_factory=Counter)
    usage_dropped: Counter[str] = field(default_factory=Counter)
    #: whether the quota store's topic is read now; None without one ([quota_store])
    quota_store_up: bool | None = None
    #: the fleet's bus (proxy/control/fleet_bus.py); None outside a fleet
    fleet: FleetStats | None = None
    #: what the failed-login backoff refused and held ([guards.failed_logins])
    failed_logins: FailedLoginCounts = field(default_factory=FailedLoginCounts)


@dataclass
class FleetStats:
    #: this member and the others heard from lately
    members: int = 1
    bus_up: bool = False
    #: the share of every budget enforced here on its own: 1 while the bus is up
    budget_share: float = 1.0
    #: sensors this member watches: past their line, shared on the bus
    watched: int = 0
    #: through owners, the partitions whose owner is silent: their principals held here
    #: at this member's share (proxy/enforcement/fleet_owners.py)
    partitions_held: int = 0
    bytes_published: int = 0
    bytes_read: int = 0
    #: CPU of the fleet's own work: publishing, encoding, decoding and recording the others'
    #: use (not the Kafka client's I/O)
    cpu_seconds: float = 0.0
    #: publications the bus did not take (their use went out with the next one)
    publications_lost: int = 0
