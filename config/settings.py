"""The [proxy], [metrics], [usage] and [enforcement] sections: where the proxy listens, which
cluster it fronts, where Prometheus scrapes it, where usage samples go, and which quotas only
run in shadow mode."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from quotas.connections import canonical_ip
from quotas.entities import QUOTA_KEYS, QuotaType
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


@dataclass(frozen=True)
class MetricsSettings:
    enabled: bool = True
    #: loopback by default: quota metrics name principals and client-ids
    listen_host: str = "127.0.0.1"
    port: int = 9464


@dataclass(frozen=True)
class UsageSettings:
    """Usage samples (proxy/runtime/usage.py) and where they are written
    (proxy/observability/usage_sinks.py)."""

    enabled: bool = True
    #: the sampling window: every principal's use per API is written once per interval
    interval_s: float = 10.0
    #: JSON-lines files, relative to the working directory; "" writes no files
    directory: str = "usage-samples"
    #: a file is closed (and becomes visible to readers) after this long
    rotate_interval_s: float = 300.0
    #: closed files older than this are deleted
    retention_hours: float = 168.0
    #: also produce the samples to this topic ("" = no); created by the operator
    kafka_topic: str = ""
    #: where that topic lives; empty: the upstream cluster ([proxy] upstream_bootstrap_servers)
    kafka_bootstrap_servers: tuple[str, ...] = ()
    #: samples waiting for the Kafka producer; more are dropped and counted, never waited for
    kafka_buffer_samples: int = 10_000
    #: names the samples' source; empty: this host's name and the bootstrap port
    instance_id: str = ""


_USAGE_TYPES: dict[str, tuple[type, ...]] = {
    "enabled": (bool,),
    "interval_s": (int, float),
    "directory": (str,),
    "rotate_interval_s": (int, float),
    "retention_hours": (int, float),
    "kafka_topic": (str,),
    "kafka_bootstrap_servers": (list,),
    "kafka_buffer_samples": (int,),
    "instance_id": (str,),
}
assert set(_USAGE_TYPES) == {f.name for f in fields(UsageSettings)}


def parse_usage_settings(section: dict[str, Any], problems: list[str]) -> UsageSettings:
    values = typed_values("usage", section, _USAGE_TYPES, problems)
    for key in ("interval_s", "rotate_interval_s", "retention_hours", "kafka_buffer_samples"):
        if key in values and not values[key] > 0:
            problems.append(f"[usage] key '{key}': must be > 0, got {values.pop(key)}")
    if values.get("interval_s", 1) < 0.1:  # windows end on whole milliseconds
        problems.append(f"[usage] key 'interval_s': must be >= 0.1, got {values.pop('interval_s')}")
    servers = values.get("kafka_bootstrap_servers")
    if servers is not None:
        if not all(_is_host_port(server) for server in servers):
            problems.append(
                f"[usage] key 'kafka_bootstrap_servers': expected a list of 'host:port', "
                f"got {values.pop('kafka_bootstrap_servers')!r}"
            )
        else:
            values["kafka_bootstrap_servers"] = tuple(servers)
    return UsageSettings(**values)


@dataclass(frozen=True)
class QuotaStoreSettings:
    """[quota_store]: the compacted topic on the cluster that quotas altered through the
    proxy (kafka-configs, the Admin API) live in, shared by every instance; "" keeps none,
    and such alterations are refused."""

    topic: str = ""


#: Kafka's legal topic names (Topic.validate)
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def parse_quota_store(section: dict[str, Any], problems: list[str]) -> QuotaStoreSettings:
    values = typed_values("quota_store", section, {"topic": (str,)}, problems)
    topic = values.get("topic", "")
    if topic and not _legal_topic(topic):
        problems.append(
            f"[quota_store] key 'topic': {topic!r} is not a legal Kafka topic name "
            "(up to 249 of a-z A-Z 0-9 . _ -)"
        )
        topic = ""
    return QuotaStoreSettings(topic)


def _legal_topic(topic: str) -> bool:
    return bool(_TOPIC_NAME.match(topic)) and topic not in (".", "..")


#: a fleet's bus is this topic, suffixed with the fleet's name
FLEET_TOPIC_PREFIX = "kafka-quota-proxy-fleet."


@dataclass(frozen=True)
class FleetSettings:
    """[fleet]: instances (and workers) with the same name in front of the same cluster hold
    one budget per quota entity, through a topic of their own on it (proxy/control/fleet_bus.py).
    No name: an instance of one worker holds its budgets alone; one of several workers is a
    fleet of its own host (see fleet_name)."""

    name: str = ""
    #: how often each member publishes the use it charged
    sync_interval_ms: int = 250


#: bounds of sync_interval_ms: below, the bus costs more than it buys; above, the fleet's
#: error grows past what a quota window can hide (README, "A fleet")
SYNC_INTERVAL_MS = (10, 10_000)


def parse_fleet(section: dict[str, Any], problems: list[str]) -> FleetSettings:
    values = typed_values("fleet", section, {"name": (str,), "sync_interval_ms": (int,)}, problems)
    name = values.get("name", "")
    if name and not _legal_topic(FLEET_TOPIC_PREFIX + name):
        problems.append(
            f"[fleet] key 'name': {name!r} cannot name a Kafka topic "
            f"({FLEET_TOPIC_PREFIX}<name>: up to {249 - len(FLEET_TOPIC_PREFIX)} of "
            "a-z A-Z 0-9 . _ -)"
        )
        values.pop("name")
    low, high = SYNC_INTERVAL_MS
    interval = values.get("sync_interval_ms")
    if interval is not None and not low <= interval <= high:
        problems.append(
            f"[fleet] key 'sync_interval_ms': must be between {low} and {high}, got {interval}"
        )
        values.pop("sync_interval_ms")
    if section and not values.get("name") and "name" not in section:
        problems.append("[fleet] key 'name': missing (the fleet's members share it)")
    return FleetSettings(**values)


_METRICS_TYPES: dict[str, tuple[type, ...]] = {
    "enabled": (bool,),
    "listen_host": (str,),
    "port": (int,),
}
assert set(_METRICS_TYPES) == {f.name for f in fields(MetricsSettings)}

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
    "workers": (int,),
}
assert set(_TYPES) == {f.name for f in fields(ProxySettings)}


def typed_values(
    name: str, section: dict[str, Any], types: dict[str, tuple[type, ...]], problems: list[str]
) -> dict[str, Any]:
    """The keys of one table that exist and have the right type; a message for each other."""
    values: dict[str, Any] = {}
    for key, value in section.items():
        expected = types.get(key)
        where = f"[{name}] key '{key}'"
        if expected is None:
            problems.append(f"{where}: unknown key (known: {', '.join(sorted(types))})")
        elif not _has_type(value, expected):
            names = " or ".join(t.__name__ for t in expected)
            problems.append(f"{where}: expected {names}, got {type(value).__name__} {value!r}")
        else:
            values[key] = value
    return values


def parse_metrics_settings(section: dict[str, Any], problems: list[str]) -> MetricsSettings:
    values = typed_values("metrics", section, _METRICS_TYPES, problems)
    if "port" in values and not 0 <= values["port"] <= 65535:
        problems.append(f"[metrics] key 'port': {values.pop('port')} is not a TCP port")
    return MetricsSettings(**values)


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
_NOT_NEGATIVE = ("max_connections_per_ip", "drain_timeout_s")


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
            bad = [s for s in value if not _is_host_port(s)]
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


def _has_type(value: Any, expected: tuple[type, ...]) -> bool:
    """isinstance, except that TOML's true/false is not accepted where a number is expected."""
    if isinstance(value, bool) and bool not in expected:
        return False
    return isinstance(value, expected)


def _is_host_port(server: object) -> bool:
    if not isinstance(server, str):
        return False
    host, sep, port = server.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) <= 65535)


_HOLDS = ("principal", "connection")


def parse_enforcement(
    section: dict[str, Any], problems: list[str]
) -> tuple[frozenset[QuotaType], bool]:
    """[enforcement]: which quotas run in shadow mode, and whether a throttle holds the
    principal (`hold = "principal"`, the default) or only its connection (`"connection"`).

    shadow: true (every quota), false, or a list of quota keys. Shadowed quota types are
    measured and decided as usual, and the decisions are logged and counted, but no client
    is throttled for them: a way to trial quotas on live traffic.
    """
    values = typed_values(
        "enforcement", section, {"shadow": (bool, list), "hold": (str,)}, problems
    )
    hold = values.get("hold", "principal")
    if hold not in _HOLDS:
        problems.append(
            f"[enforcement] key 'hold': expected one of {', '.join(_HOLDS)}, got {hold!r}"
        )
    hold_principal = hold != "connection"
    shadow = values.get("shadow", False)
    if isinstance(shadow, bool):
        return (frozenset(QuotaType) if shadow else frozenset()), hold_principal
    unknown = [key for key in shadow if not isinstance(key, str) or key not in QUOTA_KEYS]
    if unknown:
        problems.append(
            f"[enforcement] key 'shadow': unknown quota {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(QUOTA_KEYS)})"
        )
        return frozenset(), hold_principal
    return frozenset(QUOTA_KEYS[key] for key in shadow), hold_principal
