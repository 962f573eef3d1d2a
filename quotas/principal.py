"""One client's sensors, per quota type, as its connection keeps them between requests.

Resolving a (user, client-id) to its sensors is Kafka's entity lookup, one per quota type; a
connection almost always sends every request as one client, so it resolves each quota type
once, as it first charges it, and keeps the result until the generation it was resolved in
moves (a reload or a sensor expiry).
"""

from __future__ import annotations

from quotas.entities import QuotaType
from quotas.managers import ClientSensors, QuotaManager


class Principal:
    __slots__ = ("client_id", "generation", "producer_ids_seen", "sensors", "user")

    def __init__(self, user: str, client_id: str, generation: int) -> None:
        self.user = user
        self.client_id = client_id
        self.generation = generation
        #: by QuotaManager.slot; None until the quota type first charges this client
        self.sensors: list[ClientSensors | None] = [None] * len(QuotaType)
        #: the producer ids of this connection's last admitted Produce and the user's time
        #: slot they are in: a producer sends its one id again and again, and while that slot
        #: is current the filter need not be asked
        self.producer_ids_seen: tuple[list[int], object] | None = None


def sensors_of(manager: QuotaManager, principal: Principal, now_ms: int) -> ClientSensors:
    """The principal's sensors of this quota type, resolved at their first use."""
    sensors = principal.sensors[manager.slot]
    if sensors is None:
        sensors = principal.sensors[manager.slot] = manager.sensors_for(
            principal.user, principal.client_id, now_ms
        )
    return sensors
