"""producer_ids_rate (KIP-936): new producer ids per user, through a token bucket, with the
ids a user has used lately kept in a time-layered Bloom filter.

KIP-936 was never merged into Apache Kafka; this follows the KIP and its prototype
(ProducerIDQuotaManagerCache): an id found in the user's filter is free, an unseen one takes
a token, and an unseen one while the bucket is below zero is refused (check, then record, as
KIP-599's strict quota). The bucket holds one window's worth of ids, the KIP's "100 producer
ids per hour" for producer_ids_rate = 100 and one-hour windows; a refused id is not added, so
the client's retry after the throttle is judged again.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from quotas.bloom import LayeredBloomFilter, hashed
from quotas.entities import MetricTags, QuotaEntity, QuotaType
from quotas.managers import ADMITTED, Admission, ClientSensors, TokenBucketQuotaManager
from quotas.settings import ProducerIdCacheSettings
from quotas.stats import MetricConfig


class ProducerIdAdmission(NamedTuple):
    """A Produce's verdict on its producer ids, and how many unseen ones it admitted (the
    usage samples count new producer ids)."""

    admitted: bool
    throttle_ms: int
    new_ids: int


class ProducerIdQuotaManager(TokenBucketQuotaManager):
    def __init__(
        self,
        config: MetricConfig,
        cache: ProducerIdCacheSettings,
        limits: Mapping[QuotaEntity, float],
    ) -> None:
        super().__init__(QuotaType.PRODUCER_IDS, config, limits, unit_ms=float(config.window_ms))
        self.cache = cache
        #: by sensor tags (one per user), least recently given a new layer first, so the
        #: cleanup finds the filters that have emptied without visiting the others
        self._filters: OrderedDict[MetricTags, LayeredBloomFilter] = OrderedDict()
        #: ids admitted since the fleet last took them, by user (kept only in a fleet)
        self.sharing = False
        self._admitted: dict[MetricTags, list[int]] = {}

    def burst(self, limit: float) -> float:
        """One window's worth: producer_ids_rate is ids per window, not per second, and the
        KIP's example admits 100 an hour, not window.num hours' worth at once."""
        return limit

    @property
    def rate_config(self) -> MetricConfig:
        """producer.id.quota.window.num x window.size: the samples the reported rate keeps
        (the KIP's "samples to retain"), as the bucket does not use them."""
        return self.config

    def admit(
        self,
        sensors: ClientSensors,
        producer_ids: Sequence[int],
        now_ms: int,
        enforce: bool = True,
    ) -> ProducerIdAdmission:
        """Charge the ids this user has not used within the window, in order; refused at the
        first unseen id while the bucket is below zero (ids admitted before it stay).

        Not enforcing (shadow mode), an id that would be refused goes to the cluster all the
        same, so it is charged and remembered, and the verdict admits it with the throttle
        a refusal would have had.
        """
        ids = self._filters.get(sensors.tags)
        layer = None if ids is None else ids.newest_ms
        #: a full bucket and its refill, plus the one a strict check lets below zero
        new_ids = math.ceil(sensors.limit) + 1
        verdict = ADMITTED
        new = 0
        for producer_id in producer_ids:
            item = hashed(producer_id)
            if ids is not None and ids.seen(item, new_ids, now_ms):
                continue
            admission = self.record_strict(sensors, 1, now_ms)
            if not admission.admitted:
                if enforce:
                    verdict = admission
                    break
                self.record_permissive(sensors, 1, now_ms)
                verdict = Admission(True, admission.throttle_ms)
            new += 1
            if self.sharing:
                self._admitted.setdefault(sensors.tags, []).append(producer_id)
            ids = self._filter(sensors.tags, ids)
            ids.add(item, new_ids, now_ms)
        if ids is not None and ids.newest_ms != layer:
            self._filters.move_to_end(sensors.tags)
        return ProducerIdAdmission(verdict.admitted, verdict.throttle_ms, new)

    def _filter(self, tags: MetricTags, ids: LayeredBloomFilter | None) -> LayeredBloomFilter:
        if ids is None:
            ids = self._filters[tags] = LayeredBloomFilter(
                self.config.window_ms, self.cache.layer_count, self.cache.false_positive_rate
            )
        return ids

    def take_admitted(self) -> dict[MetricTags, list[int]]:
        """The ids admitted here since the last call, by user: another member remembers
        them, so a producer that reconnects through it is not charged again."""
        taken, self._admitted = self._admitted, {}
        return taken

    def remember(self, tags: MetricTags, producer_ids: list[int], now_ms: int) -> None:
        """Ids another member admitted (and charged): known here from now, charged nothing."""
        sensors = self.sensors_of_tags(tags, now_ms)
        new_ids = math.ceil(sensors.limit) + 1
        ids = self._filter(tags, self._filters.get(tags))
        layer = ids.newest_ms
        for producer_id in producer_ids:
            item = hashed(producer_id)
            if not ids.seen(item, new_ids, now_ms):
                ids.add(item, new_ids, now_ms)
        if ids.newest_ms != layer:
            self._filters.move_to_end(tags)

    def current_slot(self, sensors: ClientSensors, now_ms: int) -> object | None:
        """The user's current time slot (see LayeredBloomFilter.current_slot)."""
        ids = self._filters.get(sensors.tags)
        return None if ids is None else ids.current_slot(now_ms)

    def cleanup(self, now_ms: int) -> int:
        """Forget users whose every layer has expired (the KIP's cleanup of inactive users);
        returns how many. Older layers of active users go when the user is next seen."""
        window, dropped = self.config.window_ms, 0
        while self._filters:
            tags, ids = next(iter(self._filters.items()))
            newest = ids.newest_ms
            if newest is not None and now_ms - newest < window:
                break
            del self._filters[tags]
            dropped += 1
        return dropped

    @property
    def tracked_users(self) -> int:
        return len(self._filters)

    def filter_bytes(self) -> int:
        """The filters' bit arrays: what the layers, sized from the ids seen, hold."""
        return sum(ids.size_bytes for ids in self._filters.values())

    def filter_of(self, tags: MetricTags) -> LayeredBloomFilter | None:
        return self._filters.get(tags)
