"""The proxy's one context: everything the runtime shares, built once at start-up and handed
to the listeners, the connections, their cores and (as proxy.handlers.base.Runtime) the
handlers, in the spirit of Kroxylicious's FilterContext, instead of parameter chains.

A reload changes what it holds in place (limits in the enforcement, renewed TLS contexts and
mapping rules, connection limits); connections read it when they need it, so a connection
made after a reload uses what the reload brought.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from config.settings import ProxySettings
from protocol.rewrite import Advertise
from proxy.brokers import Brokers
from proxy.clock import Clock
from proxy.enforcement import Enforcement
from proxy.handlers.principals import PrincipalBuilder
from proxy.handlers.topics import TopicCache
from proxy.memory_pool import MemoryPool
from proxy.metrics import ProxyStats
from proxy.usage import UsageRecorder
from quotas.connections import ConnectionLimits, ConnectionQuotas


@dataclass(eq=False)
class ProxyContext:
    settings: ProxySettings
    clock: Clock
    #: quota enforcement, by quota type (the handlers' Quotas)
    quotas: Enforcement
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
    #: partition counts by topic, from every Metadata response through the proxy
    topics: TopicCache = field(default_factory=TopicCache)
    brokers: Brokers = field(init=False)
    #: max.connections, max.connections.per.ip and the ips' connection_creation_rate
    connection_quotas: ConnectionQuotas = field(init=False)

    def __post_init__(self) -> None:
        self.brokers = Brokers(self.settings)
        window = self.quotas.engine.config.settings.client
        self.connection_quotas = ConnectionQuotas(ConnectionLimits(), window)

    @property
    def advertise(self) -> Advertise:
        return self.brokers.advertise
