"""controller_mutation_rate (KIP-599): partition mutations through a token bucket per
principal, admitted strictly (error 89) or permissively (throttled by muting)."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.enforcement.sensors import Sensors
from proxy.enforcement.settlement import Settlement
from proxy.handlers.base import Request
from quotas.entities import QuotaType
from quotas.managers import UNLIMITED
from quotas.principal import sensors_of
from quotas.verdicts import Elapsing, Rejudged


class MutationEnforcement:
    def __init__(self, sensors: Sensors, settlement: Settlement) -> None:
        self._sensors = sensors
        self._settlement = settlement

    def limited(self, request: Request) -> bool:
        """Checked before the request goes: a principal whose mutations are not limited has
        its requests go through untouched, nothing read or charged."""
        manager = self._sensors.engine.controller_mutation
        if not manager.enabled:
            return False
        return sensors_of(manager, request.principal, request.now_ms).limit != UNLIMITED

    def admit(
        self, request: Request, counts: Sequence[int], strict: bool
    ) -> tuple[list[int], list[int]]:
        """Charge each topic's partition mutations in request order, as KIP-599 does.

        A topic that mutates nothing is neither charged nor refused. Strict (clients that
        understand error 89): a topic is refused, and charged nothing, while the bucket is
        below zero; the request's throttle is the last refusal's, less the time its answer
        takes. Permissive (older clients): every topic is charged and the throttle is the
        bucket's when the response goes out, after the cluster's refusals were refunded. In
        shadow mode nothing is refused: a topic strict mode would refuse goes to the cluster,
        so it is charged as the cluster will mutate it, and the throttle is reported as
        shadow modes report theirs.
        """
        manager = self._sensors.engine.controller_mutation
        now = request.now_ms
        sensors = sensors_of(manager, request.principal, now)
        shadow = QuotaType.CONTROLLER_MUTATION in self._settlement.shadow
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
        if throttle:
            if strict:
                request.verdict = Elapsing(manager, sensors, throttle, now)
            else:
                request.verdict = Rejudged(manager, sensors, throttle)
        usage = request.usage
        if usage is not None:
            usage.mutations_admitted += sum(charged)
            usage.mutations_rejected += sum(counts[index] for index in refused)
        return refused, charged

    def refund(self, request: Request, count: int) -> None:
        manager = self._sensors.engine.controller_mutation
        now = request.now_ms
        manager.refund(sensors_of(manager, request.principal, now), count, now)
