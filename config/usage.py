"""[usage]: per-principal usage samples and where they are written."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from config.values import is_host_port, typed_values


@dataclass(frozen=True)
class UsageSettings:
    """Usage samples (proxy/runtime/usage_recorder.py) and where they are written
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
        if not all(is_host_port(server) for server in servers):
            problems.append(
                f"[usage] key 'kafka_bootstrap_servers': expected a list of 'host:port', "
                f"got {values.pop('kafka_bootstrap_servers')!r}"
            )
        else:
            values["kafka_bootstrap_servers"] = tuple(servers)
    return UsageSettings(**values)
