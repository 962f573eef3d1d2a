"""Per-request quota decisions at the proxy, in the order a Kafka broker makes them.

Kafka's KafkaApis records a Produce request's size and a Fetch response's size into the
byte-rate sensors and the request's thread time into the request sensor, then throttles by
the larger of the resulting times. The proxy cannot see the broker's threads, so request
time here is the time from reading a request to answering it, which includes the broker.

Quota types in shadow mode go through the same decisions; a throttle decided for one is
counted, logged and kept in the throttle-time metric, but not applied.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from protocol.apis import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    FETCH,
    PRODUCE,
    REQUEST_QUOTA_EXEMPT,
)
from quotas.engine import QuotaEngine
from quotas.entities import QuotaType
from quotas.managers import UNLIMITED, ClientQuotaManager, ClientSensors, QuotaManager
from quotas.settings import QuotaConfig

log = logging.getLogger(__name__)

#: ClientRequestQuotaManager.NANOS_TO_PERCENTAGE_PER_SECOND
_NANOS_TO_PERCENTAGE = 100.0 / 1_000_000_000
#: the quota type, besides request time, that each API's requests charge
_BANDWIDTH = {
    PRODUCE: QuotaType.PRODUCE,
    FETCH: QuotaType.FETCH,
    CREATE_TOPICS: QuotaType.CONTROLLER_MUTATION,
    CREATE_PARTITIONS: QuotaType.CONTROLLER_MUTATION,
    DELETE_TOPICS: QuotaType.CONTROLLER_MUTATION,
}
#: a shadow decision, or a dropped request, is logged at most this often per entity
_SHADOW_LOG_INTERVAL_MS = 10_000


class Decision(NamedTuple):
    """One quota type's verdict on one request: the sensors charged and the throttle asked."""

    manager: QuotaManager
    sensors: ClientSensors
    throttle_ms: int


class Mutations(NamedTuple):
    """A mutating request's verdict: the topics refused, what each topic was charged (to
    refund exactly that if the cluster does not make it), and the throttle to settle."""

    refused: list[int]
    charged: list[int]
    decision: Decision | None


class ProducerIds(NamedTuple):
    """A Produce request's verdict on its producer ids: refused whole or not, the throttle
    to settle (a refusal's may round to 0 ms), and how many unseen ids it admitted."""

    refused: bool
    decision: Decision | None
    new_ids: int = 0


_ADMITTED_IDS = ProducerIds(False, None)


class Principal:
    """One client's sensors, per quota type, as its connection keeps them between requests.

    Resolving a (user, client-id) to its sensors takes a lookup per quota type; a connection
    almost always sends every request as one client, so it resolves each quota type once
    and keeps the result until the enforcer's generation moves (a reload or an expiry).
    """

    __slots__ = ("client_id", "generation", "producer_ids_seen", "sensors", "user")

    def __init__(self, user: str, client_id: str, generation: int) -> None:
        self.user = user
        self.client_id = client_id
        self.generation = generation
        #: by QuotaManager.slot; None until the quota type first charges this client
        self.sensors: list[ClientSensors | None] = [None] * len(QuotaType)
        #: the producer ids of this connection's last admitted Produce and the user's time
        #: slot they are in: a producer sends its one id again and again, and while that slot
        #: is current the filter need not be asked (see admit_producer_ids)
        self.producer_ids_seen: tuple[list[int], object] | None = None


def _charge(
    manager: ClientQuotaManager, principal: Principal, value: float, now: int
) -> Decision | None:
    """Record `value` on the principal's sensor of this quota type, then check (Kafka's
    order); None when it does not throttle, and when no entity configures the quota type,
    as Kafka then records nothing. Every charged request comes here, and nearly all of
    them are not throttled: they build no Decision."""
    if not manager.enabled:
        return None
    sensors = principal.sensors[manager.slot] or _resolve(manager, principal, now)
    throttle = manager.record_and_get_throttle_time_ms(sensors, value, now)
    return Decision(manager, sensors, throttle) if throttle else None


def _limited(manager: QuotaManager, principal: Principal, now: int) -> ClientSensors | None:
    """The principal's sensors of a quota type checked before the request goes (strict
    admission); None when nothing limits it, so nothing is read or charged."""
    if not manager.enabled:
        return None
    sensors = _sensors(manager, principal, now)
    return None if sensors.limit == UNLIMITED else sensors


def _sensors(manager: QuotaManager, principal: Principal, now: int) -> ClientSensors:
    return principal.sensors[manager.slot] or _resolve(manager, principal, now)


def _resolve(manager: QuotaManager, principal: Principal, now: int) -> ClientSensors:
    """A kept Principal's first use of a quota type's sensors: Kafka's entity lookup."""
    sensors = principal.sensors[manager.slot] = manager.sensors_for(
        principal.user, principal.client_id, now
    )
    return sensors


class Enforcer:
    """Owns the live QuotaEngine (replaced on reload) and turns traffic into throttle times."""

    def __init__(
        self,
        engine: QuotaEngine,
        shadow: frozenset[QuotaType] = frozenset(),
        hold_principal: bool = True,
    ) -> None:
        self.engine = engine
        #: quota types whose throttles are decided and reported but not applied
        self.shadow = shadow
        #: a throttle stops every connection that charges the throttled sensors, not only the
        #: one whose request crossed the quota (False: Kafka's per-connection behaviour)
        self.hold_principal = hold_principal
        #: the latest end of any hold: while it has passed, which is nearly always, no request
        #: need look at its sensors' holds (held_ms runs for every request)
        self._holds_end_ms = 0
        #: moves whenever a client's sensors may have changed: Principals of an older one
        #: are resolved again
        self.generation = 0

    def principal(self, user: str, client_id: str) -> Principal:
        """A client's sensors, resolved as it first charges each quota type; a connection
        keeps it while its generation is current (see Session.principal)."""
        return Principal(user, client_id, self.generation)

    def apply(
        self, quotas: QuotaConfig, shadow: frozenset[QuotaType], hold_principal: bool
    ) -> bool:
        """Take a reloaded config; False when its windows changed and every sensor restarts.

        Kafka reads its quota window settings once at start-up; the proxy starts a fresh
        engine instead (sensor history cannot be re-sampled into other windows).
        """
        self.shadow = shadow
        self.hold_principal = hold_principal
        self.generation += 1
        if self.engine.update(quotas):
            return True
        self.engine = QuotaEngine(quotas)
        return False

    def expire(self, now: int) -> int:
        """Drop sensors idle for an hour, as Kafka's ExpireSensorTask; returns how many."""
        expired = self.engine.expire(now)
        if expired:
            self.generation += 1
        return expired

    def on_produce(self, principal: Principal, request_bytes: int, now: int) -> Decision | None:
        """Charge a Produce request's bytes when it is read, as Kafka charges them when it
        handles the request: a client pipelining requests is judged on each one in turn, and
        its connection stops being read at the first request over quota. The decision is
        settled with the request time once the response comes (see settle_response)."""
        decision = _charge(self.engine.produce, principal, request_bytes, now)
        if decision is not None and self.holds(decision):
            self._hold(decision, now)
        return decision

    def produce_throttle(self, decision: Decision, now: int) -> Decision:
        """A Produce's throttle as its sensor stands when the response goes out.

        Kafka records a Produce's bytes and judges them in the response callback, after the
        append, and mutes from when the response is sent; the proxy charges them when it reads
        the request, to judge pipelined requests in turn. Serving the throttle decided then
        from the response on would add the broker's round trip to every throttle (the rate's
        window grows by that time, and its excess shrinks by as much).
        """
        manager = self.engine.produce
        return decision._replace(throttle_ms=manager.throttle_time_ms(decision.sensors, now))

    def holds(self, decision: Decision) -> bool:
        """Whether the connection must stop being read until this request's throttle."""
        return decision.throttle_ms > 0 and decision.manager.quota_type not in self.shadow

    def settle_without_response(self, decision: Decision, now: int) -> int:
        """A request no broker response will settle (a Produce with acks=0, for which Kafka
        skips the request quota; a request the proxy answers itself): this decision alone."""
        return self._settle(now, decision) if decision.throttle_ms else 0

    def mutation_sensors(self, principal: Principal, now: int) -> ClientSensors | None:
        """The sensors partition mutations are charged to; None for a principal whose
        mutations are not limited, whose requests then go through untouched."""
        return _limited(self.engine.controller_mutation, principal, now)

    def producer_id_sensors(self, principal: Principal, now: int) -> ClientSensors | None:
        """The sensors a user's new producer ids are charged to; None when not limited."""
        return _limited(self.engine.producer_ids, principal, now)

    def admit_producer_ids(
        self, principal: Principal, sensors: ClientSensors, producer_ids: list[int], now: int
    ) -> ProducerIds:
        """KIP-936: refuse a Produce whose unseen producer id finds the bucket below zero; in
        shadow mode admit it, charged, and report the throttle."""
        manager = self.engine.producer_ids
        seen = principal.producer_ids_seen
        if seen is not None and seen[0] == producer_ids:
            slot = manager.current_slot(sensors, now)
            if slot is not None and slot is seen[1]:
                return _ADMITTED_IDS  # all in the user's current time slot
        shadow = QuotaType.PRODUCER_IDS in self.shadow
        admission = manager.admit(sensors, producer_ids, now, enforce=not shadow)
        throttle = admission.throttle_ms
        if admission.admitted:
            principal.producer_ids_seen = (producer_ids, manager.current_slot(sensors, now))
        decision = Decision(manager, sensors, throttle) if throttle else None
        return ProducerIds(not admission.admitted, decision, admission.new_ids)

    def dropped(self, sensors: ClientSensors, now: int) -> None:
        """Count a refused request that had no response to carry the refusal (acks=0), and
        log it at most every ten seconds per user."""
        sensors.dropped_requests += 1
        last = sensors.dropped_logged_ms
        if last is None or now - last >= _SHADOW_LOG_INTERVAL_MS:
            sensors.dropped_logged_ms = now
            log.warning(
                "dropped an acks=0 Produce of user=%s: an unseen producer id over its "
                "producer_ids_rate (%d dropped so far)",
                sensors.tags[0],
                sensors.dropped_requests,
            )

    def admit_mutations(
        self, sensors: ClientSensors, counts: Sequence[int], strict: bool, now: int
    ) -> Mutations:
        """Charge each topic's partition mutations in request order, as KIP-599 does.

        A topic that mutates nothing is neither charged nor refused. Strict (clients that
        understand error 89): a topic is refused, and charged nothing, while the bucket is
        below zero; the request's throttle is the last refusal's. Permissive (older clients):
        every topic is charged and the throttle is the last one that left the bucket below
        zero, applied by muting. In shadow mode nothing is refused: a topic strict mode
        would refuse goes to the cluster, so it is charged as the cluster will mutate it,
        and the throttle is reported as shadow modes report theirs.
        """
        manager = self.engine.controller_mutation
        shadow = QuotaType.CONTROLLER_MUTATION in self.shadow
        refused: list[int] = []
        charged = [0] * len(counts)
        throttle = 0
        for index, count in enumerate(counts):
            if not count:
                continue  # Kafka fails such a topic (unknown, nothing added) before charging
            if strict:
                admission = manager.record_strict(sensors, count, now)
                if not admission.admitted:
                    throttle = admission.throttle_ms
                    if not shadow:
                        refused.append(index)
                        continue
                    manager.record_permissive(sensors, count, now)
            else:
                throttle = manager.record_permissive(sensors, count, now) or throttle
            charged[index] = count
        decision = Decision(manager, sensors, throttle) if throttle else None
        return Mutations(refused, charged, decision)

    def refund_mutations(self, sensors: ClientSensors, count: int, now: int) -> None:
        """Give back a topic's mutations that the cluster did not make."""
        self.engine.controller_mutation.refund(sensors, count, now)

    def mutation_throttle(self, sensors: ClientSensors, now: int) -> Decision | None:
        """A permissive throttle as the bucket stands now: what was charged less what was
        refunded, less the time since, which the client has already waited for its answer."""
        manager = self.engine.controller_mutation
        throttle = manager.throttle_time_ms(sensors, now)
        return Decision(manager, sensors, throttle) if throttle else None

    def before_fetch(self, principal: Principal, now: int) -> tuple[int, int | None]:
        """(throttle owed already, most bytes the fetch may return) before a Fetch goes out.

        A principal already over its consumer quota is answered at once with an empty Fetch
        and the throttle, as Kafka returns an empty fetch when it throttles; otherwise Kafka
        caps the fetch to what the quota allows in one quota window. No cap (None) for a
        principal without a consumer quota.
        """
        fetch = self.engine.fetch
        if not fetch.enabled or QuotaType.FETCH in self.shadow:
            return 0, None  # shadowed: decided once, when the response is recorded
        sensors = _sensors(fetch, principal, now)
        if sensors.limit == UNLIMITED:
            return 0, None
        throttle = fetch.throttle_time_ms(sensors, now)
        if throttle:
            return self._settle(now, Decision(fetch, sensors, throttle)), None
        return 0, int(fetch.max_value_in_quota_window(sensors))

    def on_fetch_response(
        self, principal: Principal, response_bytes: int, now: int
    ) -> Decision | None:
        """Charge a Fetch response's bytes, as Kafka does once it has read the log."""
        return _charge(self.engine.fetch, principal, response_bytes, now)

    def settle_response(
        self,
        principal: Principal,
        api_key: int,
        bandwidth: Decision | None,
        elapsed_ns: int,
        now: int,
    ) -> int:
        """The throttle for one answered request (0 = none), settled as KafkaApis does: the
        bandwidth decision its handler took (a Produce's when read, a Fetch's now) and the
        request time, throttled by the larger."""
        request_time = None
        if api_key not in REQUEST_QUOTA_EXEMPT:
            thread_time = elapsed_ns * _NANOS_TO_PERCENTAGE
            request_time = _charge(self.engine.request, principal, thread_time, now)
        if bandwidth is not None and bandwidth.throttle_ms:
            if request_time is not None:
                return self._settle(now, request_time, bandwidth)
            return self._settle(now, bandwidth)
        if request_time is not None:
            return self._settle(now, request_time)
        return 0

    def _settle(self, now: int, *decisions: Decision) -> int:
        """Kafka throttles by the largest decision and records it under its quota type; the
        first wins a tie, and callers pass request time first, as KafkaApis breaks ties.

        Returns the throttle to apply: the largest of the enforced quota types. When the
        largest decision belongs to a shadowed type, that decision is what shadow mode
        counts and logs, one per request, as enforcing it would have applied it.
        """
        manager, sensors, throttle = max(decisions, key=lambda decision: decision.throttle_ms)
        manager.record_throttle(sensors, throttle, now)
        if manager.quota_type not in self.shadow:
            if throttle:
                self._hold(Decision(manager, sensors, throttle), now)
            return throttle
        self._shadowed(manager.quota_type, sensors, throttle, now)
        enforced = [d for d in decisions if d.manager.quota_type not in self.shadow]
        if not enforced:
            return 0
        applied = max(enforced, key=lambda decision: decision.throttle_ms)
        if applied.throttle_ms:
            # what is applied is recorded under its own type, as a throttle of that type
            applied.manager.record_throttle(applied.sensors, applied.throttle_ms, now)
            self._hold(applied, now)
        return applied.throttle_ms

    def _hold(self, decision: Decision, now: int) -> None:
        if self.hold_principal:
            sensors, until = decision.sensors, now + decision.throttle_ms
            sensors.held_until_ms = max(sensors.held_until_ms, until)
            self._holds_end_ms = max(self._holds_end_ms, until)

    def held_ms(self, principal: Principal, api_key: int, now: int) -> int:
        """How long this request must wait before it is handled: the longest hold on the
        sensors it will charge (issue 13: a throttle holds the principal as a whole; a
        connection that charges only other sensors goes on)."""
        if not self.hold_principal or now >= self._holds_end_ms:
            return 0
        engine = self.engine
        until = 0
        if api_key not in REQUEST_QUOTA_EXEMPT and engine.request.enabled:
            until = _sensors(engine.request, principal, now).held_until_ms
        bandwidth = _BANDWIDTH.get(api_key)
        if bandwidth is not None:
            manager = engine.manager(bandwidth)
            if manager.enabled:
                until = max(until, _sensors(manager, principal, now).held_until_ms)
        return until - now if until > now else 0

    def _shadowed(
        self, quota_type: QuotaType, sensors: ClientSensors, throttle: int, now: int
    ) -> None:
        sensors.shadow_throttles += 1
        last = sensors.shadow_logged_ms
        if last is None or now - last >= _SHADOW_LOG_INTERVAL_MS:
            sensors.shadow_logged_ms = now
            user, client = sensors.tags
            log.info(
                "shadow mode: would throttle user=%s client_id=%s by %d ms for %s "
                "(%d shadow throttles so far)",
                user,
                client,
                throttle,
                quota_type.key,
                sensors.shadow_throttles,
            )
