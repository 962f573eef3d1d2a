"""The request-time estimate (quotas/thread_time.py): what a request is charged from the round
trips the proxy sees, on recorded round trips and through the connection core."""

from __future__ import annotations

import csv
import struct
from pathlib import Path

import pytest

from localkafka.inprocess.wire import request_frame
from protocol.apis import FETCH, MAY_WAIT, METADATA, PRODUCE, REQUEST_QUOTA_EXEMPT, api_name
from proxy.handlers.registry import HANDLERS, ROUTES
from quotas.thread_time import (
    APPENDED,
    HANDLED,
    SAMPLES,
    SENT,
    WAIT_CAP,
    Bound,
    ThreadTimes,
    size_class,
)
from tests.unit.proxy.runtime.test_usage_recorder import T0, connected

MS = 1_000_000
US = 1_000
JOIN_GROUP, HEARTBEAT, END_TXN = 11, 12, 26
#: APIs the core forwards as their bytes, sent below with empty bodies: one that cannot wait
#: and one that may. Taken from what no handler decodes, so handling an API changes them.
QUICK = min(key for key in range(100) if key not in {*HANDLERS, *MAY_WAIT, *REQUEST_QUOTA_EXEMPT})
WAITING = next(key for key in (JOIN_GROUP, *sorted(MAY_WAIT)) if key not in HANDLERS)
SMALL = 200  # bytes, request and response: one size class
BATCH = 16_384  # a Produce's: its records are a class of their own
REQUEST_LOG = Path(__file__).parent / "data" / "request_log.csv"


def most(bound: Bound, size: int) -> int:
    """What a round trip of `size` bytes counts at most, of a request of `bound`'s kind."""
    return bound.request_ns + size * bound.ns_per_byte


#: what a busy broker's threads spend on a small request that appends nothing
SMALL_BOUND = most(HANDLED, SMALL)


def test_a_request_is_charged_its_class_lower_quartile() -> None:
    times = ThreadTimes()
    # a class's round trips: mostly 0.2 ms, some queued behind other connections' requests
    trips = [200 * US, 9 * MS, 200 * US, 30 * MS] * 4
    charged = [times.broker("b1").charge(METADATA, SMALL, trip, False, HANDLED) for trip in trips]
    assert charged[-4:] == [200 * US] * 4
    # never more than the request's own round trip
    assert times.broker("b1").charge(METADATA, SMALL, 100 * US, False, HANDLED) == 100 * US


def test_the_quartile_follows_the_latest_round_trips() -> None:
    times = ThreadTimes()
    for _ in range(SAMPLES):
        times.broker("b1").charge(METADATA, SMALL, 200 * US, False, HANDLED)
    # the broker got slower for good: within SAMPLES requests the charge says so
    charged = [
        times.broker("b1").charge(METADATA, SMALL, 400 * US, False, HANDLED) for _ in range(SAMPLES)
    ]
    assert charged[0] == 200 * US and charged[-1] == 400 * US


def test_round_trips_count_at_most_what_a_busy_brokers_threads_spend() -> None:
    """A burst of requests from many connections: each waits for the ones ahead of it, for
    5 to 50 ms, and Kafka charges none of the wait. What each was charged is at most what a
    busy broker's threads spend on such a request, however long the burst queued."""
    times = ThreadTimes()
    trips = [5 * MS, 20 * MS, 50 * MS, 12 * MS] * 4
    charged = [times.broker("b1").charge(METADATA, SMALL, trip, False, HANDLED) for trip in trips]
    assert set(charged) == {SMALL_BOUND}
    # the bound grows with the bytes the threads decode and answer, send, or append
    assert times.broker("b1").charge(METADATA, 100_000, 80 * MS, False, HANDLED) == most(
        HANDLED, 100_000
    )
    assert times.broker("b1").charge(FETCH, 2**20, 80 * MS, False, SENT) == most(SENT, 2**20)
    # below the bound, the round trips decide
    assert times.broker("b2").charge(METADATA, SMALL, MS // 4, False, HANDLED) == (MS // 4)


def test_an_append_counts_what_its_records_may_cost() -> None:
    """What Kafka spends validating and appending records depends on their compression and
    count: a megabyte's batch may take a busy broker's thread 150 ms, and is charged so. A
    small batch queued for 20 ms, or waiting that long for followers (acks=all), is not."""
    times = ThreadTimes()
    large = [
        times.broker("b1").charge(PRODUCE, 2**20, 150 * MS, False, APPENDED) for _ in range(SAMPLES)
    ]
    assert large[-1] == 150 * MS
    small = times.broker("b1").charge(PRODUCE, SMALL, 20 * MS, False, APPENDED)
    assert small == most(APPENDED, SMALL)


def test_a_request_that_may_wait_is_charged_at_most_twice_the_dearest_that_cannot() -> None:
    times = ThreadTimes()
    times.broker("b1").charge(METADATA, SMALL, 200 * US, False, HANDLED)
    times.broker("b1").charge(HEARTBEAT + 1000, SMALL, 100 * US, False, HANDLED)
    # every JoinGroup of a large group waits for the others: its quartile is a wait
    charged = [
        times.broker("b1").charge(JOIN_GROUP, SMALL, 3000 * MS, True, HANDLED) for _ in range(8)
    ]
    assert set(charged) == {WAIT_CAP * 200 * US}
    # one that found nothing to wait for is charged its round trip
    charge = times.broker("b1").charge(END_TXN, SMALL, 100 * US, True, HANDLED)
    assert charge == 100 * US


def test_a_wait_is_capped_by_the_nearest_smaller_class_learned() -> None:
    times = ThreadTimes()
    times.broker("b1").charge(METADATA, 100, 200 * US, False, HANDLED)
    # a megabyte's long poll that waited its 500 ms: no request that size cannot wait
    assert size_class(2**20) > size_class(100)
    charge = times.broker("b1").charge(FETCH, 2**20, 500 * MS, True, SENT)
    assert charge == WAIT_CAP * 200 * US
    # before anything that cannot wait is learned, its own quartile, as a busy broker bounds it
    first = ThreadTimes().broker("b1").charge(FETCH, 2**20, 500 * MS, True, SENT)
    assert first == most(SENT, 2**20)


def test_brokers_are_learned_apart() -> None:
    times = ThreadTimes()
    for _ in range(4):
        times.broker("b1").charge(PRODUCE, SMALL, 100 * US, False, APPENDED)
    charge = times.broker("b2").charge(PRODUCE, SMALL, 300 * US, False, APPENDED)
    assert charge == 300 * US


def _request_log() -> list[dict[str, str]]:
    lines = [line for line in REQUEST_LOG.read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


@pytest.mark.parametrize(
    ("client", "round_trips", "lowest", "highest"),
    [
        # the round trips (what the proxy charged before) against what Kafka charged, then
        # the bounds the estimate keeps to
        ("classic", 34.9, 0.4, 0.6),
        ("kip848", 50.1, 0.45, 0.65),
        ("txn", 11.8, 0.4, 0.6),
        ("acks", 1.3, 0.45, 0.65),
    ],
)
def test_kafkas_own_request_log_replayed_is_charged_near_what_kafka_charged(
    client: str, round_trips: float, lowest: float, highest: float
) -> None:
    """Kafka 4.1's request log of one broker (tests/unit/quotas/data/request_log.csv): each
    request's total time as the round trip, its local and send time as what Kafka charged
    (the I/O thread's time and, at most, the network thread's). The log has no sizes, so
    every request is in one size class here but a Produce, whose records make it larger.
    The workloads ran one after another on an idle broker of one node: nothing of another
    connection queued ahead of them, and an acks=all Produce had no follower to wait for."""
    times = ThreadTimes()
    charged = kafka = total = 0.0
    for row in _request_log():
        api_key = int(row["api_key"])
        waits = api_key in MAY_WAIT or api_key == FETCH  # long polls
        size = BATCH if api_key == PRODUCE else SMALL
        round_trip = round(float(row["total"]) * MS)
        bound = ROUTES[api_key].bound
        estimate = times.broker("b1").charge(api_key, size, round_trip, waits, bound)
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
        clock.advance(50 * US)
        core.responses_received(struct.pack(">ii", 4, correlation_id))
    core.requests_received(request_frame(WAITING, 5, b"", 5))
    clock.advance(3000 * MS)
    core.responses_received(struct.pack(">ii", 4, 5))
    samples = {sample.api: sample for sample in recorder.drain(T0 + 10_000)}
    assert samples[api_name(QUICK)].request_time_ms == pytest.approx(4 * 0.05)
    assert samples[api_name(WAITING)].request_time_ms == pytest.approx(WAIT_CAP * 0.05)


def test_responses_read_at_once_share_their_round_trip() -> None:
    """A client pipelining requests gets its responses several to a read: the first's round
    trip is the time of all of them. Each is charged a fourth of it, not the first all and
    the others nothing (a quartile of mostly zeros would make every request free)."""
    recorder, clock, core, _ = connected()
    batches = 8
    for batch in range(batches):
        ids = range(batch * 4 + 1, batch * 4 + 5)
        core.requests_received(b"".join(request_frame(QUICK, 1, b"", i) for i in ids))
        clock.advance(800 * US)
        core.responses_received(b"".join(struct.pack(">ii", 4, i) for i in ids))
    [sample] = recorder.drain(T0 + 10_000)
    assert sample.requests == 4 * batches
    assert sample.request_time_ms == pytest.approx(0.8 * batches)
