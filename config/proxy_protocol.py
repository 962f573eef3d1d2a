"""[proxy_protocol]: the load balancers whose PROXY protocol header names the real client
(protocol/proxy_header.py), and which listeners expect one."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from config.values import typed_values

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class HeaderMode(Enum):
    #: no header is read: the peer's address is the client's (the default)
    OFF = "off"
    #: a trusted balancer's header is taken; a connection without one is served as the
    #: peer's (a listener reached both through a balancer and directly)
    OPTIONAL = "optional"
    #: every connection starts with a header from a trusted balancer, or is closed
    REQUIRED = "required"


@dataclass(frozen=True)
class ProxyProtocolSettings:
    #: every listener's mode, unless bootstrap_mode or brokers_mode names its own
    mode: HeaderMode = HeaderMode.OFF
    #: the bootstrap listener's mode, and the broker listeners' (the SNI port is the
    #: bootstrap's); None: `mode`
    bootstrap_mode: HeaderMode | None = None
    brokers_mode: HeaderMode | None = None
    #: the balancers' addresses: a header from any other peer closes its connection
    trusted_sources: tuple[Network, ...] = ()

    def mode_for(self, bootstrap: bool) -> HeaderMode:
        own = self.bootstrap_mode if bootstrap else self.brokers_mode
        return own if own is not None else self.mode

    def trusts(self, ip: str) -> bool:
        address = ipaddress.ip_address(ip)
        return any(address in network for network in self.trusted_sources)


_MODES = ("mode", "bootstrap_mode", "brokers_mode")
_TYPES: dict[str, tuple[type, ...]] = {
    "mode": (str,),
    "bootstrap_mode": (str,),
    "brokers_mode": (str,),
    "trusted_sources": (list,),
}
assert set(_TYPES) == {f.name for f in fields(ProxyProtocolSettings)}


def parse_proxy_protocol(section: dict[str, Any], problems: list[str]) -> ProxyProtocolSettings:
    values: dict[str, Any] = {}
    for key, value in typed_values("proxy_protocol", section, _TYPES, problems).items():
        where = f"[proxy_protocol] key '{key}'"
        if key in _MODES:
            try:
                values[key] = HeaderMode(value)
            except ValueError:
                known = ", ".join(mode.value for mode in HeaderMode)
                problems.append(f"{where}: expected one of {known}, got {value!r}")
            continue
        networks = []
        for source in value:
            try:
                networks.append(ipaddress.ip_network(source, strict=False))
            except (TypeError, ValueError):
                problems.append(f"{where}: {source!r} is not an address or a network (10.0.0.0/8)")
        values[key] = tuple(networks)
    settings = ProxyProtocolSettings(**values)
    used = {settings.mode_for(bootstrap=True), settings.mode_for(bootstrap=False)}
    if used != {HeaderMode.OFF} and not settings.trusted_sources:
        problems.append(
            "[proxy_protocol] key 'trusted_sources': missing or empty; name the load balancers' "
            "addresses or networks (a header from anyone else could claim any address)"
        )
    return settings
