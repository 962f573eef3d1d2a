"""docs/configuration.md is the reference of every key the config file takes: a key the
parsers accept and the reference leaves out fails here, and so does a key it documents that
no parser accepts."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from config.cluster import SASL_KEYS
from config.enforcement import KEYS as ENFORCEMENT_KEYS
from config.fleet import FleetSettings
from config.guards import REQUEST_KEYS, DiskGuardSettings, FailedLoginSettings
from config.loader import SECTIONS
from config.metrics import MetricsSettings
from config.proxy import ProxySettings
from config.proxy_protocol import ProxyProtocolSettings
from config.quota_store import QuotaStoreSettings
from config.quotas import BROKER_KEYS
from config.sni import SniSettings
from config.tls import LISTENER_KEYS, UPSTREAM_KEYS
from config.usage import UsageSettings
from quotas.validation import CLIENT_KEYS, DEFAULT_BROKER_KEYS, IP_KEYS, TOPIC_KEYS, USER_KEYS

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"

#: section -> every key its parser accepts
ACCEPTED: dict[str, set[str]] = {
    "proxy": {f.name for f in fields(ProxySettings)},
    "proxy_protocol": {f.name for f in fields(ProxyProtocolSettings)},
    "sni": {f.name for f in fields(SniSettings)},
    "metrics": {f.name for f in fields(MetricsSettings)},
    "usage": {f.name for f in fields(UsageSettings)},
    "quota_store": {f.name for f in fields(QuotaStoreSettings)},
    "fleet": {f.name for f in fields(FleetSettings)},
    "listener": set(LISTENER_KEYS),
    "upstream": set(UPSTREAM_KEYS),
    "cluster": {*UPSTREAM_KEYS, *SASL_KEYS},
    "enforcement": set(ENFORCEMENT_KEYS),
    "guards": {f.name for f in fields(FailedLoginSettings)}
    | set(REQUEST_KEYS)
    | {f.name for f in fields(DiskGuardSettings)},
    "broker": set(BROKER_KEYS),
    "users": set(USER_KEYS),
    "clients": set(CLIENT_KEYS),
    "ips": set(IP_KEYS),
    "topics": set(TOPIC_KEYS),
    "brokers": set(DEFAULT_BROKER_KEYS),
}


def documented() -> dict[str, set[str]]:
    """The keys in the first column of the tables under each `## [section]` heading."""
    keys: dict[str, set[str]] = {}
    section = None
    for line in REFERENCE.read_text().splitlines():
        heading = re.match(r"## \[(\w+)\]", line)
        if heading:
            section = heading.group(1)
            keys[section] = set()
        elif line.startswith("## "):
            section = None
        elif section is not None and (cell := re.match(r"\| `([^`]+)` \|", line)):
            keys[section].add(cell.group(1))
    return keys


def test_every_section_of_the_file_has_its_table() -> None:
    assert set(documented()) == set(SECTIONS) == set(ACCEPTED)


def test_every_key_a_parser_accepts_is_documented_and_no_other() -> None:
    found = documented()
    for section, accepted in ACCEPTED.items():
        assert found[section] == accepted, (
            f"[{section}]: missing {sorted(accepted - found[section])}, "
            f"not a key {sorted(found[section] - accepted)}"
        )
