"""One quota manager per quota type: record usage, decide throttle times, expire sensors.

Each mirrors its Apache Kafka counterpart (ClientQuotaManager, ClientRequestQuotaManager,
ControllerMutationQuotaManager; KIP-936's ProducerIdQuotaManager), sensor for sensor: the
same record-then-check order, the same rounding, the same sensor sharing and expiry. Every
call takes the time in milliseconds, so callers own the clock and tests replay sequences.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from quotas.entities import GUARDS, EntityQuotas, MetricTags, QuotaEntity, QuotaType
from quotas.javamath import java_round, saturate_int
from quotas.stats import DEFAULT_METRIC_CONFIG, Avg, MetricConfig, Rate, TokenBucket, burst

#: Kafka's INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS for client quota sensors.
SENSOR_EXPIRATION_MS = 3_600_000
#: Kafka's quotaLimit() when no entity applies: Long.MAX_VALUE as a double.
UNLIMITED = float(2**63 - 1)
#: a sensor's running total differs from what was settled by more than float rounding
SETTLED = 1e-6
#: the line of a sensor no fleet shares, or that one already watches: no use crosses it
NO_LINE = math.inf


def throttle_time_ms(
    observed: float, bound: float, window_ms: int, max_throttle_ms: int | None = None
) -> int:
    """Kafka's QuotaUtils.throttleTime (bounded when a maximum is given) for a rate over its
    bound: the time that brings the window's rate back to the bound."""
    throttle_ms = java_round((observed - bound) / bound * window_ms)
    if max_throttle_ms is not None and throttle_ms > max_throttle_ms:
        throttle_ms = max_throttle_ms
    return saturate_int(throttle_ms)


class ClientSensors:
    """The sensors of one metric-tags entity; every client resolving to it shares them."""

    __slots__ = (
        "bucket",
        "dropped_logged_ms",
        "dropped_requests",
        "exported",
        "held_until_ms",
        "last_record_ms",
        "limit",
        "line",
        "rate",
        "remote",
        "shadow_logged_ms",
        "shadow_throttles",
        "tags",
        "throttle_time",
        "throttles",
        "watched",
        "weight",
    )

    def __init__(self, tags: MetricTags, limit: float, now_ms: int) -> None:
        self.tags = tags
        self.limit = limit
        #: byte-rate / request-time / mutation-rate / producer-id rate
        self.rate = Rate()
        self.throttle_time = Avg()
        self.bucket: TokenBucket | None = None
        self.last_record_ms = now_ms
        #: throttles decided but not applied because the quota type runs in shadow mode
        self.shadow_throttles = 0
        self.shadow_logged_ms: int | None = None
        #: responses that carried a throttle of this quota type (the largest decision), the
        #: client held for it: unlike throttle-time, never a shadow mode decision
        self.throttles = 0
        #: until when every connection charging these sensors is not read (a throttle applied
        #: to one of them holds the principal, not only that connection); 0 = not held
        self.held_until_ms = 0
        #: requests refused with no response to carry the refusal (acks=0), so dropped
        self.dropped_requests = 0
        self.dropped_logged_ms: int | None = None
        #: the rate's recorded() when last settled, and the use seen elsewhere since: what
        #: this process recorded since is the difference (see QuotaManager.settle)
        self.exported = 0.0
        self.remote = 0.0
        #: what one unit of use charged here stands for: 1 alone; in a fleet, 1 + the use
        #: expected on the other members meanwhile, until their own reports replace it
        #: (proxy/enforcement/fleet.py)
        self.weight = 1.0
        #: the use (rate, or tokens spent) past which a fleet member starts sharing the
        #: sensor with the others (QuotaManager.line_share); NO_LINE once it does
        self.line = NO_LINE
        self.watched = False


#: Kafka's metric name for each quota type's rate stat (group = QuotaType.group)
RATE_METRIC = {
    QuotaType.PRODUCE: "byte-rate",
    QuotaType.FETCH: "byte-rate",
    QuotaType.REQUEST: "request-time",
    QuotaType.CONTROLLER_MUTATION: "mutation-rate",
    QuotaType.PRODUCER_IDS: "rate",
    **{guard: "rate" for guard in GUARDS.values()},
    QuotaType.CONNECTION_CREATION_RATE: "rate",
}


class QuotaManager:
    """Sensor bookkeeping shared by every quota type: lookup, sharing, limit updates, expiry."""

    def __init__(
        self, quota_type: QuotaType, config: MetricConfig, limits: Mapping[QuotaEntity, float]
    ) -> None:
        self.quota_type = quota_type
        #: this quota type's index in QuotaType, for lists kept per quota type
        self.slot = list(QuotaType).index(quota_type)
        self.config = config
        self._quotas = EntityQuotas(limits)
        #: Kafka records nothing for a quota type no entity configures
        self.enabled = self._quotas.levels_enabled != 0
        #: metric tags -> sensors; the unit of sharing and of expiry
        self._sensors: dict[MetricTags, ClientSensors] = {}
        #: (user, client_id) -> sensors, so a request resolves with one dict lookup
        self._by_client: dict[tuple[str, str], ClientSensors] = {}
        #: a fleet's demarcation line, as a share of each sensor's limit: while every
        #: member's use of a sensor, weighted as if the others used as much, stays under its
        #: line, the fleet's stays under the limit and nobody needs to hear of it; None
        #: outside a fleet
        self.line_share: float | None = None
        #: the weight of a sensor no fleet watches: 1 + the other members, as if its use were
        #: spread evenly over them (see ClientSensors.weight)
        self.cold_weight = 1.0
        #: sensors whose use here crossed their line since the fleet last took them
        self.crossed: list[ClientSensors] = []

    def sensors_for(self, user: str, client_id: str, now_ms: int) -> ClientSensors:
        sensors = self._by_client.get((user, client_id))
        if sensors is None:
            tags = self._quotas.metric_tags(user, client_id)
            sensors = self._sensors.get(tags)
            if sensors is None:
                sensors = self._new_sensors(tags, now_ms)
                self._sensors[tags] = sensors
            self._by_client[(user, client_id)] = sensors
        return sensors

    def find(self, tags: MetricTags) -> ClientSensors | None:
        """The sensors of these metric tags, if any client uses them here."""
        return self._sensors.get(tags)

    def unseen(self, tags: MetricTags, now_ms: int) -> ClientSensors:
        """The sensors a client of these tags would get at its first use, not kept."""
        return self._new_sensors(tags, now_ms)

    def metric_tags(self, user: str, client_id: str) -> MetricTags:
        """The tags this client's use is charged under as the quotas now stand, without
        making its sensors."""
        return self._quotas.metric_tags(user, client_id)

    def _new_sensors(self, tags: MetricTags, now_ms: int) -> ClientSensors:
        sensors = ClientSensors(tags, self._limit(tags), now_ms)
        sensors.line = self.line_of(sensors.limit)
        sensors.weight = self.cold_weight
        return sensors

    def line_of(self, limit: float) -> float:
        share = self.line_share
        return NO_LINE if share is None or limit == UNLIMITED else limit * share

    def set_lines(self, share: float | None, cold_weight: float) -> None:
        """A fleet's line share and cold weight, from now on: every sensor not watched
        moves to them (members come and go rarely, so this walk over every sensor is rare
        too; a weight changed between two settles misjudges only the use in between)."""
        if share == self.line_share and cold_weight == self.cold_weight:
            return
        self.line_share, self.cold_weight = share, cold_weight
        for sensors in self._sensors.values():
            if not sensors.watched:
                sensors.line, sensors.weight = self.line_of(sensors.limit), cold_weight

    def _cross(self, sensors: ClientSensors) -> None:
        sensors.line = NO_LINE
        self.crossed.append(sensors)

    def take_crossed(self) -> list[ClientSensors]:
        crossed, self.crossed = self.crossed, []
        return crossed

    @staticmethod
    def watch(sensors: ClientSensors) -> None:
        """A fleet shares this sensor from now. What it charged here before its current
        window is left out of what is settled: that use was this member's alone, and the
        windows of the others no longer hold its time."""
        sensors.line, sensors.watched = NO_LINE, True
        rate = sensors.rate
        recorded = rate.recorded()
        before_window = max(sensors.exported, recorded - rate.total())
        sensors.exported = min(before_window, recorded - sensors.remote)

    def unwatch(self, sensors: ClientSensors) -> None:
        """Settled, and far under its line on every member: judged here alone again."""
        sensors.line, sensors.watched = self.line_of(sensors.limit), False
        sensors.weight = self.cold_weight

    def _limit(self, tags: MetricTags) -> float:
        limit = self._quotas.limit(tags)
        return UNLIMITED if limit is None else limit

    def update_limits(self, limits: Mapping[QuotaEntity, float]) -> None:
        """Apply new limits to live sensors, keeping their history (Kafka's updateQuota).

        When the set of configured levels changes, Kafka's metric tags change with it and
        clients move to fresh sensors; the cache is rebuilt so the same happens here.
        """
        self._quotas = EntityQuotas(limits)
        self.enabled = self._quotas.levels_enabled != 0
        self._by_client.clear()
        for tags, sensors in self._sensors.items():
            sensors.limit = self._limit(tags)
            if not sensors.watched:
                sensors.line = self.line_of(sensors.limit)

    def throttle_time_ms(self, sensors: ClientSensors, now_ms: int) -> int:
        """The throttle owed now, recording nothing: whether a client is already over quota."""
        raise NotImplementedError

    def record_remote(self, sensors: ClientSensors, value: float, now_ms: int) -> None:
        """Use seen elsewhere (another proxy of the fleet), recorded into the sensor without
        judging it and without being exported again. It is recorded on this process's clock,
        at `now_ms` (when it arrived), into the sample current then: clocks of two hosts do
        not compare, and use a sync interval old lands at most that late in the window."""
        raise NotImplementedError

    def sensors_of_tags(self, tags: MetricTags, now_ms: int) -> ClientSensors:
        """The sensors of these metric tags (another member's export names them), made when
        this process has none: every member resolves a client to the same tags."""
        sensors = self._sensors.get(tags)
        if sensors is None:
            sensors = self._sensors[tags] = self._new_sensors(tags, now_ms)
        return sensors

    @staticmethod
    def settle(sensors: ClientSensors) -> tuple[float, float] | None:
        """The use charged here since the last settle, and what its weight added for the
        other members' use (the weight changes only once a sensor is settled); None when it
        charged nothing here since (beyond float rounding), and then nothing is taken."""
        recorded = sensors.rate.recorded()
        charged = recorded - sensors.exported - sensors.remote
        if -SETTLED <= charged <= SETTLED:
            return None
        sensors.exported, sensors.remote = recorded, 0.0
        local = charged / sensors.weight
        return local, charged - local

    def record_throttle(self, sensors: ClientSensors, throttle_time_ms: int, now_ms: int) -> None:
        """The `throttle-time` average Kafka keeps whenever it throttles a client."""
        sensors.throttle_time.record(DEFAULT_METRIC_CONFIG, throttle_time_ms, now_ms)

    def expire(self, now_ms: int) -> int:
        """Drop sensors idle for over an hour, as Kafka's ExpireSensorTask does; returns count.

        A client coming back afterwards starts with an empty history (and a full bucket).
        """
        expired = [
            tags
            for tags, sensors in self._sensors.items()
            if now_ms - sensors.last_record_ms > SENSOR_EXPIRATION_MS
        ]
        if expired:
            for tags in expired:
                del self._sensors[tags]
            self._by_client = {
                client: sensors
                for client, sensors in self._by_client.items()
                if sensors.tags not in expired
            }
        return len(expired)

    def sensors(self) -> Iterator[ClientSensors]:
        return iter(list(self._sensors.values()))

    def metric_limit(self, sensors: ClientSensors) -> float:
        """The quota in the unit of the rate metric beside it, so that a dashboard can set
        one against the other (Kafka reports no quota as a metric)."""
        return sensors.limit

    def metric_values(self, sensors: ClientSensors, now_ms: int) -> list[tuple[str, float]]:
        """Kafka's metrics for one sensor, by Kafka's metric names, as a JMX read sees them."""
        return [
            (RATE_METRIC[self.quota_type], sensors.rate.measure(self.rate_config, now_ms)),
            ("throttle-time", sensors.throttle_time.measure(DEFAULT_METRIC_CONFIG, now_ms)),
        ]

    @property
    def rate_config(self) -> MetricConfig:
        return self.config


class ClientQuotaManager(QuotaManager):
    """Produce and Fetch byte rates, and (with max_throttle_ms) request_percentage."""

    def __init__(
        self,
        quota_type: QuotaType,
        config: MetricConfig,
        limits: Mapping[QuotaEntity, float],
        max_throttle_ms: int | None = None,
    ) -> None:
        super().__init__(quota_type, config, limits)
        #: Kafka bounds request-time throttles by one quota window, byte rates not at all
        self.max_throttle_ms = max_throttle_ms

    def record_and_get_throttle_time_ms(
        self, sensors: ClientSensors, value: float, now_ms: int
    ) -> int:
        """Record, then check (the value that violates stays recorded, as in Kafka)."""
        sensors.last_record_ms = now_ms
        observed, window_ms = sensors.rate.record_and_measure(
            self.config, value * sensors.weight, now_ms
        )
        if observed > sensors.line:
            self._cross(sensors)
        if observed <= sensors.limit:
            return 0
        return self._throttle_time_ms(sensors, observed, window_ms)

    def throttle_time_ms(self, sensors: ClientSensors, now_ms: int) -> int:
        """The throttle owed now, recording nothing: whether a client is already over quota."""
        observed, window_ms = sensors.rate.measure_with_window(self.config, now_ms)
        return self._throttle_time_ms(sensors, observed, window_ms)

    def throttle_if_recorded(self, sensors: ClientSensors, value: float, now_ms: int) -> int:
        """What record_and_get_throttle_time_ms would answer for `value` now, recording
        nothing: a copy of the rate takes it (`explain`'s prediction, off the request path)."""
        rate = copy.deepcopy(sensors.rate)
        observed, window_ms = rate.record_and_measure(self.config, value * sensors.weight, now_ms)
        return self._throttle_time_ms(sensors, observed, window_ms)

    def _throttle_time_ms(self, sensors: ClientSensors, observed: float, window_ms: int) -> int:
        if observed <= sensors.limit:
            return 0
        return throttle_time_ms(observed, sensors.limit, window_ms, self.max_throttle_ms)

    def record_remote(self, sensors: ClientSensors, value: float, now_ms: int) -> None:
        sensors.last_record_ms = now_ms
        sensors.remote += value
        sensors.rate.record(self.config, value, now_ms)

    def max_value_in_quota_window(self, sensors: ClientSensors) -> float:
        """The most a fetch may return: Kafka caps fetch.max.bytes with this."""
        return sensors.limit * (self.config.samples - 1) * (self.config.window_ms / 1000)


class Admission(NamedTuple):
    """A strict quota's verdict on one request: whether it may go, and the throttle."""

    admitted: bool
    throttle_ms: int


ADMITTED = Admission(True, 0)


class TokenBucketQuotaManager(QuotaManager):
    """controller_mutation_rate (KIP-599) and producer_ids_rate (KIP-936): a token bucket
    with `tokens` as the quota metric, plus a plain rate that is reported but never checked.
    """

    def __init__(
        self,
        quota_type: QuotaType,
        config: MetricConfig,
        limits: Mapping[QuotaEntity, float],
        unit_ms: float,
    ) -> None:
        super().__init__(quota_type, config, limits)
        #: the quota is per this many ms: a second for mutations, a window for producer ids
        self.unit_ms = unit_ms

    def _new_sensors(self, tags: MetricTags, now_ms: int) -> ClientSensors:
        sensors = super()._new_sensors(tags, now_ms)
        sensors.bucket = TokenBucket(self.burst(sensors.limit), now_ms)
        return sensors

    def burst(self, limit: float) -> float:
        return burst(self.config, limit, self.unit_ms)

    def line_of(self, limit: float) -> float:
        """In tokens spent: a share of the burst."""
        share = self.line_share
        return NO_LINE if share is None or limit == UNLIMITED else self.burst(limit) * share

    def tokens(self, sensors: ClientSensors, now_ms: int) -> float:
        assert sensors.bucket is not None
        return sensors.bucket.refill(sensors.limit, self.burst(sensors.limit), self.unit_ms, now_ms)

    def _throttle_ms(self, sensors: ClientSensors, tokens: float) -> int:
        return saturate_int(java_round(-tokens / sensors.limit * self.unit_ms))

    def throttle_time_ms(self, sensors: ClientSensors, now_ms: int) -> int:
        """How long until the bucket is back at zero, as a permissive record reports it."""
        tokens = self.tokens(sensors, now_ms)
        return self._throttle_ms(sensors, tokens) if tokens < 0 else 0

    def _record(self, sensors: ClientSensors, value: float, now_ms: int) -> float:
        assert sensors.bucket is not None
        sensors.last_record_ms = now_ms
        sensors.rate.record(self.rate_config, value, now_ms)
        full = self.burst(sensors.limit)
        sensors.bucket.record(sensors.limit, full, self.unit_ms, value, now_ms)
        tokens = sensors.bucket.tokens
        if full - tokens > sensors.line:  # a bucket's line is in tokens spent
            self._cross(sensors)
        return tokens

    def record_remote(self, sensors: ClientSensors, value: float, now_ms: int) -> None:
        sensors.remote += value
        self._record(sensors, value, now_ms)

    @property
    def rate_config(self) -> MetricConfig:
        """The reported rate is not the quota metric here: Kafka's Metrics defaults."""
        return DEFAULT_METRIC_CONFIG

    def metric_limit(self, sensors: ClientSensors) -> float:
        """Per second, as the reported rate is: producer_ids_rate counts ids per window."""
        return sensors.limit * 1000 / self.unit_ms

    def metric_values(self, sensors: ClientSensors, now_ms: int) -> list[tuple[str, float]]:
        return [*super().metric_values(sensors, now_ms), ("tokens", self.tokens(sensors, now_ms))]

    def record_strict(self, sensors: ClientSensors, value: float, now_ms: int) -> Admission:
        """Check, then record: refused (nothing recorded) only while the bucket is already
        negative, so one request may take it from full to far below zero. A refusal's
        throttle may round to 0 ms (tokens just below zero), and it is still a refusal.
        """
        tokens = self.tokens(sensors, now_ms)
        if tokens < 0:
            return Admission(False, self._throttle_ms(sensors, tokens))
        self._record(sensors, value * sensors.weight, now_ms)
        return ADMITTED

    def refund(self, sensors: ClientSensors, value: float, now_ms: int) -> None:
        """Give back mutations the cluster did not make (Kafka charges a topic only once
        it passes validation; the proxy charges before the broker has looked)."""
        self._record(sensors, -value * sensors.weight, now_ms)

    def record_permissive(self, sensors: ClientSensors, value: float, now_ms: int) -> int:
        """Record, then check: never refuses, throttles while the bucket is negative."""
        tokens = self._record(sensors, value * sensors.weight, now_ms)
        return self._throttle_ms(sensors, tokens) if tokens < 0 else 0


class RequestGuardManager(TokenBucketQuotaManager):
    """A request-rate guard ([guards.requests], docs/guards.md): KIP-599's bucket over one
    API's requests, permissive only, its throttle capped so that a connection it mutes
    still carries its member's heartbeats within the session timeout."""

    def __init__(
        self,
        quota_type: QuotaType,
        config: MetricConfig,
        limits: Mapping[QuotaEntity, float],
        max_throttle_ms: int,
    ) -> None:
        super().__init__(quota_type, config, limits, unit_ms=1000.0)
        self.max_throttle_ms = max_throttle_ms

    def _throttle_ms(self, sensors: ClientSensors, tokens: float) -> int:
        return min(super()._throttle_ms(sensors, tokens), self.max_throttle_ms)
