"""[proxy]: where the proxy listens, which cluster it fronts, and Kafka's broker connection
settings."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from config.values import is_host_port, typed_values
from quotas.connections import canonical_ip
from quotas.javamath import INT_MAX


@dataclass(frozen=True)
class ProxySettings:
    #: the upstream cluster, as a client's bootstrap.servers
    upstream_bootstrap_servers: tuple[str, ...] = ("127.0.0.1:9092",)
    listen_host: str = "127.0.0.1"
    #: the host written into Metadata and friends; defaults to listen_host
    advertised_host: str = ""
    bootstrap_port: int = 9192
    #: the listener of upstream broker N is at broker_port_base + N (deterministic)
    broker_port_base: int = 9200
    #: Kafka's socket.request.max.bytes (and its default): larger request frames close the
    #: connection
    max_frame_bytes: int = 100 * 1024 * 1024
    connect_timeout_s: float = 10.0
    uvloop: bool = True
    #: how often the config file is checked for changes (SIGHUP reloads at once)
    config_poll_interval_s: float = 1.0
    #: Kafka's max.connections: at the limit the proxy stops accepting until one closes
    max_connections: int = INT_MAX
    #: Kafka's max.connections.per.ip: a connection over it is closed at once; 0 admits
    #: only the addresses an override names
    max_connections_per_ip: int = INT_MAX
    #: Kafka's max.connections.per.ip.overrides, as a table of address = maximum
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    #: Kafka's queued.max.request.bytes: request bytes being read, over every connection;
    #: when they are used up the proxy reads no new request until memory returns
    queued_max_request_bytes: int = 256 * 1024 * 1024
    #: Kafka's connections.max.idle.ms: a connection with no traffic this long is closed;
    #: -1 never closes one (as Kafka's Selector with a negative value)
    connections_max_idle_ms: int = 600_000
    #: on SIGTERM, how long requests already sent upstream may take to be answered before
    #: the remaining connections are closed
    drain_timeout_s: float = 10.0
    #: on SIGTERM, how long /readyz answers 503 while clients are still served, before the
    #: drain starts: the time a load balancer's health check takes to stop sending new ones
    drain_delay_s: float = 0.0
    #: "ports": the bootstrap on bootstrap_port and broker N on broker_port_base + N; "sni":
    #: the bootstrap and every broker on bootstrap_port, told apart by TLS SNI ([sni])
    routing: str = "ports"
    #: processes that share every listener port (SO_REUSEPORT), each with its own event
    #: loop; more than one form a fleet (proxy/network/workers.py)
    workers: int = 1

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.listen_host

    def upstream_addresses(self) -> list[tuple[str, int]]:
        addresses = []
        for server in self.upstream_bootstrap_servers:
            host, _, port = server.rpartition(":")
            addresses.append((host.strip("[]"), int(port)))
        return addresses


_TYPES: dict[str, tuple[type, ...]] = {
    "upstream_bootstrap_servers": (list,),
    "listen_host": (str,),
    "advertised_host": (str,),
    "bootstrap_port": (int,),
    "broker_port_base": (int,),
    "max_frame_bytes": (int,),
    "connect_timeout_s": (int, float),
    "uvloop": (bool,),
    "config_poll_interval_s": (int, float),
    "max_connections": (int,),
    "max_connections_per_ip": (int,),
    "max_connections_per_ip_overrides": (dict,),
    "queued_max_request_bytes": (int,),
    "connections_max_idle_ms": (int,),
    "drain_timeout_s": (int, float),
    "drain_delay_s": (int, float),
    "routing": (str,),
    "workers": (int,),
}


assert set(_TYPES) == {f.name for f in fields(ProxySettings)}


ROUTINGS = ("ports", "sni")

#: more workers than this is a typo, not a machine
MAX_WORKERS = 256


#: the [proxy] keys a reload applies at once (Kafka's dynamic broker configs); the others
#: take a restart
LIVE_PROXY_KEYS = ("max_connections", "max_connections_per_ip", "max_connections_per_ip_overrides")


_POSITIVE = (
    "max_frame_bytes",
    "connect_timeout_s",
    "config_poll_interval_s",
    "queued_max_request_bytes",
    "max_connections",
)


_NOT_NEGATIVE = ("max_connections_per_ip", "drain_timeout_s", "drain_delay_s")


def parse_proxy_settings(section: dict[str, Any], problems: list[str]) -> ProxySettings:
    """Build settings from the [proxy] table, appending one message per bad key."""
    values: dict[str, Any] = {}
    for key, value in typed_values("proxy", section, _TYPES, problems).items():
        where = f"[proxy] key '{key}'"
        if key.endswith("_port") or key == "broker_port_base":
            if not 0 <= value <= 65535:
                problems.append(f"{where}: {value} is not a TCP port")
                continue
        elif key in _POSITIVE and value <= 0:
            problems.append(f"{where}: must be > 0, got {value}")
            continue
        elif key in _NOT_NEGATIVE and value < 0:
            problems.append(f"{where}: must be >= 0, got {value}")
            continue
        elif key == "connections_max_idle_ms" and value <= 0 and value != -1:
            problems.append(f"{where}: must be > 0, or -1 to never close idle ones; got {value}")
            continue
        elif key == "routing" and value not in ROUTINGS:
            problems.append(f"{where}: expected one of {', '.join(ROUTINGS)}, got {value!r}")
            continue
        elif key == "workers" and not 1 <= value <= MAX_WORKERS:
            problems.append(f"{where}: must be between 1 and {MAX_WORKERS}, got {value}")
            continue
        if key == "max_connections_per_ip_overrides":
            overrides = {
                canonical_ip(ip): limit
                for ip, limit in value.items()
                if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0
            }
            if None in overrides or len(overrides) < len(value):
                problems.append(
                    f"{where}: expected IP address = maximum (an integer >= 0), got {value!r}"
                )
                continue
            value = overrides
        if key == "upstream_bootstrap_servers":
            bad = [s for s in value if not is_host_port(s)]
            if bad or not value:
                problems.append(f"{where}: expected a non-empty list of 'host:port', got {value!r}")
                continue
            value = tuple(value)
        values[key] = value
    if values.get("workers", 1) > 1:
        for key in ("bootstrap_port", "broker_port_base"):
            if values.get(key, 1) == 0:
                problems.append(
                    f"[proxy] key '{key}': workers share their listeners' ports, so name "
                    "one (0 would give each worker a port of its own)"
                )
    if values.get("max_connections_per_ip") == 0 and not values.get(
        "max_connections_per_ip_overrides"
    ):
        problems.append(
            "[proxy] key 'max_connections_per_ip': 0 admits no client unless "
            "max_connections_per_ip_overrides names some addresses (as in Kafka)"
        )
    return ProxySettings(**values)
