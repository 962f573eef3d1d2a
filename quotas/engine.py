"""All quota managers of one proxy, built from (and re-built by) the quota config."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from quotas.ceilings import CeilingManager
from quotas.disk_guard import DiskCeilings, DiskGuard
from quotas.entities import CEILINGS, GUARDS, QuotaType
from quotas.managers import (
    ClientQuotaManager,
    QuotaManager,
    RequestGuardManager,
    TokenBucketQuotaManager,
)
from quotas.principal_connections import PrincipalConnections
from quotas.producer_ids import ProducerIdQuotaManager
from quotas.settings import QuotaConfig
from quotas.topics import TopicQuotaManager, client_entities

#: Kafka's request quota throttles by at most one window; mutation quotas are per second
_SECOND_MS = 1000.0
#: the least a ceiling lets a principal send where exempt use and floors take it all: a KiB
#: a second of produce and of fetch, a request a second
_CEILING_MINIMUMS = (1024.0, 1024.0, 1.0)


class QuotaEngine:
    def __init__(
        self,
        config: QuotaConfig,
        connections: PrincipalConnections | None = None,
        disk_guard: DiskGuard | None = None,
    ) -> None:
        """`connections`: the open connections an engine this one replaces counted (they
        are not sensors: they stay open whatever the windows); `disk_guard`: what the disk
        guard read of the brokers' log directories (none read yet by default)."""
        self.config = config
        settings, limits = config.settings, config.limits
        produce, fetch = limits.get(QuotaType.PRODUCE, {}), limits.get(QuotaType.FETCH, {})
        self.produce = ClientQuotaManager(
            QuotaType.PRODUCE, settings.client, client_entities(produce)
        )
        self.fetch = ClientQuotaManager(QuotaType.FETCH, settings.client, client_entities(fetch))
        #: the byte rates of topics, whoever writes or reads them (quotas/topics.py)
        self.topic_produce = TopicQuotaManager(QuotaType.PRODUCE, settings.client, produce)
        self.topic_fetch = TopicQuotaManager(QuotaType.FETCH, settings.client, fetch)
        self.request = ClientQuotaManager(
            QuotaType.REQUEST,
            settings.client,
            limits.get(QuotaType.REQUEST, {}),
            max_throttle_ms=settings.client.window_ms,
        )
        self.controller_mutation = TokenBucketQuotaManager(
            QuotaType.CONTROLLER_MUTATION,
            settings.controller,
            limits.get(QuotaType.CONTROLLER_MUTATION, {}),
            unit_ms=_SECOND_MS,
        )
        #: KIP-936: producer_ids_rate counts new producer ids per quota window
        self.producer_ids = ProducerIdQuotaManager(
            settings.producer_ids,
            settings.producer_id_cache,
            limits.get(QuotaType.PRODUCER_IDS, {}),
        )
        #: the request-rate guards, by the api_key each counts (docs/guards.md)
        self.guards = {
            api_key: RequestGuardManager(
                guard,
                settings.guards.windows(guard),
                limits.get(guard, {}),
                settings.guards.max_throttle_ms,
            )
            for api_key, guard in GUARDS.items()
        }
        #: the connection guards: how fast a principal opens connections, a bucket as the
        #: request-rate guards' are, and how many it holds open
        self.connection_creation = RequestGuardManager(
            QuotaType.CONNECTION_CREATION_RATE,
            settings.guards.windows(QuotaType.CONNECTION_CREATION_RATE),
            limits.get(QuotaType.CONNECTION_CREATION_RATE, {}),
            settings.guards.max_throttle_ms,
        )
        self.connections = PrincipalConnections() if connections is None else connections
        self.connections.update_limits(client_entities(limits.get(QuotaType.CONNECTIONS, {})))
        #: each broker's ceilings (docs/ceilings.md): on top of every principal's quotas
        self.produce_ceiling, self.fetch_ceiling, self.request_ceiling = (
            CeilingManager(ceiling, limits, floor, quota, minimum)
            for (ceiling, (floor, quota)), minimum in zip(
                CEILINGS.items(), _CEILING_MINIMUMS, strict=True
            )
        )
        #: the disk guard's ceilings, one per log directory under its soft limit
        self.disk = DiskCeilings(disk_guard or DiskGuard(), limits)

        self._by_type: dict[QuotaType, QuotaManager] = {m.quota_type: m for m in self.managers()}

    def manager(self, quota_type: QuotaType) -> QuotaManager:
        return self._by_type[quota_type]

    def managers(self) -> Iterator[QuotaManager]:
        """Every quota type's sensors, a principal's: Kafka's, then the guards'."""
        yield from self.kafka_managers()
        yield from self.buckets()

    def buckets(self) -> Iterator[RequestGuardManager]:
        """The guards' buckets: the request rates', then the connection creation rate's."""
        yield from self.guards.values()
        yield self.connection_creation

    def kafka_managers(self) -> Iterator[QuotaManager]:
        yield self.produce
        yield self.fetch
        yield self.request
        yield self.controller_mutation
        yield self.producer_ids

    def shared(self) -> tuple[QuotaManager, ...]:
        """What a fleet shares, in the order its records number the managers: Kafka's
        quota types, the topics', then the guards' (a member from before a guard skips its
        number, so a fleet mid-roll guards on its newer members alone). The open
        connections are counts, not uses: the fleet carries them apart."""
        return (*self.kafka_managers(), *self.topic_managers(), *self.buckets())

    def update(self, config: QuotaConfig) -> bool:
        """Apply a reloaded config to live sensors; False when the windows changed.

        Kafka reads its quota window settings once at start-up; if a reload changes them,
        the caller starts a fresh engine (sensor history cannot be re-sampled). The guards'
        buckets are not windows: they take new settings in place.
        """
        settings, guards = config.settings, config.settings.guards
        if replace(settings, guards=self.config.settings.guards) != self.config.settings:
            return False
        self.config = config
        for guard in self.buckets():  # a bucket refills to its new burst as it goes
            guard.config = guards.windows(guard.quota_type)
            guard.max_throttle_ms = guards.max_throttle_ms
        for manager in self.managers():
            limits = config.limits.get(manager.quota_type, {})
            manager.update_limits(client_entities(limits))
        connections = config.limits.get(QuotaType.CONNECTIONS, {})
        self.connections.update_limits(client_entities(connections))
        for topics in self.topic_managers():
            topics.update_limits(config.limits.get(topics.quota_type, {}))
        for ceiling in self.ceilings():
            ceiling.update_classes(config.limits)
        return True

    def ceilings(self) -> Iterator[CeilingManager]:
        yield self.produce_ceiling
        yield self.fetch_ceiling
        yield self.request_ceiling
        yield self.disk

    def topic_managers(self) -> Iterator[TopicQuotaManager]:
        yield self.topic_produce
        yield self.topic_fetch

    def expire(self, now_ms: int) -> int:
        managers = (*self.managers(), *self.topic_managers(), *self.ceilings())
        return sum(manager.expire(now_ms) for manager in managers)
