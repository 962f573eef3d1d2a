"""Per-request quota enforcement, cut by quota type.

Each quota type's charge (bandwidth.py, mutations.py, producer_ids.py) records on the
principal's sensors and keeps its verdict in the request; settlement.py settles it once, with
the request time, when the response goes out (or at once when none will). The handlers reach
the charges through proxy.handlers.base.Quotas; the connection charges the request-rate
guards (request_guards.py) of the APIs that have one, has its principal's connection guards
(connections.py) judge it, resolves each request's principal (sensors.py) and has
settlement decide its throttle.
"""

from __future__ import annotations

from proxy.enforcement.bandwidth import FetchEnforcement, ProduceEnforcement
from proxy.enforcement.connections import ConnectionGuards
from proxy.enforcement.mutations import MutationEnforcement
from proxy.enforcement.producer_ids import ProducerIdEnforcement
from proxy.enforcement.request_guards import RequestGuardEnforcement
from proxy.enforcement.sensors import Sensors
from proxy.enforcement.settlement import Settlement
from quotas.engine import QuotaEngine
from quotas.entities import QuotaType
from quotas.settings import QuotaConfig, QuotaLimits


class Enforcement:
    def __init__(
        self,
        engine: QuotaEngine,
        shadow: frozenset[QuotaType] = frozenset(),
        hold_principal: bool = True,
    ) -> None:
        self.sensors = Sensors(engine)
        self.settlement = Settlement(self.sensors, shadow, hold_principal)
        self.produce = ProduceEnforcement(self.sensors, self.settlement)
        self.fetch = FetchEnforcement(self.sensors, self.settlement)
        self.mutations = MutationEnforcement(self.sensors, self.settlement)
        self.producer_ids = ProducerIdEnforcement(self.sensors, self.settlement)
        self.guards = RequestGuardEnforcement(self.sensors, self.settlement)
        self.connections = ConnectionGuards(self.sensors, self.settlement)

    @property
    def engine(self) -> QuotaEngine:
        return self.sensors.engine

    def apply(
        self, quotas: QuotaConfig, shadow: frozenset[QuotaType], hold_principal: bool
    ) -> bool:
        """Take a reloaded config; False when its windows changed and every sensor restarts."""
        self.settlement.shadow = shadow
        self.settlement.hold_principal = hold_principal
        kept = self.sensors.apply(quotas)
        self._limits_changed()
        return kept

    def apply_limits(self, limits: QuotaLimits) -> None:
        """New limits from the quota store, on the sensors as they are."""
        self.sensors.apply(QuotaConfig(self.engine.config.settings, limits))
        self._limits_changed()

    def _limits_changed(self) -> None:
        engine = self.engine
        self.produce.topic_quotas = engine.topic_produce.enabled
        self.fetch.topic_quotas = engine.topic_fetch.enabled
        self.produce.ceilings = engine.produce_ceiling.enabled
        self.fetch.ceilings = engine.fetch_ceiling.enabled
        self.guards.request_ceiling = engine.request_ceiling.enabled
        self.produce.disk_guard = engine.disk.enabled

    def disk_read(self) -> None:
        """The disk guard read a broker's log directories: its ceilings move with it."""
        self.engine.disk.refresh()
        self.produce.disk_guard = self.engine.disk.enabled

    def expire(self, now_ms: int) -> int:
        return self.sensors.expire(now_ms)
