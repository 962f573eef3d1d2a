"""[sni]: one TLS port for the bootstrap and every broker, the broker chosen by the name the
client asks for in its TLS handshake (SNI), as behind a single TLS entry point (an OpenShift
route, an ingress with TLS passthrough, one cloud load balancer port)."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from config.values import typed_values

#: what broker_host must contain, once: the broker's node id
NODE_ID = "{id}"
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class SniSettings:
    """Read only with [proxy] routing = "sni"."""

    #: the bootstrap's name
    bootstrap_host: str = ""
    #: broker N's name: the pattern with "{id}" replaced by N
    broker_host: str = ""
    #: the port written beside those names, where clients reach the one port (the
    #: balancer's, the route's); 0: the bootstrap port
    advertised_port: int = 0


_TYPES: dict[str, tuple[type, ...]] = {
    "bootstrap_host": (str,),
    "broker_host": (str,),
    "advertised_port": (int,),
}
assert set(_TYPES) == {f.name for f in fields(SniSettings)}


def parse_sni(section: dict[str, Any], problems: list[str]) -> SniSettings:
    values = typed_values("sni", section, _TYPES, problems)
    for key in ("bootstrap_host", "broker_host"):
        if key not in values:
            continue
        name = values[key].lower()
        example = name.replace(NODE_ID, "1") if key == "broker_host" else name
        if not host_name(example):
            problems.append(f"[sni] key '{key}': {values.pop(key)!r} is not a host name")
        elif key == "broker_host" and name.count(NODE_ID) != 1:
            problems.append(
                f"[sni] key 'broker_host': {values.pop(key)!r} must contain {NODE_ID} once "
                "(broker-{id}.kafka.example.com)"
            )
        else:
            values[key] = name
    port = values.get("advertised_port")
    if port is not None and not 0 <= port <= 65535:
        problems.append(f"[sni] key 'advertised_port': {port} is not a TCP port")
        values.pop("advertised_port")
    return SniSettings(**values)


def host_name(name: str) -> bool:
    return 0 < len(name) <= 253 and all(_LABEL.match(label) for label in name.split("."))
