"""The request-rate guards (issue 52; docs/guards.md): one token bucket per principal and
API, charged a token per request as the request is read, and answered as Kafka answers a
quota: the response's throttle_time_ms and the KIP-219 mute of its connection, never an
error a client takes as fatal.

A request over its bucket is handled as a broker handles every request: nothing more is read
from its connection until its response has gone (the connection's later requests, pipelined,
would otherwise each go before the first throttle is known). Its throttle then holds only
that connection, not its principal: the principal's other connections each meet the empty
bucket with their own next request, and a member's connection to its coordinator is never
held for another connection's storm. The throttle is capped ([guards.requests]
max_throttle_ms), which is what keeps a muted member's heartbeats within its session.
"""

from __future__ import annotations

from protocol.apis import CONSUMER_GROUP_HEARTBEAT
from protocol.group_heartbeat import keeps_alive
from proxy.enforcement.ceilings import charge_ceilings
from proxy.enforcement.sensors import Sensors
from proxy.enforcement.settlement import Settlement
from proxy.handlers.base import Request
from quotas.principal import sensors_of
from quotas.verdicts import Largest, Rejudged


class RequestGuardEnforcement:
    def __init__(self, sensors: Sensors, settlement: Settlement) -> None:
        self._sensors = sensors
        self._settlement = settlement
        #: whether any broker has a requests ceiling (docs/ceilings.md): then every request
        #: is charged here, not only those of an API with a guard
        self.request_ceiling = sensors.engine.request_ceiling.enabled

    def charge(self, request: Request, broker: int | None) -> None:
        """A token of the broker's requests ceiling, when it has one, and of the request's
        guard, when an entity sets one for its principal. Over either, the request stops
        its connection's reading until its response has gone, and the verdict is the
        bucket's then (it refills meanwhile)."""
        if self.request_ceiling:
            ceiling = self._sensors.engine.request_ceiling
            if charge_ceilings(ceiling, self._settlement, request, broker, 1.0):
                request.stops_reading = True
        if request.route.guard is None:
            return
        manager = self._sensors.engine.guards[request.header.api_key]
        if not manager.enabled:
            return
        if request.header.api_key == CONSUMER_GROUP_HEARTBEAT and keeps_alive(
            request.frame, request.header
        ):
            return  # a member staying alive makes the coordinator do nothing
        now = request.now_ms
        principal = request.principal
        sensors = principal.sensors[manager.slot] or sensors_of(manager, principal, now)
        throttle = manager.record_permissive(sensors, 1.0, now)
        if not throttle:
            return
        if manager.quota_type not in self._settlement.shadow:  # shadow mode holds nothing
            request.stops_reading = True
        verdict = Rejudged(manager, sensors, throttle)
        earlier = request.verdict
        request.verdict = verdict if earlier is None else Largest([earlier, verdict])
