"""[metrics]: where Prometheus scrapes the proxy."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from config.values import typed_values


@dataclass(frozen=True)
class MetricsSettings:
    enabled: bool = True
    #: loopback by default: quota metrics name principals and client-ids
    listen_host: str = "127.0.0.1"
    port: int = 9464


_METRICS_TYPES: dict[str, tuple[type, ...]] = {
    "enabled": (bool,),
    "listen_host": (str,),
    "port": (int,),
}


assert set(_METRICS_TYPES) == {f.name for f in fields(MetricsSettings)}


def parse_metrics_settings(section: dict[str, Any], problems: list[str]) -> MetricsSettings:
    values = typed_values("metrics", section, _METRICS_TYPES, problems)
    if "port" in values and not 0 <= values["port"] <= 65535:
        problems.append(f"[metrics] key 'port': {values.pop('port')} is not a TCP port")
    return MetricsSettings(**values)
