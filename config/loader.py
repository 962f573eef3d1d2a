"""Reading the TOML config file into validated settings."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from config.cluster import ClusterSettings, parse_cluster
from config.enforcement import parse_enforcement
from config.errors import ConfigError
from config.fleet import FleetSettings, parse_fleet
from config.guards import DiskGuardSettings, FailedLoginSettings, parse_guards
from config.metrics import MetricsSettings, parse_metrics_settings
from config.proxy import ProxySettings, parse_proxy_settings
from config.proxy_protocol import ProxyProtocolSettings, parse_proxy_protocol
from config.quota_store import QuotaStoreSettings, parse_quota_store
from config.quotas import (
    disk_limit_problems,
    parse_broker_settings,
    parse_brokers,
    parse_entities,
    parse_ips,
    parse_topics,
)
from config.sni import SniSettings, parse_sni
from config.tls import TlsSettings, parse_tls
from config.usage import UsageSettings, parse_usage_settings
from quotas.entities import CONNECTION_GUARDS, GUARDS, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig
from quotas.store import Values, entries_of

SECTIONS = (
    "proxy",
    "proxy_protocol",
    "sni",
    "listener",
    "upstream",
    "cluster",
    "quota_store",
    "fleet",
    "metrics",
    "usage",
    "enforcement",
    "guards",
    "broker",
    "users",
    "clients",
    "ips",
    "topics",
    "brokers",
)


@dataclass(frozen=True)
class ProxyConfig:
    path: Path | None
    proxy: ProxySettings
    metrics: MetricsSettings
    quotas: QuotaConfig
    #: quota types decided and reported but not enforced ([enforcement] shadow)
    shadow: frozenset[QuotaType] = frozenset()
    #: a throttle holds every connection of the principal ([enforcement] hold)
    hold_principal: bool = True
    usage: UsageSettings = field(default_factory=UsageSettings)
    #: connection_creation_rate by address or "<default>" ([ips], KIP-612)
    ip_connection_rates: dict[str, float] = field(default_factory=dict)
    #: byte rates by topic or "<default>" ([topics]): the proxy's own quota entity
    topic_quotas: dict[str, dict[str, float]] = field(default_factory=dict)
    #: TLS towards clients ([listener]) and towards the cluster ([upstream])
    listener: TlsSettings = field(default_factory=TlsSettings)
    upstream: TlsSettings = field(default_factory=TlsSettings)
    #: the proxy's own client on the cluster ([cluster]; else [upstream] without SASL)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    #: the topic quotas altered through the proxy live in ([quota_store])
    quota_store: QuotaStoreSettings = field(default_factory=QuotaStoreSettings)
    #: the instances this one holds its budgets with ([fleet])
    fleet: FleetSettings = field(default_factory=FleetSettings)
    #: the load balancers whose PROXY protocol header names the client ([proxy_protocol])
    proxy_protocol: ProxyProtocolSettings = field(default_factory=ProxyProtocolSettings)
    #: the names of the bootstrap and the brokers on one TLS port ([proxy] routing = "sni")
    sni: SniSettings | None = None
    #: the failed-login backoff ([guards.failed_logins]); None: off
    failed_logins: FailedLoginSettings | None = None
    #: the disk guard's reading of the log directories ([guards.disk]); None: off
    disk_guard: DiskGuardSettings | None = None

    @property
    def fleet_name(self) -> str:
        """[fleet] name; for several workers without one, a fleet of this host's workers
        alone, named after the host and the bootstrap port; "" for one process alone."""
        if self.fleet.name or self.proxy.workers == 1:
            return self.fleet.name
        return f"{os.uname().nodename}-{self.proxy.bootstrap_port}"

    def quota_entries(self) -> dict[QuotaEntity, Values]:
        """Every quota the file sets, by entity: the quota store's file layer."""
        return entries_of(self.quotas.limits, self.ip_connection_rates, self.topic_quotas)

    def watched_files(self) -> list[Path]:
        """What a change of reloads the config: the file, and the TLS files it names (a
        renewed certificate is taken without a restart)."""
        sides = (self.listener, self.upstream, self.cluster.tls)
        files = sorted({Path(name) for side in sides for name in side.files})
        return [self.path, *files] if self.path is not None else files


def load_config(path: Path | str) -> ProxyConfig:
    """Parse and validate; raises ConfigError listing every problem found, not just the first."""
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(path, [f"cannot read: {exc.strerror or exc}"]) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(path, [f"not valid TOML: {exc}"]) from exc
    problems: list[str] = []
    for section in document:
        if section not in SECTIONS:
            problems.append(f"unknown section [{section}] (known: {', '.join(SECTIONS)})")
    proxy = parse_proxy_settings(_table(document, "proxy", problems), problems)
    metrics = parse_metrics_settings(_table(document, "metrics", problems), problems)
    usage = parse_usage_settings(_table(document, "usage", problems), problems)
    shadow, hold_principal = parse_enforcement(_table(document, "enforcement", problems), problems)
    guards = parse_guards(_table(document, "guards", problems), problems)
    settings = replace(
        parse_broker_settings(_table(document, "broker", problems), problems),
        guards=guards.requests,
    )
    if guards.requests_shadow:
        shadow |= frozenset(GUARDS.values())
    if guards.disk is not None and guards.disk.shadow:
        shadow |= frozenset({QuotaType.DISK_GUARD})
    if guards.connections_shadow:
        shadow |= frozenset(CONNECTION_GUARDS)
    limits = parse_entities(document.get("users"), document.get("clients"), problems)
    for quota_type, ceilings in parse_brokers(document.get("brokers"), problems).items():
        limits.setdefault(quota_type, {}).update(ceilings)
    problems.extend(disk_limit_problems(limits))
    ip_rates = parse_ips(document.get("ips"), problems)
    topic_quotas = parse_topics(document.get("topics"), problems)
    listener, upstream = parse_tls(
        _table(document, "listener", problems), _table(document, "upstream", problems), problems
    )
    cluster = parse_cluster(_table(document, "cluster", problems), upstream, problems)
    quota_store = parse_quota_store(_table(document, "quota_store", problems), problems)
    fleet = parse_fleet(_table(document, "fleet", problems), problems)
    proxy_protocol = parse_proxy_protocol(_table(document, "proxy_protocol", problems), problems)
    sni = _sni(proxy, listener, _table(document, "sni", problems), problems)
    if upstream.sasl and not cluster.sasl:
        problems.extend(
            _needs_credentials(
                usage, quota_store.topic, fleet.name, proxy.workers, upstream.security_protocol
            )
        )
    if problems:
        raise ConfigError(path, problems)
    return ProxyConfig(
        path=path,
        proxy=proxy,
        metrics=metrics,
        quotas=QuotaConfig(settings, limits),
        shadow=shadow,
        hold_principal=hold_principal,
        usage=usage,
        ip_connection_rates=ip_rates,
        topic_quotas=topic_quotas,
        listener=listener,
        upstream=upstream,
        cluster=cluster,
        quota_store=quota_store,
        fleet=fleet,
        proxy_protocol=proxy_protocol,
        sni=sni,
        failed_logins=guards.failed_logins,
        disk_guard=guards.disk,
    )


def _needs_credentials(
    usage: UsageSettings, store_topic: str, fleet_name: str, workers: int, protocol: str
) -> list[str]:
    """What the proxy would ask a SASL cluster for itself without credentials of its own:
    refused here, since the cluster would only close the connection, at start-up or later."""
    own = "the proxy holds no SASL credentials of its own; give it some in [cluster]"
    problems = []
    if usage.kafka_topic and not usage.kafka_bootstrap_servers:
        problems.append(
            f"[usage] key 'kafka_topic' = {usage.kafka_topic!r}: the upstream cluster speaks "
            f"{protocol} and {own}, or name a PLAINTEXT listener of a cluster it can write to "
            "in kafka_bootstrap_servers"
        )
    if store_topic:
        problems.append(
            f"[quota_store] key 'topic' = {store_topic!r}: the upstream cluster speaks "
            f"{protocol} and {own}"
        )
    if fleet_name:
        problems.append(
            f"[fleet] key 'name' = {fleet_name!r}: the upstream cluster speaks {protocol} and {own}"
        )
    elif workers > 1:
        problems.append(
            f"[proxy] key 'workers' = {workers}: workers share one budget through a topic on "
            f"the cluster, which speaks {protocol}, and {own}"
        )
    return problems


def _sni(
    proxy: ProxySettings, listener: TlsSettings, section: dict[str, Any], problems: list[str]
) -> SniSettings | None:
    """[sni], read when [proxy] routing names it, and refused when it does not."""
    if proxy.routing != "sni":
        if section:
            problems.append('[sni]: read only with [proxy] routing = "sni"')
        return None
    sni = parse_sni(section, problems)
    for key in ("bootstrap_host", "broker_host"):
        if not getattr(sni, key) and key not in section:
            problems.append(f"[sni] key '{key}': missing ([proxy] routing = \"sni\")")
    if not listener.tls:
        problems.append(
            "[proxy] key 'routing': \"sni\" needs TLS towards clients ([listener] "
            f"security.protocol SSL or SASL_SSL, not {listener.security_protocol})"
        )
    return sni


def _table(document: dict[str, Any], name: str, problems: list[str]) -> dict[str, Any]:
    raw = document.get(name, {})
    if not isinstance(raw, dict):
        problems.append(f"[{name}] must be a table")
        return {}
    return raw
