"""The guards' enforcement as the connection-core tests build it: buckets of two seconds,
throttles of a second at most, over whatever limits a test sets."""

from __future__ import annotations

from proxy.enforcement import Enforcement
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import GuardSettings, QuotaConfig, QuotaSettings

#: a bucket of two seconds of its rate; a throttle, or a connection's hold, of 1 s at most
SETTINGS = QuotaSettings(guards=GuardSettings(burst_s=2, max_throttle_ms=1000))
EVERY_CLIENT = QuotaEntity(client_id=DEFAULT)


def enforcement(
    limits: dict[QuotaType, dict[QuotaEntity, float]],
    shadow: frozenset[QuotaType] = frozenset(),
) -> Enforcement:
    return Enforcement(QuotaEngine(QuotaConfig(SETTINGS, limits)), shadow)
