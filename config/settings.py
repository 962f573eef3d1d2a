"""The [proxy] section: where the proxy listens and which cluster it fronts."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from protocol.frames import DEFAULT_MAX_FRAME_BYTES


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
    #: Kafka's socket.request.max.bytes: larger request frames close the connection
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    connect_timeout_s: float = 10.0
    uvloop: bool = True

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
}
assert set(_TYPES) == {f.name for f in fields(ProxySettings)}


def parse_proxy_settings(section: dict[str, Any], problems: list[str]) -> ProxySettings:
    """Build settings from the [proxy] table, appending one message per bad key."""
    values: dict[str, Any] = {}
    for key, raw in section.items():
        value: Any = raw
        expected = _TYPES.get(key)
        where = f"[proxy] key '{key}'"
        if expected is None:
            problems.append(f"{where}: unknown key (known: {', '.join(sorted(_TYPES))})")
            continue
        if not _has_type(value, expected):
            names = " or ".join(t.__name__ for t in expected)
            problems.append(f"{where}: expected {names}, got {type(value).__name__} {value!r}")
            continue
        if key.endswith("_port") or key == "broker_port_base":
            if not 0 <= value <= 65535:
                problems.append(f"{where}: {value} is not a TCP port")
                continue
        elif key in ("max_frame_bytes", "connect_timeout_s") and value <= 0:
            problems.append(f"{where}: must be > 0, got {value}")
            continue
        if key == "upstream_bootstrap_servers":
            bad = [s for s in value if not _is_host_port(s)]
            if bad or not value:
                problems.append(f"{where}: expected a non-empty list of 'host:port', got {value!r}")
                continue
            value = tuple(value)
        values[key] = value
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
