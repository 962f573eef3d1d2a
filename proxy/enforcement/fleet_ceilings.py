"""A fleet's members holding each broker's ceiling together (docs/ceilings.md): every sync
interval each member publishes its Load of every ceiling it knows (quotas/ceilings.py), whole,
and adds the others' last into the level it solves, so every member solves the same sum and
each holds the principals it serves to the same level. The cost is three entries per broker
and kind of ceiling per member per interval, whatever the principals.

A member not heard for GONE_AFTER intervals is left out, as its connections are. A member
whose bus is down holds its share of every ceiling alone (ProxyContext.share_budgets), as it
does every quota.
"""

from __future__ import annotations

from typing import Final

from protocol.fleet_records import CEILING_FIXED, CEILING_USED, CEILING_WEIGHT, Use
from quotas.ceilings import NO_LOAD, Load
from quotas.engine import QuotaEngine

#: a Load's parts, in its order, as the bus numbers them
PARTS: Final = (CEILING_USED, CEILING_FIXED, CEILING_WEIGHT)


class FleetCeilings:
    def __init__(self, gone_after_ms: float) -> None:
        self._gone_after_ms = gone_after_ms
        #: (ceiling key, scope) -> member -> its Load's parts, and when it was heard
        self._heard: dict[tuple[str, str], dict[str, tuple[list[float], int]]] = {}

    def publish(self, uses: list[Use], engine: QuotaEngine, now_ms: int) -> None:
        """This member's Load of every broker's ceiling, beside its uses."""
        for manager in engine.ceilings():
            if not manager.enabled:
                continue
            key = manager.quota_type.key
            for scope, ceiling in manager.scopes():
                load = zip(PARTS, manager.load(ceiling, now_ms), strict=True)
                uses += [(part, key, scope, value) for part, value in load]
        self._place(engine, now_ms)

    def receive(self, member: str, use: Use, now_ms: int) -> None:
        part, key, scope, value = use
        heard = self._heard.setdefault((key, scope), {})
        parts, _ = heard.get(member) or ([0.0, 0.0, 0.0], now_ms)
        parts[PARTS.index(part)] = value
        heard[member] = (parts, now_ms)

    def received(self, engine: QuotaEngine, now_ms: int) -> None:
        """Once a publication is read: the others' loads, summed, into each ceiling."""
        self._place(engine, now_ms)

    def _place(self, engine: QuotaEngine, now_ms: int) -> None:
        by_key = {manager.quota_type.key: manager for manager in engine.ceilings()}
        for (key, scope), heard in list(self._heard.items()):
            for member, (_, at) in list(heard.items()):
                if now_ms - at > self._gone_after_ms:
                    del heard[member]
            manager = by_key.get(key)
            ceiling = manager.scope(scope) if manager is not None else None
            if ceiling is not None:
                ceiling.others = sum((Load(*parts) for parts, _ in heard.values()), NO_LOAD)
            if not heard:
                del self._heard[(key, scope)]
