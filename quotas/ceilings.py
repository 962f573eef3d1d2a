"""Ceilings: the most one broker takes of produce bytes, fetch bytes or requests per second
from every principal together, on top of each principal's own quotas (docs/ceilings.md).

A sum of quotas is not a ceiling: principals each within their quota can still send one
broker, the leader of most partitions, more than its disks or network take. A ceiling sheds
that load by class, set per user and client-id entity with Kafka's precedence:

- exempt principals (operators, MirrorMaker, the proxy's own) are never held by a ceiling;
  what they send counts all the same, so the others make room for it;
- a guaranteed principal keeps its floor, and shares what is above it as best-effort;
- best-effort principals share what is left in proportion to their weights: their own quota
  of the ceiling's kind, at most the ceiling itself; the ceiling where they have none (so
  principals without quotas share equally).

The share is max-min fair (water-filling): a principal that sends less than its share keeps
what it sends, and the level of the others rises by what it leaves. What a principal would
send is not seen, only what it was let send: one whose rate reaches SATURATED of its
allowance, or that waits out a throttle, counts as pressing on it, as one that wants more.
Each principal is then held to its allowance, floor + weight x level, by a token bucket of
its own per broker (KIP-599's arithmetic, answered as a quota is): its traffic to other
brokers is untouched.

Kafka's windowed Rate was tried first and rejected: it holds a principal to its quota on
average over eleven seconds, so a principal below its quota may send ten times it in one
second, and greedy principals in step swung a simulated broker between 40 % and 130 % of
its ceiling over 10 s windows. The bucket holds the same simulation within 0.1 %
(tests/unit/quotas/test_ceilings.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Final, NamedTuple

from quotas.entities import (
    CLUSTER_CEILINGS,
    DEFAULT,
    EntityQuotas,
    MetricTags,
    QuotaEntity,
    QuotaType,
)
from quotas.managers import SENSOR_EXPIRATION_MS, UNLIMITED, ClientSensors, RequestGuardManager
from quotas.stats import MetricConfig, Rate

#: the scope of a ceiling on every broker together
CLUSTER: Final = "cluster"
#: a principal whose rate reaches this share of its allowance presses on it
SATURATED: Final = 0.9
#: each allowance is a token bucket of one second (KIP-599's arithmetic): a principal is
#: held to its allowance over any second, not on average over Kafka's eleven, so principals
#: bursting together cannot take a broker past its ceiling for seconds at a time
BUCKET: Final = MetricConfig(samples=1, window_ms=1000)
#: the longest throttle: long enough that a principal held at the minimum cannot send one
#: large request a second past it, short enough that a debt run up under a low level does
#: not keep it waiting long after the level rose (the throttle is judged again, as it
#: stands, when the response goes out)
MAX_THROTTLE_MS: Final = 10_000
#: what a scope's use and a principal's demand are measured over: seconds, not minutes
RATES: Final = MetricConfig(samples=5, window_ms=1000)
#: how often a scope's level is solved again
REBALANCE_MS: Final = 250
#: how long nobody must have pressed before a scope lets every allowance go: a principal
#: muted for the longest throttle sends nothing its rate would show for that long
CALM_MS: Final = MAX_THROTTLE_MS + RATES.samples * RATES.window_ms
#: the share of the ceiling under which a scope nobody presses lets every allowance go (the
#: level holds between it and the ceiling: principals held at their allowance look content
#: for a moment as a throttle ends)
RELEASE: Final = 0.9


class Standing(NamedTuple):
    """A principal's place under the ceilings of one kind."""

    #: the tags its share of a broker is kept under: one share per quota entity, as Kafka
    #: shares one sensor among the clients of an entity
    tags: MetricTags
    exempt: bool
    #: what it keeps under any ceiling (0: best-effort)
    floor: float
    #: its part of what is left; None: the ceiling's own (no quota of this kind)
    weight: float | None


class Load(NamedTuple):
    """What one member's principals make of one scope: what a fleet's members publish."""

    #: every principal's rate into the scope, exempt ones' too
    used: float
    #: what the level does not move: exempt rates, pressed floors, rates under allowance
    fixed: float
    #: the weights of the principals pressing on their allowance
    weight: float

    def __add__(self, other: object) -> Load:
        assert isinstance(other, Load)
        return Load(self.used + other.used, self.fixed + other.fixed, self.weight + other.weight)


NO_LOAD: Final = Load(0.0, 0.0, 0.0)


class Ceiling:
    """One broker's ceiling of one kind, and the principals that send into it here."""

    __slots__ = ("due_ms", "level", "limit", "others", "pressed_ms", "shares", "total")

    def __init__(self, limit: float) -> None:
        self.limit = limit
        #: what every principal sent into the scope through this process
        self.total = Rate()
        #: by Standing.tags: the principal's sensors here (limit: its allowance) and standing
        self.shares: dict[MetricTags, tuple[ClientSensors, Standing]] = {}
        #: what each weight unit is allowed; inf while nobody presses on the ceiling
        self.level = math.inf
        #: when the level is solved next (0: at the next use)
        self.due_ms = 0
        #: when a principal last pressed on its share here
        self.pressed_ms = 0
        #: the other members' loads, summed (a fleet's; NO_LOAD alone)
        self.others = NO_LOAD


class CeilingManager(RequestGuardManager):
    """One kind of ceiling (produce bytes, fetch bytes, requests) on every broker."""

    def __init__(
        self,
        quota_type: QuotaType,
        limits: Mapping[QuotaType, Mapping[QuotaEntity, float]],
        floor_type: QuotaType,
        weight_type: QuotaType,
        minimum: float,
    ) -> None:
        super().__init__(quota_type, BUCKET, {}, max_throttle_ms=MAX_THROTTLE_MS)
        self._floor_type = floor_type
        self._weight_type = weight_type
        #: the least a principal is allowed where exempt use and floors leave nothing
        self.minimum = minimum
        #: by scope: a broker's node id; a log directory's (quotas/disk_guard.py)
        self._scopes: dict[str, Ceiling] = {}
        self.update_classes(limits)

    @property
    def rate_config(self) -> MetricConfig:
        return RATES

    def update_classes(self, limits: Mapping[QuotaType, Mapping[QuotaEntity, float]]) -> None:
        """New ceilings, classes or quotas, on live sensors: each scope keeps its history,
        and each principal's standing is found again at its next request."""
        ceilings = limits.get(self.quota_type, {})
        self._ceilings = {e.broker: v for e, v in ceilings.items() if e.broker is not None}
        cluster = CLUSTER_CEILINGS.get(self.quota_type)
        #: every broker together's ceiling, set on the default broker entity
        self.cluster = (
            None if cluster is None else limits.get(cluster, {}).get(QuotaEntity(broker=DEFAULT))
        )
        self.enabled = bool(self._ceilings) or self.cluster is not None
        exempt = limits.get(QuotaType.CEILING_EXEMPT, {})
        floors = limits.get(self._floor_type, {})
        weights = limits.get(self._weight_type, {})
        clients = {e: 1.0 for per_type in (exempt, floors, weights) for e in per_type}
        self._keys = EntityQuotas({e: v for e, v in clients.items() if e.topic is None})
        self._exempt, self._floors = EntityQuotas(exempt), EntityQuotas(floors)
        self._weights = EntityQuotas({e: v for e, v in weights.items() if e.topic is None})
        self._standings: dict[tuple[str, str], Standing] = {}
        for scope, ceiling in list(self._scopes.items()):
            limit = self.ceiling_of(scope)
            if limit is None:
                del self._scopes[scope]
                continue
            ceiling.limit = limit
            for tags, (sensors, _) in ceiling.shares.items():
                ceiling.shares[tags] = (sensors, self._standing_of(tags))
            ceiling.due_ms = 0

    def ceiling_of(self, scope: str) -> float | None:
        """A broker's ceiling (its node id is the scope): its own, else the default
        broker's; the cluster's (CLUSTER); None: not limited."""
        if scope == CLUSTER:
            return self.cluster
        limit = self._ceilings.get(scope)
        return self._ceilings.get(DEFAULT) if limit is None else limit

    def standing(self, user: str, client_id: str) -> Standing:
        """A client's standing, resolved once per (user, client-id) between two changes."""
        standing = self._standings.get((user, client_id))
        if standing is None:
            keys = self._keys
            # with no entity at all, Kafka would key every user of a client-id together:
            # here each (user, client-id) is a principal of its own
            tags = keys.metric_tags(user, client_id) if keys.levels_enabled else (user, client_id)
            standing = self._standings[(user, client_id)] = self._standing_of(tags)
        return standing

    def _standing_of(self, tags: MetricTags) -> Standing:
        weight = self._weights.limit(tags)
        return Standing(
            tags, self._exempt.limit(tags) is not None, self._floors.limit(tags) or 0.0, weight
        )

    def scope(self, scope: str) -> Ceiling | None:
        """A scope's ceiling (a broker's, by its node id), made at its first use; None when
        no ceiling applies to it."""
        ceiling = self._scopes.get(scope)
        if ceiling is None:
            limit = self.ceiling_of(scope)
            if limit is None:
                return None
            ceiling = self._scopes[scope] = Ceiling(limit)
        return ceiling

    def charge(
        self, ceiling: Ceiling, standing: Standing, value: float, now_ms: int
    ) -> tuple[ClientSensors, int]:
        """Record a principal's use of a broker, then its throttle (0: none), in Kafka's
        record-then-check order. An exempt principal's use counts and is never held."""
        ceiling.total.record(RATES, value, now_ms)
        share = ceiling.shares.get(standing.tags)
        if share is None:
            sensors = self._new_sensors(standing.tags, now_ms)
            if not standing.exempt and not math.isinf(ceiling.level):
                # a newcomer to a broker under pressure counts as pressing until its rate
                # says otherwise, and the level makes room for it at once
                sensors.held_until_ms = now_ms + RATES.window_ms
                ceiling.due_ms = now_ms
            ceiling.shares[standing.tags] = (sensors, standing)
        else:
            sensors = share[0]
        if now_ms >= ceiling.due_ms:
            self.rebalance(ceiling, now_ms)
        throttle = self.record_permissive(sensors, value, now_ms)
        if throttle:
            # a principal waiting out a throttle sends nothing meanwhile, and must not look
            # content with less than its allowance
            sensors.held_until_ms = max(sensors.held_until_ms, now_ms + throttle)
        return sensors, throttle

    def load(self, ceiling: Ceiling, now_ms: int) -> Load:
        """What this process's principals make of the scope now."""
        used = ceiling.total.measure(RATES, now_ms)
        over = used + ceiling.others.used > ceiling.limit
        fixed = weight = 0.0
        for sensors, standing in ceiling.shares.values():
            rate = sensors.rate.measure(RATES, now_ms)
            if standing.exempt:
                fixed += rate
                continue
            allowance = sensors.limit
            if allowance == UNLIMITED:
                pressed = over
            else:
                pressed = now_ms < sensors.held_until_ms or rate >= SATURATED * allowance
            if pressed:
                fixed += standing.floor
                weight += self._weight(ceiling, standing)
                ceiling.pressed_ms = now_ms
            else:
                fixed += rate
        return Load(used, fixed, weight)

    def rebalance(self, ceiling: Ceiling, now_ms: int) -> None:
        """Solve the level again, from this process's load and the others', and move every
        principal's allowance to it."""
        ceiling.due_ms = now_ms + REBALANCE_MS
        load = self.load(ceiling, now_ms) + ceiling.others
        limit = ceiling.limit
        if load.weight > 0.0:
            ceiling.level = max((limit - load.fixed) / load.weight, 0.0)
        elif load.used <= limit * RELEASE and now_ms - ceiling.pressed_ms > CALM_MS:
            ceiling.level = math.inf  # nobody presses, and the broker is under its ceiling
        # else the level holds: the broker is near its ceiling, or a principal that pressed
        # lately may be waiting out a throttle (muted, it sends nothing to be measured)
        for sensors, standing in ceiling.shares.values():
            if standing.exempt:
                continue
            sensors.limit = allowance = self._allowance(ceiling, standing)
            # a debt run up under a lower level is owed at most one longest throttle of
            # the new allowance: more would only hold the principal longer than any
            # throttle it is told of, again and again
            bucket = sensors.bucket
            assert bucket is not None
            bucket.tokens = max(bucket.tokens, -allowance * MAX_THROTTLE_MS / 1000)

    def _allowance(self, ceiling: Ceiling, standing: Standing) -> float:
        if math.isinf(ceiling.level):
            return UNLIMITED
        allowance = standing.floor + self._weight(ceiling, standing) * ceiling.level
        return max(allowance, self.minimum)

    @staticmethod
    def _weight(ceiling: Ceiling, standing: Standing) -> float:
        weight = standing.weight
        return ceiling.limit if weight is None else min(weight, ceiling.limit)

    def scopes(self) -> Iterator[tuple[str, Ceiling]]:
        return iter(list(self._scopes.items()))

    def drop(self, scope: str) -> None:
        """A scope no ceiling applies to any more."""
        self._scopes.pop(scope, None)

    def expire(self, now_ms: int) -> int:
        """A principal's share idle for the sensors' hour is dropped, as Kafka drops its
        sensors; a scope with none left goes with it."""
        expired = 0
        for scope, ceiling in list(self._scopes.items()):
            idle = [
                tags
                for tags, (sensors, _) in ceiling.shares.items()
                if now_ms - sensors.last_record_ms > SENSOR_EXPIRATION_MS
            ]
            for tags in idle:
                del ceiling.shares[tags]
            expired += len(idle)
            if not ceiling.shares:
                del self._scopes[scope]
        return expired
