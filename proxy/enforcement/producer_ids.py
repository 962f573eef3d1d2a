"""producer_ids_rate (KIP-936): a Produce whose unseen producer id finds its user's bucket
below zero is refused before it reaches the broker."""

from __future__ import annotations

import logging
from typing import Final

from proxy.enforcement.sensors import Sensors
from proxy.enforcement.settlement import Settlement
from proxy.handlers.base import Request
from quotas.entities import QuotaType
from quotas.managers import UNLIMITED
from quotas.principal import sensors_of
from quotas.verdicts import Verdict

log = logging.getLogger(__name__)

#: a dropped request is logged at most this often per user
_DROPPED_LOG_INTERVAL_MS: Final = 10_000


class ProducerIdEnforcement:
    def __init__(self, sensors: Sensors, settlement: Settlement) -> None:
        self._sensors = sensors
        self._settlement = settlement

    def limited(self, request: Request) -> bool:
        manager = self._sensors.engine.producer_ids
        if not manager.enabled:
            return False
        return sensors_of(manager, request.principal, request.now_ms).limit != UNLIMITED

    def admit(self, request: Request, producer_ids: list[int]) -> bool:
        """Refuse a Produce whose unseen producer id finds the bucket below zero (its
        throttle may round to 0 ms, and it is still a refusal); in shadow mode admit it,
        charged, and report the throttle."""
        if not producer_ids:
            return True
        manager, principal, now = (
            self._sensors.engine.producer_ids,
            request.principal,
            request.now_ms,
        )
        sensors = sensors_of(manager, principal, now)
        seen = principal.producer_ids_seen
        if seen is not None and seen[0] == producer_ids:
            slot = manager.current_slot(sensors, now)
            if slot is not None and slot is seen[1]:
                return True  # all in the user's current time slot
        shadow = QuotaType.PRODUCER_IDS in self._settlement.shadow
        admission = manager.admit(sensors, producer_ids, now, enforce=not shadow)
        usage = request.usage
        if usage is not None:
            usage.producer_ids_admitted += admission.new_ids
            usage.producer_ids_rejected += not admission.admitted  # the first unseen id refused
        verdict = Verdict(manager, sensors, admission.throttle_ms)
        if admission.admitted:
            principal.producer_ids_seen = (producer_ids, manager.current_slot(sensors, now))
            self._settlement.settle_one(verdict, now)  # shadow mode: reported only
            return True
        request.verdict = verdict
        return False

    def dropped(self, request: Request) -> None:
        """Count a refused request that had no response to carry the refusal (acks=0), and
        log it at most every ten seconds per user."""
        verdict = request.verdict
        assert verdict is not None
        sensors, now = verdict.sensors, request.now_ms
        sensors.dropped_requests += 1
        last = sensors.dropped_logged_ms
        if last is None or now - last >= _DROPPED_LOG_INTERVAL_MS:
            sensors.dropped_logged_ms = now
            log.warning(
                "dropped an acks=0 Produce of user=%s: an unseen producer id over its "
                "producer_ids_rate (%d dropped so far)",
                sensors.tags[0],
                sensors.dropped_requests,
            )
