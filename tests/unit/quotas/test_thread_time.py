"""The request-time estimate (quotas/thread_time.py): what a request is charged from the round
trips the proxy sees, on recorded round trips and through the connection core."""

from __future__ import annotations

import csv
import struct
from pathlib import Path

import pytest

from protocol.apis import FETCH, MAY_WAIT, METADATA, PRODUCE, REQUEST_QUOTA_EXEMPT, api_name
from proxy.handlers.registry import HANDLERS
from quotas.thread_time import SAMPLES, WAIT_CAP, ThreadTimes, size_class
from tests.support.wire import request_frame
from tests.unit.proxy.runtime.test_usage import T0, connected

MS = 1_000_000
JOIN_GROUP, HEARTBEAT, END_TXN = 11, 12, 26
#: APIs the core forwards as their bytes, sent below with empty bodies: one that cannot wait
#: and one that may. Taken from what no handler decodes, so handling an API changes them.
QUICK = min(
    key for key in range(100) if key not in {*HANDLERS, *MAY_WAIT, *REQUEST_QUOTA_EXEMPT}
)
WAITING = next(key for key in (JOIN_GROUP, *sorted(MAY_WAIT)) if key not in HANDLERS)
SMALL = 200  # bytes, request and response: one size class
REQUEST_LOG = Path(__file__).parent / "data" / "request_log.csv"


def test_a_request_that_cannot_wait_is_charged_its_class_lower_quartile() -> None:
    times = ThreadTimes()
    # a class's round trips: mostly 1 ms, some queued behind other connections' requests
    trips = [1 * MS, 9 * MS, 1 * MS, 30 * MS] * 4
    charged = [times.broker("b1").charge(METADATA, SMALL, trip, waits=False) for trip in trips]
    assert charged[-4:] == [1 * MS, 1 * MS, 1 * MS, 1 * MS]
    # never more than the request's own round trip
    assert times.broker("b1").charge(METADATA, SMALL, MS // 2, waits=False) == MS // 2


def test_the_quartile_follows_the_latest_round_trips() -> None:
    times = ThreadTimes()
    for _ in range(SAMPLES):
        times.broker("b1").charge(METADATA, SMALL, 1 * MS, waits=False)
    # the broker got slower for good: within SAMPLES requests the charge says so
    charged = [
        times.broker("b1").charge(METADATA, SMALL, 3 * MS, waits=False) for _ in range(SAMPLES)
    ]
    assert charged[0] == 1 * MS and charged[-1] == 3 * MS


def test_a_request_that_may_wait_is_charged_at_most_twice_the_dearest_that_cannot() -> None:
    times = ThreadTimes()
    times.broker("b1").charge(METADATA, SMALL, 2 * MS, waits=False)
    times.broker("b1").charge(HEARTBEAT + 1000, SMALL, 1 * MS, waits=False)  # a cheaper API
    # every JoinGroup of a large group waits for the others: its quartile is a wait
    charged = [
        times.broker("b1").charge(JOIN_GROUP, SMALL, 3000 * MS, waits=True) for _ in range(8)
    ]
    assert set(charged) == {WAIT_CAP * 2 * MS}
    # one that found nothing to wait for is charged its round trip
    assert times.broker("b1").charge(END_TXN, SMALL, 1 * MS, waits=True) == 1 * MS


def test_a_wait_is_capped_by_the_nearest_smaller_class_learned() -> None:
    times = ThreadTimes()
    times.broker("b1").charge(METADATA, 100, 1 * MS, waits=False)
    # a megabyte's long poll that waited its 500 ms: no request that size cannot wait
    assert size_class(2**20) > size_class(100)
    assert times.broker("b1").charge(FETCH, 2**20, 500 * MS, waits=True) == WAIT_CAP * MS
    # before anything that cannot wait is learned, its own quartile
    assert ThreadTimes().broker("b1").charge(FETCH, 2**20, 500 * MS, waits=True) == 500 * MS


def test_brokers_and_waiting_are_learned_apart() -> None:
    times = ThreadTimes()
    for _ in range(4):
        times.broker("b1").charge(PRODUCE, SMALL, 1 * MS, waits=False)  # acks=1
    assert times.broker("b2").charge(PRODUCE, SMALL, 5 * MS, waits=False) == 5 * MS
    # acks=all to replicas: its own class, capped by what b1's Produce (acks=1) costs
    assert times.broker("b1").charge(PRODUCE, SMALL, 7 * MS, waits=True) == WAIT_CAP * MS


def _request_log() -> list[dict[str, str]]:
    lines = [line for line in REQUEST_LOG.read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


@pytest.mark.parametrize(
    ("client", "round_trips", "lowest", "highest"),
    [
        # the round trips (what the proxy charged before) against what Kafka charged, then
        # the bounds the estimate keeps to
        ("classic", 34.9, 1.2, 1.6),
        ("kip848", 50.1, 1.0, 1.3),
        ("txn", 11.8, 0.8, 1.1),
        ("acks", 1.3, 0.5, 0.7),
    ],
)
def test_kafkas_own_request_log_replayed_is_charged_near_what_kafka_charged(
    client: str, round_trips: float, lowest: float, highest: float
) -> None:
    """Kafka 4.1's request log of one broker (tests/unit/quotas/data/request_log.csv): each
    request's
    total time as the round trip, its local and send time as what Kafka charged (the I/O
    thread's time and, at most, the network thread's). The log has no sizes, so every
    request is in one size class here; acks=all Produces, which are larger than the others in
    practice, are then capped by the small requests' cost and charged low."""
    times = ThreadTimes()
    charged = kafka = total = 0.0
    for row in _request_log():
        api_key = int(row["api_key"])
        waits = api_key in MAY_WAIT or api_key in (PRODUCE, FETCH)  # acks=all, long polls
        estimate = times.broker("b1").charge(api_key, SMALL, round(float(row["total"]) * MS), waits)
        if row["client"] == client:
            charged += estimate / MS
            kafka += float(row["local"]) + float(row["send"])
            total += float(row["total"])
    assert round(total / kafka, 1) == round_trips
    assert lowest <= charged / kafka <= highest


def test_a_joingroup_waiting_for_the_group_is_charged_as_a_quick_request() -> None:
    """Through the connection core: the usage samples (and the request sensor) get the
    estimate, not the 3 s the JoinGroup waited for the other members."""
    recorder, clock, core, _ = connected()
    for correlation_id in range(1, 5):  # forwarded as bytes, as a JoinGroup is
        core.requests_received(request_frame(QUICK, 1, b"", correlation_id))
        clock.advance(2 * MS)
        core.responses_received(struct.pack(">ii", 4, correlation_id))
    core.requests_received(request_frame(WAITING, 5, b"", 5))
    clock.advance(3000 * MS)
    core.responses_received(struct.pack(">ii", 4, 5))
    samples = {sample.api: sample for sample in recorder.drain(T0 + 10_000)}
    assert samples[api_name(QUICK)].request_time_ms == 4 * 2.0
    assert samples[api_name(WAITING)].request_time_ms == WAIT_CAP * 2.0


def test_responses_read_at_once_share_their_round_trip() -> None:
    """A client pipelining requests gets its responses several to a read: the first's round
    trip is the time of all of them. Each is charged a fourth of it, not the first all and
    the others nothing (a quartile of mostly zeros would make every request free)."""
    recorder, clock, core, _ = connected()
    batches = 8
    for batch in range(batches):
        ids = range(batch * 4 + 1, batch * 4 + 5)
        core.requests_received(b"".join(request_frame(QUICK, 1, b"", i) for i in ids))
        clock.advance(8 * MS)
        core.responses_received(b"".join(struct.pack(">ii", 4, i) for i in ids))
    [sample] = recorder.drain(T0 + 10_000)
    assert (sample.requests, sample.request_time_ms) == (4 * batches, 8.0 * batches)
