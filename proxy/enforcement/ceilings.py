"""Each broker's ceilings (docs/ceilings.md), charged where a request's bytes go: a Produce's
as it is read, a Fetch's as its response comes, and every request of a broker's requests
ceiling as it is read; on top of the principal's quotas, settled with them by the largest.

A principal over its share of a broker is answered as a quota answers it: throttle_time_ms
and the KIP-219 mute of that connection. Its connections to other brokers go on.
"""

from __future__ import annotations

from proxy.enforcement.settlement import Settlement
from proxy.handlers.base import Request
from quotas.ceilings import CLUSTER, CeilingManager
from quotas.verdicts import Largest, Rejudged, Verdict


def charge_ceiling(
    manager: CeilingManager,
    settlement: Settlement,
    request: Request,
    scope: str,
    value: float,
    verdict_of: type[Verdict] = Rejudged,
) -> bool:
    """Charge `value` to the principal's share of the scope (a broker's node id, a log
    directory's), when it has a ceiling of this kind; True when the connection must stop
    reading until the response has gone (over its share, enforced). `verdict_of` as for
    topics (bandwidth.py)."""
    ceiling = manager.scope(scope)
    if ceiling is None:
        return False
    principal, now = request.principal, request.now_ms
    standing = manager.standing(principal.user, principal.client_id)
    sensors, throttle = manager.charge(ceiling, standing, value, now)
    if not throttle:
        return False
    verdict = verdict_of(manager, sensors, throttle)
    earlier = request.verdict
    request.verdict = verdict if earlier is None else Largest([earlier, verdict])
    return manager.quota_type not in settlement.shadow


def charge_ceilings(
    manager: CeilingManager,
    settlement: Settlement,
    request: Request,
    broker: int | None,
    value: float,
    verdict_of: type[Verdict] = Rejudged,
) -> bool:
    """The broker's ceiling of this kind (when the connection's broker is known) and the
    cluster's, each charged as charge_ceiling does."""
    stops = broker is not None and charge_ceiling(
        manager, settlement, request, str(broker), value, verdict_of
    )
    if manager.cluster is not None:
        stops = charge_ceiling(manager, settlement, request, CLUSTER, value, verdict_of) or stops
    return stops


def ceiling_owed(
    manager: CeilingManager, settlement: Settlement, request: Request, broker: int | None
) -> int:
    """The throttle a principal already past its share of the broker owes before its next
    Fetch goes (0: none), as Kafka answers a consumer over its quota with an empty fetch."""
    if manager.quota_type in settlement.shadow:
        return 0
    principal, now = request.principal, request.now_ms
    tags = manager.standing(principal.user, principal.client_id).tags
    owed = 0
    for scope in (str(broker) if broker is not None else None, CLUSTER):
        ceiling = manager.scope(scope) if scope is not None else None
        share = ceiling.shares.get(tags) if ceiling is not None else None
        if share is not None:
            throttle = manager.throttle_time_ms(share[0], now)
            if throttle > owed:
                owed = throttle
                request.verdict = Verdict(manager, share[0], throttle)
    return owed
