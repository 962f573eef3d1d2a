"""What-if: one user's recorded windows replayed through the proxy's own quota managers.

A sample says how much a principal used in a whole sampling window (10 s by default); the
quota managers judge in their own windows (1 s by default). The replay spreads each sampling
window's use evenly over the quota windows it spans and records it there, in time order, as
the proxy records a request: a quota window recorded while the principal is over its quota
would have been throttled, and so would its bytes (or mutations, ids, request time).

One user is replayed at a time, with all of its client-ids, because a users/<user> quota is
one sensor shared by every client-id of that user. A clients/<client-id> entity without a
user is shared across users in Kafka; the replay keeps it per user, an approximation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple, cast

from quotas.engine import QuotaEngine
from quotas.entities import QuotaType
from quotas.managers import UNLIMITED, ClientQuotaManager, TokenBucketQuotaManager
from quotas.settings import QuotaConfig

#: the quota types a window's use is charged to, in PrincipalWindow's field order
REPLAYED = (
    QuotaType.PRODUCE,
    QuotaType.FETCH,
    QuotaType.REQUEST,
    QuotaType.CONTROLLER_MUTATION,
    QuotaType.PRODUCER_IDS,
)


class PrincipalWindow(NamedTuple):
    """One principal's use in one sampling window, in what each quota charges."""

    client_id: str
    window_start_ms: int
    window_ms: int
    #: producer_byte_rate: Produce request bytes
    produce_bytes: float
    #: consumer_byte_rate: Fetch response bytes
    fetch_bytes: float
    #: request_percentage: request time, ms (quota-exempt APIs left out)
    request_time_ms: float
    #: controller_mutation_rate: partitions asked for, admitted or not
    mutations: float
    #: producer_ids_rate: unseen producer ids, admitted or not
    producer_ids: float

    def used(self, index: int) -> float:
        """The use of quota type REPLAYED[index], in what the report shows (ms, bytes...)."""
        return cast(float, self[3 + index])

    def charge(self, index: int) -> float:
        """What the quota type REPLAYED[index] records for this window, in its own unit."""
        if REPLAYED[index] is QuotaType.REQUEST:
            return self.used(index) / 10.0  # ms -> percent-seconds, as the proxy records
        return self.used(index)


class WhatIf(NamedTuple):
    """How one principal would have fared under one quota type's candidate quota."""

    user: str
    client_id: str
    quota: str
    limit: float
    windows: int
    throttled_windows: int
    #: in the quota's unit: bytes, request time in ms, partitions, producer ids
    used: float
    throttled: float


def replay(user: str, windows: Iterable[PrincipalWindow], config: QuotaConfig) -> list[WhatIf]:
    """Every (client-id, quota type) of this user that the config limits, replayed."""
    engine = QuotaEngine(config)
    ordered = sorted(windows, key=lambda w: (w.window_start_ms, w.client_id))
    results: dict[tuple[str, int], list[float]] = {}
    for index, quota_type in enumerate(REPLAYED):
        manager = engine.manager(quota_type)
        if not manager.enabled:
            continue
        slice_ms = manager.config.window_ms
        for window in ordered:
            sensors = manager.sensors_for(user, window.client_id, window.window_start_ms)
            if sensors.limit == UNLIMITED:
                continue
            tally = results.setdefault((window.client_id, index), [sensors.limit, 0, 0, 0.0, 0.0])
            tally[1] += 1
            used = window.charge(index)
            if not used:
                continue
            tally[3] += window.used(index)
            slices = max(1, math.ceil(window.window_ms / slice_ms))
            share = used / slices
            throttled = 0
            for part in range(slices):
                now = window.window_start_ms + part * window.window_ms // slices
                if isinstance(manager, ClientQuotaManager):
                    throttled += manager.record_and_get_throttle_time_ms(sensors, share, now) > 0
                else:
                    assert isinstance(manager, TokenBucketQuotaManager)
                    throttled += not manager.record_strict(sensors, share, now).admitted
            if throttled:
                tally[2] += 1
                tally[4] += window.used(index) * throttled / slices
    return [
        WhatIf(user, client_id, REPLAYED[index].key, limit, int(n), int(hit), used, throttled)
        for (client_id, index), (limit, n, hit, used, throttled) in sorted(results.items())
    ]
