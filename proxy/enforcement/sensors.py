"""The live quota engine and the sensors each request charges.

A reload that keeps the quota windows updates the engine's limits in place, keeping every
sensor's history; one that changes them starts a fresh engine (Kafka reads its window settings
once at start-up, and sensor history cannot be re-sampled into other windows). Either moves
the generation, and so does a sensor expiry: connections then resolve their kept Principal
again (quotas/principal.py).
"""

from __future__ import annotations

from quotas.engine import QuotaEngine
from quotas.managers import ClientQuotaManager
from quotas.principal import Principal, sensors_of
from quotas.settings import QuotaConfig
from quotas.verdicts import Verdict


class Sensors:
    def __init__(self, engine: QuotaEngine) -> None:
        self.engine = engine
        self.generation = 0

    def principal(self, kept: Principal | None, user: str, client_id: str) -> Principal:
        """A connection's kept Principal while it still names this client in the current
        generation, else a new one."""
        if (
            kept is None
            or kept.generation != self.generation
            or kept.client_id != client_id
            or kept.user != user
        ):
            return Principal(user, client_id, self.generation)
        return kept

    def current(self, principal: Principal) -> Principal:
        """A request's principal when its response comes: resolved again if a reload or an
        expiry came in between."""
        if principal.generation == self.generation:
            return principal
        return Principal(principal.user, principal.client_id, self.generation)

    def apply(self, quotas: QuotaConfig) -> bool:
        """Take reloaded quotas; False when their windows changed and every sensor restarts."""
        self.generation += 1
        if self.engine.update(quotas):
            return True
        self.engine = QuotaEngine(quotas, self.engine.connections, self.engine.disk.guard)
        return False

    def expire(self, now_ms: int) -> int:
        """Drop sensors idle for an hour, as Kafka's ExpireSensorTask; returns how many."""
        expired = self.engine.expire(now_ms)
        if expired:
            self.generation += 1
        return expired


def charge(
    manager: ClientQuotaManager, principal: Principal, value: float, now_ms: int
) -> Verdict | None:
    """Record `value` on the principal's sensor of this quota type, then check (Kafka's
    order); None when it does not throttle, and when no entity configures the quota type, as
    Kafka then records nothing. Nearly every charge is not throttled: it builds no Verdict."""
    if not manager.enabled:
        return None
    sensors = principal.sensors[manager.slot] or sensors_of(manager, principal, now_ms)
    throttle = manager.record_and_get_throttle_time_ms(sensors, value, now_ms)
    return Verdict(manager, sensors, throttle) if throttle else None
