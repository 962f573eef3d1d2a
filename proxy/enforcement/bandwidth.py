"""producer_byte_rate and consumer_byte_rate: bytes charged as Kafka charges them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from proxy.enforcement.ceilings import ceiling_owed, charge_ceiling, charge_ceilings
from proxy.enforcement.sensors import Sensors, charge
from proxy.enforcement.settlement import Settlement
from proxy.handlers.base import Request
from quotas.entities import QuotaType
from quotas.managers import UNLIMITED, ClientSensors
from quotas.principal import sensors_of
from quotas.topics import TopicQuotaManager
from quotas.verdicts import Largest, Rejudged, Verdict


class ProduceEnforcement:
    def __init__(self, sensors: Sensors, settlement: Settlement) -> None:
        self._sensors = sensors
        self._settlement = settlement
        #: whether any topic's producer_byte_rate applies: read for every Produce, so kept
        #: as an attribute, set whenever limits change (Enforcement._limits_changed)
        self.topic_quotas = sensors.engine.topic_produce.enabled
        #: whether any broker has a produce ceiling (kept as topic_quotas is)
        self.ceilings = sensors.engine.produce_ceiling.enabled
        #: whether the disk guard holds any log directory (set whenever it reads one)
        self.disk_guard = sensors.engine.disk.enabled

    def charge(self, request: Request, size: int) -> bool:
        """Charge a Produce request's bytes when it is read, as Kafka charges them when it
        handles the request: a client pipelining requests is judged on each one in turn, and
        its connection stops being read at the first request over quota. The verdict is
        judged again when the response goes out (quotas/verdicts.py Rejudged)."""
        manager = self._sensors.engine.produce
        if not manager.enabled:
            return False
        principal, now = request.principal, request.now_ms
        sensors = principal.sensors[manager.slot] or sensors_of(manager, principal, now)
        throttle = manager.record_and_get_throttle_time_ms(sensors, size, now)
        if not throttle:
            return False
        verdict = request.verdict = Rejudged(manager, sensors, throttle)
        if verdict.manager.quota_type in self._settlement.shadow:
            return False
        self._settlement.hold(verdict, now)
        return True

    def charge_topics(self, request: Request, written: Mapping[str, int]) -> bool:
        """Each limited topic's sensor records the bytes written into it; the request owes
        the largest throttle of these and its principal's (quotas/verdicts.py Largest),
        each judged again when the response goes out."""
        now = request.now_ms
        verdict = _charge_topics(self._sensors.engine.topic_produce, request, written, Rejudged)
        if verdict is None:
            return False
        if QuotaType.PRODUCE in self._settlement.shadow:
            return False
        self._settlement.hold(verdict, now)
        return True

    def topics_held_ms(self, topics: Iterable[str], now_ms: int) -> int:
        return _held_ms(self._sensors.engine.topic_produce, topics, now_ms)

    def charge_ceiling(self, request: Request, broker: int | None, size: int) -> bool:
        """The broker's produce ceiling and the cluster's, charged as the principal's quota
        is."""
        manager = self._sensors.engine.produce_ceiling
        return charge_ceilings(manager, self._settlement, request, broker, size)

    def charge_disks(self, request: Request, written: Mapping[tuple[str, int], int]) -> bool:
        """Each log directory the disk guard holds, charged with the bytes written into the
        partitions it has a replica of (docs/ceilings.md#the-disk-guard)."""
        manager = self._sensors.engine.disk
        by_partition = manager.guard.by_partition
        sizes: dict[str, int] = {}
        for partition, size in written.items():
            for directory in by_partition.get(partition, ()):
                sizes[directory] = sizes.get(directory, 0) + size
        stops = False
        for directory, size in sizes.items():
            stops = charge_ceiling(manager, self._settlement, request, directory, size) or stops
        return stops


class FetchEnforcement:
    def __init__(self, sensors: Sensors, settlement: Settlement) -> None:
        self._sensors = sensors
        self._settlement = settlement
        #: whether any topic's consumer_byte_rate applies (as ProduceEnforcement's)
        self.topic_quotas = sensors.engine.topic_fetch.enabled
        #: whether any broker has a fetch ceiling
        self.ceilings = sensors.engine.fetch_ceiling.enabled

    def _limited(self, request: Request) -> ClientSensors | None:
        """The principal's consumer sensors when a consumer quota applies and is enforced
        (shadowed, a Fetch is decided once, when its response is charged)."""
        fetch = self._sensors.engine.fetch
        if not fetch.enabled or QuotaType.FETCH in self._settlement.shadow:
            return None
        sensors = sensors_of(fetch, request.principal, request.now_ms)
        return None if sensors.limit == UNLIMITED else sensors

    def owed(self, request: Request) -> int:
        """A principal already over its consumer quota is answered at once with an empty
        Fetch and the throttle, as Kafka returns an empty fetch when it throttles."""
        sensors = self._limited(request)
        if sensors is None:
            return 0
        fetch = self._sensors.engine.fetch
        throttle = fetch.throttle_time_ms(sensors, request.now_ms)
        if throttle:
            request.verdict = Verdict(fetch, sensors, throttle)
        return throttle

    def cap(self, request: Request) -> int | None:
        """Kafka caps a fetch to what the quota allows in one quota window."""
        sensors = self._limited(request)
        if sensors is None:
            return None
        return int(self._sensors.engine.fetch.max_value_in_quota_window(sensors))

    def charge(self, request: Request, size: int) -> None:
        """Charge a Fetch response's bytes, as Kafka does once it has read the log."""
        principal = self._sensors.current(request.principal)
        verdict = charge(self._sensors.engine.fetch, principal, size, request.now_ms)
        if verdict is not None:
            request.verdict = verdict

    def charge_topics(self, request: Request, read: Mapping[str, int]) -> None:
        """Each limited topic's sensor records the bytes read from it; the request owes the
        largest throttle of these and its principal's."""
        _charge_topics(self._sensors.engine.topic_fetch, request, read, Verdict)

    def topics_held_ms(self, topics: Iterable[str], now_ms: int) -> int:
        return _held_ms(self._sensors.engine.topic_fetch, topics, now_ms)

    def ceiling_owed(self, request: Request, broker: int | None) -> int:
        """The throttle a principal past its share of the broker owes before its Fetch."""
        return ceiling_owed(self._sensors.engine.fetch_ceiling, self._settlement, request, broker)

    def charge_ceiling(self, request: Request, broker: int | None, size: int) -> None:
        """The broker's fetch ceiling and the cluster's, charged with the response's bytes."""
        manager = self._sensors.engine.fetch_ceiling
        charge_ceilings(manager, self._settlement, request, broker, size, Verdict)

    def topics_cap(self, topics: Iterable[str], now_ms: int) -> int | None:
        manager = self._sensors.engine.topic_fetch
        if QuotaType.FETCH in self._settlement.shadow:
            return None
        caps = [
            manager.max_value_in_quota_window(sensors)
            for topic in topics
            if (sensors := manager.sensors_of_topic(topic, now_ms)) is not None
            and sensors.limit != UNLIMITED
        ]
        return int(min(caps)) if caps else None


def _charge_topics(
    manager: TopicQuotaManager,
    request: Request,
    sizes: Mapping[str, int],
    verdict_of: type[Verdict],
) -> Verdict | None:
    """Each limited topic's sensor records its bytes; the request's verdict becomes the
    largest of the topics' and its principal's (quotas/verdicts.py Largest), None when no
    topic throttles. `verdict_of`: Rejudged where the throttle is judged again when the
    response goes out (a Produce's), Verdict where it is charged then (a Fetch's)."""
    now = request.now_ms
    verdicts: list[Verdict] = []
    for topic, size in sizes.items():
        sensors = manager.sensors_of_topic(topic, now)
        if sensors is not None:
            throttle = manager.record_and_get_throttle_time_ms(sensors, size, now)
            if throttle:
                verdicts.append(verdict_of(manager, sensors, throttle))
    if not verdicts:
        return None
    if request.verdict is not None:
        verdicts.append(request.verdict)
    verdict = request.verdict = Largest(verdicts) if len(verdicts) > 1 else verdicts[0]
    return verdict


def _held_ms(manager: TopicQuotaManager, topics: Iterable[str], now_ms: int) -> int:
    """The longest hold on these topics' sensors (0: none runs)."""
    until = 0
    for topic in topics:
        sensors = manager.sensors_of_topic(topic, now_ms)
        if sensors is not None:
            until = max(until, sensors.held_until_ms)
    return until - now_ms if until > now_ms else 0
