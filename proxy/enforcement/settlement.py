"""Settlement: a request's throttle, decided once, when its response goes out (or at once when
none will), in the order a Kafka broker decides it.

Kafka's KafkaApis records a Produce request's size and a Fetch response's size into the
byte-rate sensors and the request's thread time into the request sensor, then throttles by the
larger of the resulting times. The proxy cannot see the broker's threads: the request time
settled here is the connection's estimate of it (quotas/thread_time.py).

Quota types in shadow mode go through the same decisions; a throttle decided for one is
counted, logged and kept in the throttle-time metric, but not applied. A throttle applied
holds the principal: every connection that charges the throttled sensors waits until it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from proxy.enforcement.sensors import Sensors
from proxy.handlers.base import Channel, Request
from proxy.handlers.registry import ROUTES
from quotas.entities import GUARDS, SCOPED, MetricTags, QuotaType
from quotas.principal import sensors_of
from quotas.topics import TopicQuotaManager
from quotas.verdicts import Largest, Verdict

log = logging.getLogger(__name__)

#: ClientRequestQuotaManager.NANOS_TO_PERCENTAGE_PER_SECOND
_NANOS_TO_PERCENTAGE: Final = 100.0 / 1_000_000_000
#: a shadow decision is logged at most this often per entity
SHADOW_LOG_INTERVAL_MS: Final = 10_000
#: the quota types whose throttle holds the principal; a refused producer id is its one
#: request's, and the user's other producers go on
_HOLDING: Final = frozenset(
    {QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST, QuotaType.CONTROLLER_MUTATION}
)
#: the quota types whose holds usage samples count as the principal's own: a guard's holds
#: one connection, and is counted all the same
_COUNTED: Final = _HOLDING | frozenset(GUARDS.values())


class Settlement:
    def __init__(
        self,
        sensors: Sensors,
        shadow: frozenset[QuotaType] = frozenset(),
        hold_principal: bool = True,
    ) -> None:
        self._sensors = sensors
        #: quota types whose throttles are decided and reported but not applied
        self.shadow = shadow
        #: a throttle stops every connection that charges the throttled sensors, not only the
        #: one whose request crossed the quota (False: Kafka's per-connection behaviour)
        self.hold_principal = hold_principal
        #: the latest end of any hold: while it has passed, which is nearly always, no request
        #: need look at its sensors' holds (held_ms runs for every request)
        self._holds_end_ms = 0
        #: the same, of topic holds alone: only while one runs does a request's handler
        #: read what it charges beyond its principal (Handler.held_ms)
        self._topic_holds_end_ms = 0
        #: (quota type, metric tags) -> how long its sensor held its principals since usage
        #: samples last took it (the union of its throttles), and until when; kept while
        #: usage samples are (ProxyContext). By tags, not sensors: a change of limits
        #: rebuilds the clients' lookups, and a change of windows the sensors
        self._throttled: dict[tuple[QuotaType, MetricTags], list[int]] = {}
        self.counting_throttled = False

    def settle(self, request: Request, request_time_ns: int, now: int) -> int:
        """The throttle for one answered request (0 = none), settled as KafkaApis does: the
        verdict its charges left (a Produce's when read, a Fetch's now) and the request
        time, throttled by the larger."""
        request_time = None
        if request.route.request_time:
            sensors = self._sensors
            manager = sensors.engine.request
            if manager.enabled:  # charge(), inline: every answered request comes here
                principal = request.principal
                if principal.generation != sensors.generation:  # a reload came in between
                    principal = sensors.current(principal)
                used = principal.sensors[manager.slot] or sensors_of(manager, principal, now)
                throttle = manager.record_and_get_throttle_time_ms(
                    used, request_time_ns * _NANOS_TO_PERCENTAGE, now
                )
                if throttle:
                    request_time = Verdict(manager, used, throttle)
        verdict = request.verdict
        if verdict is not None:
            if type(verdict) is Largest:  # several quota types, some perhaps in shadow mode
                owed = [judged for judged in verdict.each(now) if judged.throttle_ms]
                if owed:
                    if request_time is not None:
                        owed.insert(0, request_time)
                    return self._settle(now, *owed)
            else:
                verdict = verdict.judged(now)
                if verdict.throttle_ms:
                    if request_time is not None:
                        return self._settle(now, request_time, verdict)
                    return self._settle(now, verdict)
        if request_time is not None:
            return self._settle(now, request_time)
        return 0

    def settle_now(self, request: Request, now: int) -> int:
        """A request no broker response will settle (a Produce with acks=0, for which Kafka
        skips the request quota; a request the proxy answers itself): its verdict alone."""
        verdict = request.verdict
        return self.settle_one(verdict, now) if verdict is not None else 0

    def settle_one(self, verdict: Verdict, now: int) -> int:
        return self._settle(now, verdict) if verdict.throttle_ms else 0

    def _settle(self, now: int, *verdicts: Verdict) -> int:
        """Kafka throttles by the largest decision and records it under its quota type; the
        first wins a tie, and callers pass request time first, as KafkaApis breaks ties.

        Returns the throttle to apply: the largest of the enforced quota types. When the
        largest decision belongs to a shadowed type, that decision is what shadow mode
        counts and logs, one per request, as enforcing it would have applied it.
        """
        largest = max(verdicts, key=lambda verdict: verdict.throttle_ms)
        manager, sensors, throttle = largest.manager, largest.sensors, largest.throttle_ms
        manager.record_throttle(sensors, throttle, now)
        if manager.quota_type not in self.shadow:
            if throttle:
                sensors.throttles += 1
                self.hold(largest, now)
            return throttle
        self._shadowed(manager.quota_type, largest, now)
        enforced = [v for v in verdicts if v.manager.quota_type not in self.shadow]
        if not enforced:
            return 0
        applied = max(enforced, key=lambda verdict: verdict.throttle_ms)
        if applied.throttle_ms:
            # what is applied is recorded under its own type, as a throttle of that type
            applied.manager.record_throttle(applied.sensors, applied.throttle_ms, now)
            applied.sensors.throttles += 1
            self.hold(applied, now)
        return applied.throttle_ms

    def hold(self, verdict: Verdict, now: int) -> None:
        """An applied throttle: it holds the principal, and its time counts as throttled
        once, however many requests or connections carry it. A request-rate guard's holds
        only the connection it answers (proxy/enforcement/request_guards.py), and a
        ceiling's the connections to its broker, each as its next request finds the share
        of that broker spent (quotas/ceilings.py)."""
        sensors, until = verdict.sensors, now + verdict.throttle_ms
        if self.counting_throttled:
            self._count_throttled(verdict, now, until)
        quota_type = verdict.manager.quota_type
        if self.hold_principal and quota_type.api_key is None and quota_type not in SCOPED:
            sensors.held_until_ms = max(sensors.held_until_ms, until)
            self._holds_end_ms = max(self._holds_end_ms, until)
            if isinstance(verdict.manager, TopicQuotaManager):
                self._topic_holds_end_ms = max(self._topic_holds_end_ms, until)

    def _count_throttled(self, verdict: Verdict, now: int, until: int) -> None:
        """A principal's own quota held it until `until`: what that adds to the time its
        sensor held it (a producer id's refusal and a topic's hold are not its own)."""
        manager = verdict.manager
        if manager.quota_type not in _COUNTED or isinstance(manager, TopicQuotaManager):
            return
        key = (manager.quota_type, verdict.sensors.tags)
        counted = self._throttled.get(key)
        if counted is None:
            self._throttled[key] = [until - now, until]
        elif until > counted[1]:
            counted[0] += until - max(counted[1], now)
            counted[1] = until

    def take_throttled(self, now: int) -> Callable[[str, str, int], int] | None:
        """How long each (user, client_id)'s requests of an API were held by its own quotas
        until `now` since the last call, for usage samples: the longest of the sensors
        those requests charge (as held_ms finds them). What runs past `now` is carried into
        the next call's. None when nobody was held."""
        throttled, self._throttled = self._throttled, {}
        taken: dict[tuple[QuotaType, MetricTags], int] = {}
        for key, (held, until) in throttled.items():
            beyond = until - now
            if beyond > 0:
                self._throttled[key] = [beyond, until]
                held -= beyond
            if held > 0:
                taken[key] = held
        if not taken:
            return None
        engine = self._sensors.engine

        def held_ms(user: str, client_id: str, api_key: int) -> int:
            route = ROUTES[api_key]
            charged = route.handler.quotas if route.handler is not None else ()
            if route.guard is not None:
                charged = (*charged, route.guard)
            longest = 0
            for quota_type in (QuotaType.REQUEST, *charged) if route.request_time else charged:
                if quota_type in _COUNTED:
                    tags = engine.manager(quota_type).metric_tags(user, client_id)
                    longest = max(longest, taken.get((quota_type, tags), 0))
            return longest

        return held_ms

    def held_ms(self, request: Request, channel: Channel) -> int:
        """How long a request must wait before it is handled: the longest hold on the sensors
        it will charge (a throttle holds the principal as a whole; a connection that charges
        only other sensors goes on), else on what it charges beyond its principal (a topic
        a Produce writes, which its handler reads only while a topic's hold runs)."""
        now = request.now_ms
        if not self.hold_principal or now >= self._holds_end_ms:
            return 0
        principal, handler = request.principal, request.route.handler
        engine = self._sensors.engine
        until = 0
        if request.route.request_time and engine.request.enabled:
            until = sensors_of(engine.request, principal, now).held_until_ms
        if handler is not None:
            for quota_type in handler.quotas:
                manager = engine.manager(quota_type)
                if quota_type in _HOLDING and manager.enabled:
                    until = max(until, sensors_of(manager, principal, now).held_until_ms)
        if until > now:
            return until - now
        if handler is not None and now < self._topic_holds_end_ms:
            return handler.held_ms(channel, request)
        return 0

    def _shadowed(self, quota_type: QuotaType, verdict: Verdict, now: int) -> None:
        sensors = verdict.sensors
        sensors.shadow_throttles += 1
        last = sensors.shadow_logged_ms
        if last is None or now - last >= SHADOW_LOG_INTERVAL_MS:
            sensors.shadow_logged_ms = now
            user, client = sensors.tags
            log.info(
                "shadow mode: would throttle user=%s client_id=%s by %d ms for %s "
                "(%d shadow throttles so far)",
                user,
                client,
                verdict.throttle_ms,
                quota_type.key,
                sensors.shadow_throttles,
            )
