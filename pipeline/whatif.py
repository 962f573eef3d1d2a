"""What-if: one user's recorded windows replayed through the proxy's own quota managers.

A sample says how much a principal used in a whole sampling window (10 s by default); the
quota managers judge in their own windows (1 s by default). The replay spreads each sampling
window's use evenly over the quota windows it spans and records it there, in time order, as
the proxy records a request: a quota window recorded while the principal is over its quota
would have been throttled, and so would its bytes (or mutations, ids, request time).

One user is replayed at a time, with all of its client-ids, because a users/<user> quota is
one sensor shared by every client-id of that user. A clients/<client-id> entity without a
user is shared across users in Kafka; the replay keeps it per user, an approximation.

`replay` is the per-record replay through the managers, one user at a time; `replay_columns`
gives the same results for many users at once, every sensor advanced in lockstep by numpy
(pipeline/lockstep.py): the report runs the latter, the tests hold the former as its oracle.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.lockstep import (
    Floats,
    Ints,
    Records,
    bucket_refused,
    lockstep_key,
    rate_throttled,
)
from quotas.engine import QuotaEngine
from quotas.entities import QUOTA_KEYS, QuotaType
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


#: the quota keys in REPLAYED's order: results are sorted by user, client-id, then this
_KEYS = tuple(quota_type.key for quota_type in REPLAYED)
#: request time is shown in ms and charged in percent-seconds, as the proxy records it
_DIVISOR = {QuotaType.REQUEST: 10.0}


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
        return self.used(index) / _DIVISOR.get(REPLAYED[index], 1.0)


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


def throttled_seconds(result: WhatIf, engine: QuotaEngine) -> float:
    """The throttled use as the time its quota takes to admit it: what puts bytes, request
    time, partitions and producer ids in one ranking."""
    quota_type = QUOTA_KEYS[result.quota]
    manager = engine.manager(quota_type)
    unit_ms = manager.unit_ms if isinstance(manager, TokenBucketQuotaManager) else 1000.0
    return result.throttled / _DIVISOR.get(quota_type, 1.0) / result.limit * unit_ms / 1000.0


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


class _Charged(NamedTuple):
    """One quota type's windows for the lockstep, and what turns its verdicts into tallies."""

    quota_type: QuotaType
    manager: ClientQuotaManager | TokenBucketQuotaManager
    #: per window, the use in the report's unit
    used: Floats
    #: the windows the config limits, in the replay's order
    rows: Ints
    #: those that record something, grouped by sensor, and into how many records each
    recorded: Ints
    slices: Ints
    limits: Floats
    principal_sensor: Ints
    records: Records


def _numbers(values: npt.ArrayLike | pa.ChunkedArray, dtype: type[np.generic]) -> npt.NDArray[Any]:
    if isinstance(values, pa.ChunkedArray):
        values = values.to_numpy()
    return np.asarray(values, dtype=dtype)


def _codes(names: npt.ArrayLike | pa.ChunkedArray) -> tuple[Ints, list[str]]:
    """Codes that sort as the names do, and the names: a hash table in Arrow, not a sort of
    millions of strings, nor a Python object per name (the report hands Arrow columns)."""
    encoded = pc.dictionary_encode(
        names if isinstance(names, pa.ChunkedArray) else pa.array(np.asarray(names, dtype=object))
    )
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    found = encoded.dictionary.to_pylist()
    order = np.argsort(np.asarray(found, dtype=object), kind="stable")
    rank = np.empty(len(found), dtype=np.int64)
    rank[order] = np.arange(len(found))
    return rank[encoded.indices.to_numpy()], [found[i] for i in order]


def replay_columns(
    columns: Mapping[str, npt.ArrayLike | pa.ChunkedArray], config: QuotaConfig
) -> list[WhatIf]:
    """`replay` for every user in the columns at once (user, PrincipalWindow's fields):
    the same windows, records, order and arithmetic, each quota type's sensors in lockstep."""
    user_codes, users = _codes(columns["user"])
    client_codes, clients = _codes(columns["client_id"])
    starts = _numbers(columns["window_start_ms"], np.int64)
    window_ms = _numbers(columns["window_ms"], np.int64)
    principals, principal_codes = np.unique(
        user_codes * len(clients) + client_codes, return_inverse=True
    )
    # every window in the per-record replay's order: by user, window start, client-id
    order = np.lexsort((client_codes, starts, user_codes))
    engine = QuotaEngine(config)
    charged: list[_Charged] = []
    for index, quota_type in enumerate(REPLAYED):
        manager = engine.manager(quota_type)
        if not manager.enabled:
            continue
        assert isinstance(manager, ClientQuotaManager | TokenBucketQuotaManager)
        used = _numbers(columns[PrincipalWindow._fields[3 + index]], np.float64)
        charge = used / _DIVISOR.get(quota_type, 1.0)
        # a sensor per user and metric tags (replay makes an engine per user)
        sensor_of: dict[tuple[str, object], int] = {}
        limits: list[float] = []
        principal_sensor = np.empty(len(principals), dtype=np.int64)
        for code, principal in enumerate(principals):
            user = users[principal // len(clients)]
            sensors = manager.sensors_for(user, clients[principal % len(clients)], 0)
            key = (user, sensors.tags)
            if key not in sensor_of:
                sensor_of[key] = len(limits)
                limits.append(sensors.limit)
            principal_sensor[code] = sensor_of[key]
        limit_of = np.asarray(limits, dtype=np.float64)
        rows = order[limit_of[principal_sensor[principal_codes[order]]] != UNLIMITED]
        recorded = rows[charge[rows] != 0]  # `if not used`: nothing recorded
        # each sensor's windows in their order, each spread over its quota windows
        recorded = recorded[np.argsort(principal_sensor[principal_codes[recorded]], kind="stable")]
        slices = np.maximum(1, np.ceil(window_ms[recorded] / manager.config.window_ms)).astype(
            np.int64
        )
        records = Records(
            starts[recorded],
            window_ms[recorded],
            slices,
            charge[recorded] / slices,
            np.bincount(principal_sensor[principal_codes[recorded]], minlength=len(limits)),
        )
        charged.append(
            _Charged(
                quota_type,
                manager,
                used,
                rows,
                recorded,
                slices,
                limit_of,
                principal_sensor,
                records,
            )
        )
    results: list[WhatIf] = []
    for replayed, throttled in zip(charged, _verdicts(charged), strict=True):
        used, rows = replayed.used, replayed.rows
        recorded, slices = replayed.recorded, replayed.slices
        # the tallies per principal, added in its windows' order as replay adds them
        principal = principal_codes[rows]
        n = len(principals)
        windows = np.bincount(principal, minlength=n)
        hit = throttled > 0
        of_recorded = principal_codes[recorded]
        hit_windows = np.bincount(of_recorded[hit], minlength=n)
        used_sum = np.zeros(n, dtype=np.float64)
        np.add.at(used_sum, of_recorded, used[recorded])
        throttled_sum = np.zeros(n, dtype=np.float64)
        np.add.at(
            throttled_sum, of_recorded[hit], used[recorded][hit] * throttled[hit] / slices[hit]
        )
        for found in np.flatnonzero(windows):
            user, client_id = (
                users[principals[found] // len(clients)],
                clients[principals[found] % len(clients)],
            )
            results.append(
                WhatIf(
                    user,
                    client_id,
                    replayed.quota_type.key,
                    float(replayed.limits[replayed.principal_sensor[found]]),
                    int(windows[found]),
                    int(hit_windows[found]),
                    float(used_sum[found]),
                    float(throttled_sum[found]),
                )
            )
    return sorted(results, key=lambda r: (r.user, r.client_id, _KEYS.index(r.quota)))


def _verdicts(charged: Sequence[_Charged]) -> list[Ints]:
    """Each quota type's throttled records per window. The rate quotas that measure in the
    same windows replay as one lockstep, their sensors side by side: a step's cost is mostly
    numpy's per call, and a day is 86,400 steps whichever quota they charge."""
    verdicts: dict[int, Ints] = {}
    rates: dict[tuple[int, int, bool], list[int]] = defaultdict(list)
    for position, replayed in enumerate(charged):
        manager = replayed.manager
        if isinstance(manager, ClientQuotaManager):
            rates[lockstep_key(manager)].append(position)
        else:
            verdicts[position] = bucket_refused(manager, replayed.limits, replayed.records)
    for positions in rates.values():
        group = [charged[position].records for position in positions]
        records = Records(
            *(
                np.concatenate([getattr(part, name) for part in group])
                for name in ("starts_ms", "widths_ms", "slices", "shares", "windows")
            )
        )
        manager = charged[positions[0]].manager
        assert isinstance(manager, ClientQuotaManager)
        limits = np.concatenate([charged[position].limits for position in positions])
        hits = rate_throttled(manager, limits, records)
        ends = np.cumsum([len(part.slices) for part in group])
        for position, part in zip(positions, np.split(hits, ends[:-1]), strict=True):
            verdicts[position] = part
    return [verdicts[position] for position in range(len(charged))]
