"""The proxy's one context: everything the runtime shares, built once at start-up and handed
to the listeners, the connections, their cores and (as proxy.handlers.base.Runtime) the
handlers, in the spirit of Kroxylicious's FilterContext, instead of parameter chains.

A reload changes what it holds in place (limits in the enforcement, renewed TLS contexts and
mapping rules, connection limits); connections read it when they need it, so a connection
made after a reload uses what the reload brought.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from config.cluster import ClusterSettings
from config.loader import ProxyConfig
from config.proxy import ProxySettings
from config.tls import SUB_CLAIM_NAME
from protocol.rewrite import Advertise
from protocol.sasl import SUB_CLAIM, Mechanism, mechanisms
from proxy.enforcement import Enforcement
from proxy.enforcement.failed_logins import FailedLogins
from proxy.handlers.base import QuotaAdmin
from proxy.handlers.principals import PrincipalBuilder
from proxy.handlers.topic_cache import TopicCache
from proxy.runtime.brokers import Brokers
from proxy.runtime.clock import Clock
from proxy.runtime.counters import ProxyStats
from proxy.runtime.login_guard import LoginGuard
from proxy.runtime.memory_pool import MemoryPool
from proxy.runtime.sni import SniRoutes
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.admin import Changes
from quotas.connections import ConnectionLimits, ConnectionQuotas
from quotas.engine import QuotaEngine
from quotas.entities import QuotaEntity
from quotas.settings import QuotaConfig, QuotaLimits
from quotas.store import FILE, QuotaStore
from quotas.thread_time import ThreadTimes
from quotas.validation import INVALID_REQUEST


@dataclass(eq=False)
class ProxyContext:
    settings: ProxySettings
    clock: Clock
    #: quota enforcement, by quota type (the handlers' Quotas)
    quotas: Enforcement
    #: the quota limits in force, by layer (the file, what kafka-configs altered): the one
    #: writer of limits, which enforcement and the connection quotas follow
    quota_layers: QuotaStore = field(default_factory=QuotaStore)
    #: the proxy's counters for its metrics
    stats: ProxyStats = field(default_factory=ProxyStats)
    #: names each connection's principal, from its certificate and its SASL exchange
    principals: PrincipalBuilder = field(default_factory=PrincipalBuilder)
    #: where every connection counts its requests for usage samples (None: not counted)
    usage: UsageRecorder | None = None
    #: queued.max.request.bytes over every connection (None: unbounded)
    memory_pool: MemoryPool | None = None
    #: TLS towards clients ([listener]) and towards the brokers ([upstream]); None:
    #: plaintext. SASL needs neither: clients' exchanges pass through either way
    listener_tls: ssl.SSLContext | None = None
    upstream_tls: ssl.SSLContext | None = None
    #: the proxy's own client on the cluster ([cluster], else [upstream] without SASL)
    own_client: ClusterSettings = field(default_factory=ClusterSettings)
    #: the one port's names ([proxy] routing = "sni"); None: a port per broker
    sni: SniRoutes | None = None
    #: partition counts by topic, from every Metadata response through the proxy
    topics: TopicCache = field(default_factory=TopicCache)
    #: what requests cost each broker's threads, learned from round trips: request time
    thread_times: ThreadTimes = field(default_factory=ThreadTimes)
    brokers: Brokers = field(init=False)
    #: the proxy's address for a broker (the handlers' Runtime.advertise)
    advertise: Advertise = field(init=False)
    #: max.connections, max.connections.per.ip and the ips' connection_creation_rate
    connection_quotas: ConnectionQuotas = field(init=False)
    #: how kafka-configs reads and alters quotas (the handlers' QuotaAdmin): the file's
    #: quotas alone until the process opens the quota store's topic ([quota_store])
    quota_admin: QuotaAdmin = field(init=False)
    #: the share of every budget this process enforces on its own: 1 alone or while its
    #: fleet's bus carries the others' use, less while it does not (proxy/enforcement/fleet.py)
    budget_share: float = field(default=1.0, init=False)
    #: the failed-login backoff (the handlers' LoginGuard): off until a config turns it on
    login_guard: LoginGuard = field(init=False)

    def __post_init__(self) -> None:
        self.brokers = Brokers(self.settings, self.sni)
        self.advertise = self.brokers.advertise
        window = self.quotas.engine.config.settings.client
        self.connection_quotas = ConnectionQuotas(ConnectionLimits(), window)
        self.quota_layers.subscribe(self._limits_changed)
        self.quota_admin = FileQuotas(self.quota_layers)
        self.login_guard = LoginGuard(self.clock, FailedLogins(None, self.stats.failed_logins))
        # usage samples say how long each principal was throttled
        self.quotas.settlement.counting_throttled = self.usage is not None

    def _limits_changed(self, store: QuotaStore) -> None:
        """A writer changed the store: live connections are judged on the new limits at once,
        keeping their sensors' history."""
        self.quotas.apply_limits(shared(store.limits(), self.budget_share))
        connections = self.connection_quotas
        rates = replace(connections.limits, connection_creation_rate=store.ip_rates())
        connections.update(rates, connections.window)

    def share_budgets(self, share: float) -> None:
        """Enforce this share of every client quota (a fleet member that lost its bus)."""
        if share != self.budget_share:
            self.budget_share = share
            self.quotas.apply_limits(shared(self.quota_layers.limits(), share))

    def reconfigure(self, config: ProxyConfig) -> bool:
        """A reloaded file: its quotas as the store's file layer, its windows, enforcement
        settings, connection limits, renewed TLS files and mapping rules (the reloader refuses
        a new security.protocol). False when the quota windows changed and every sensor
        starts afresh."""
        self.quota_layers.replace(FILE, config.quota_entries())
        limits = shared(self.quota_layers.limits(), self.budget_share)
        kept = self.quotas.apply(
            QuotaConfig(config.quotas.settings, limits), config.shadow, config.hold_principal
        )
        connections = connection_limits(config.proxy, self.quota_layers.ip_rates())
        self.connection_quotas.update(connections, config.quotas.settings.client)
        self.listener_tls = config.listener.context
        self.upstream_tls = config.upstream.context
        self.own_client = config.cluster
        self.principals.certificates = config.listener.principal_mapper
        self.principals.mechanisms = learned_mechanisms(config)
        self.login_guard.backoffs.reconfigure(config.failed_logins)
        return kept


_NO_QUOTA_STORE = "this proxy keeps no altered quotas: name a topic in its [quota_store]"


class FileQuotas:
    """The quota admin of a proxy without a quota store topic: kafka-configs describes the
    file's quotas, and an alteration is refused as Kafka refuses a request it cannot serve,
    rather than kept in one instance's memory and lost at its restart."""

    def __init__(self, store: QuotaStore) -> None:
        self.store = store

    def unavailable(self) -> tuple[int, str] | None:
        return (INVALID_REQUEST, _NO_QUOTA_STORE)

    def apply(
        self, changes: Mapping[QuotaEntity, Changes], done: Callable[[str | None], object]
    ) -> None:
        done(_NO_QUOTA_STORE)


def learned_mechanisms(config: ProxyConfig) -> Mapping[str, Mechanism]:
    """The SASL mechanisms learned, OAUTHBEARER's by the claim the listener names."""
    return mechanisms(config.listener.value(SUB_CLAIM_NAME) or SUB_CLAIM)


def shared(limits: QuotaLimits, share: float) -> QuotaLimits:
    """Every client quota times `share`."""
    if share == 1.0:
        return limits
    return {
        quota_type: {entity: limit * share for entity, limit in per_entity.items()}
        for quota_type, per_entity in limits.items()
    }


def connection_limits(proxy: ProxySettings, ip_rates: Mapping[str, float]) -> ConnectionLimits:
    """Kafka's broker connection settings ([proxy]) with the ips quota entities."""
    return ConnectionLimits(
        proxy.max_connections,
        proxy.max_connections_per_ip,
        proxy.max_connections_per_ip_overrides,
        ip_rates,
    )


def build_context(config: ProxyConfig, clock: Clock, usage: UsageRecorder | None) -> ProxyContext:
    """The context a proxy of this config starts with: the file is the store's first layer."""
    store = QuotaStore()
    store.replace(FILE, config.quota_entries())
    quotas = QuotaConfig(config.quotas.settings, store.limits())
    context = ProxyContext(
        config.proxy,
        clock,
        Enforcement(QuotaEngine(quotas), config.shadow, config.hold_principal),
        quota_layers=store,
        principals=PrincipalBuilder(
            config.listener.principal_mapper,
            learned_mechanisms(config),
        ),
        usage=usage,
        memory_pool=MemoryPool(config.proxy.queued_max_request_bytes),
        listener_tls=config.listener.context,
        upstream_tls=config.upstream.context,
        own_client=config.cluster,
        sni=SniRoutes(config.sni, config.proxy.bootstrap_port) if config.sni else None,
    )
    limits = connection_limits(config.proxy, store.ip_rates())
    context.connection_quotas.update(limits, config.quotas.settings.client)
    context.login_guard.backoffs.reconfigure(config.failed_logins)
    return context
