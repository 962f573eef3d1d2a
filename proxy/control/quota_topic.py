"""The quota store's topic: quotas altered through the proxy, kept in the cluster it fronts.

Every instance that names the topic ([quota_store]) reads it to its end before it serves and
follows it while it runs, into the store's ALTERED layer, so all instances converge and a
restart loses nothing; the cluster is the only shared state. An alteration is written as one
record batch to the topic's one partition (all of a request's changes or none) and takes
effect here when this instance reads it back, in the topic's order, as it does on every other.

The topic is created, compacted, with the proxy's own client ([cluster]) when it is missing,
and made again if it is deleted, with what this instance last read. While it cannot be read,
the proxy enforces the last quotas it read, says so in its log and in
kafka_quota_proxy_quota_store_up, and refuses alterations with a retriable error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from aiokafka.errors import KafkaError

from config.cluster import ClusterSettings
from config.loader import ProxyConfig
from config.quota_store import QuotaStoreSettings
from protocol.quota_records import record_key, record_value
from proxy.control.own_topic import UNREACHABLE, OwnTopic
from proxy.runtime.counters import ProxyStats
from quotas.admin import Changes
from quotas.entities import QuotaEntity
from quotas.store import ALTERED, FILE, QuotaStore
from quotas.validation import pairs_of, record_change

log = logging.getLogger(__name__)

#: Kafka's REQUEST_TIMED_OUT: retriable, so a client may try again once the topic is back
REQUEST_TIMED_OUT: Final = 7
#: how often the topic's health is looked at, and how long an alteration may take to be
#: written and read back
_CHECK_S: Final = 1.0
_APPLY_TIMEOUT_S: Final = 10.0
#: how long a topic that could not be read is left before it is tried again
_RETRY_S: Final = 5.0
#: one request's alterations are one record batch (Kafka's default message.max.bytes)
_MAX_BATCH_BYTES: Final = 1_000_000


class StoreUnreachable(Exception):
    """The topic could not be read at start-up: the proxy does not serve without it."""


class QuotaTopic:
    def __init__(
        self,
        store: QuotaStore,
        settings: QuotaStoreSettings,
        cluster: ClusterSettings,
        servers: Sequence[str],
        stats: ProxyStats,
    ) -> None:
        self.store = store
        self.topic = settings.topic
        self._stats = stats
        self._own = OwnTopic(
            self.topic,
            cluster,
            servers,
            "kafka-quota-proxy-store",
            {"cleanup.policy": "compact"},
            {"acks": "all", "max_batch_size": _MAX_BATCH_BYTES},
        )
        #: why the topic cannot be read now (None: it can)
        self._problem: str | None = "not read yet"
        #: every record below this offset has been applied to the store
        self._read_to = 0
        self._read_more = asyncio.Event()

    # the handlers' QuotaAdmin --------------------------------------------------------------

    def unavailable(self) -> tuple[int, str] | None:
        """Why an alteration cannot be stored now, as (Kafka error code, message)."""
        if self._problem is not None:
            return (
                REQUEST_TIMED_OUT,
                f"the quota store topic {self.topic} cannot be reached ({self._problem}); "
                "the proxy enforces the quotas it last read",
            )
        return None

    def apply(
        self, changes: Mapping[QuotaEntity, Changes], done: Callable[[str | None], object]
    ) -> None:
        """Write the changes to the topic; `done(None)` once this instance has read them back
        (they are then in force here), `done(problem)` if they could not be written."""
        asyncio.get_running_loop().create_task(self._apply(changes, done))

    async def _apply(
        self, changes: Mapping[QuotaEntity, Changes], done: Callable[[str | None], object]
    ) -> None:
        records = [
            (record_key(pairs_of(entity), key), record_value(value))
            for entity, entity_changes in changes.items()
            for key, value in entity_changes.items()
        ]
        try:
            offset = await asyncio.wait_for(self._write(records), _APPLY_TIMEOUT_S)
            await asyncio.wait_for(self._read_past(offset), _APPLY_TIMEOUT_S)
        except UNREACHABLE as exc:
            done(f"the quota store topic {self.topic} was not written: {exc!r}")
            return
        done(None)

    # the topic -----------------------------------------------------------------------------

    async def start(self, timeout_s: float) -> None:
        """Create the topic if it is missing and read it to its end: before the proxy
        serves, so a restart serves no client on quotas it forgot."""
        try:
            await asyncio.wait_for(self._open(), timeout_s)
        except UNREACHABLE as exc:
            await self.close()
            raise StoreUnreachable(
                f"[quota_store] topic {self.topic}: cannot be read from the cluster: {exc!r}"
            ) from exc
        self._set_problem(None)

    async def run(self) -> None:
        """Follow the topic while the proxy runs; watch that it still exists and answers."""
        checked = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                if self._own.renewed:
                    await self._own.close()
                if not self._own.is_open:
                    await self._open()
                    self._set_problem(None)
                await self._follow()
                if loop.time() - checked >= _CHECK_S:
                    checked = loop.time()
                    await self._check()
            except UNREACHABLE as exc:
                self._set_problem(repr(exc))
                await self.close()
                await asyncio.sleep(_RETRY_S)

    def renew(self, cluster: ClusterSettings) -> None:
        """Read with the reloaded [cluster] from the next turn on, from the beginning."""
        self._own.renew(cluster)

    async def close(self) -> None:
        await self._own.close()

    async def _open(self) -> None:
        """Open the topic (made again, with what this instance last read, if it was
        deleted) and read it to its end."""
        if await self._own.open():
            log.info("quota store topic %s created", self.topic)
            await self._republish()
        await self._own.seek_to_beginning()
        self._read_to = 0
        end = await self._own.end_offset()
        while self._read_to < end:
            await self._follow()

    async def _check(self) -> None:
        """The topic is still there: a deleted one is made again (see _open)."""
        if not await self._own.exists():
            raise KafkaError(f"the topic {self.topic} was deleted")

    async def _follow(self) -> None:
        changes: dict[QuotaEntity, Changes] = {}
        set_at: dict[tuple[QuotaEntity, str], int] = {}
        for record in await self._own.read(int(_CHECK_S * 1000) // 4):
            self._read(record.key, record.value, record.timestamp, changes, set_at)
        if changes:
            self.store.alter_many(ALTERED, changes, set_at)
        self._read_to = await self._own.position()
        self._read_more.set()

    def _read(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        changes: dict[QuotaEntity, Changes],
        set_at: dict[tuple[QuotaEntity, str], int],
    ) -> None:
        try:
            entity, quota_key, number = record_change(key, value)
        except ValueError as exc:  # QuotaError is a ValueError with Kafka's message
            log.warning("quota store topic %s: a record skipped: %s", self.topic, exc)
            return
        changes.setdefault(entity, {})[quota_key] = number
        set_at[(entity, quota_key)] = timestamp

    async def _write(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """One request's records, while the topic is read: all appended, or none."""
        if self._problem is not None:
            raise KafkaError(self._problem)
        return await self._own.append(records)

    async def _read_past(self, offset: int) -> None:
        while self._read_to <= offset:
            self._read_more.clear()
            await self._read_more.wait()

    async def _republish(self) -> None:
        known = [
            (record_key(pairs_of(entity), key), record_value(value))
            for entity, values in self.store.layer(ALTERED).items()
            for key, value in values.items()
        ]
        for start in range(0, len(known), 1000):  # atomicity is not needed: each is a value
            await self._own.append(known[start : start + 1000])
        if known:
            log.warning(
                "quota store topic %s was missing: made again with the %d altered quotas "
                "this instance had read",
                self.topic,
                len(known),
            )

    def _altered(self) -> int:
        return sum(len(values) for values in self.store.layer(ALTERED).values())

    def _set_problem(self, problem: str | None) -> None:
        if problem == self._problem:
            return
        if problem is None:
            log.info("quota store topic %s read: %d altered quotas", self.topic, self._altered())
        else:
            log.warning(
                "quota store topic %s cannot be read (%s): enforcing the quotas last read; "
                "alterations are refused until it is back",
                self.topic,
                problem,
            )
        self._problem = problem
        self._stats.quota_store_up = problem is None


async def read_quota_store(config: ProxyConfig, offline: bool = False) -> QuotaStore:
    """The file's quotas and those altered through the proxy, as a proxy of this config
    starts with them (check-config and explain say where each comes from); the file's
    alone when it names no quota store topic, or `offline` (the cluster not read). The
    commands that read it say why it fails themselves: aiokafka's own log is kept quiet."""
    store = QuotaStore()
    store.replace(FILE, config.quota_entries())
    if not config.quota_store.topic or offline:
        return store
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    topic = QuotaTopic(
        store,
        config.quota_store,
        config.cluster,
        config.proxy.upstream_bootstrap_servers,
        ProxyStats(),
    )
    try:
        await topic.start(2 * config.proxy.connect_timeout_s)
    finally:
        await topic.close()
    return store
