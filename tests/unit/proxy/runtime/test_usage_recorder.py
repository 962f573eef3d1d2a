"""Usage samples: what the connection core and the handlers count, window by window, on a
virtual clock, and the file sink's rotation."""

from __future__ import annotations

import asyncio
import json
import os
import struct
from pathlib import Path

from kafka.protocol.producer import ProduceResponse

from config.usage import UsageSettings
from localkafka.inprocess.harness import RecordingTransport, VirtualClock, connect
from localkafka.inprocess.harness import handler_request as request
from localkafka.inprocess.wire import request_frame
from protocol.apis import CREATE_TOPICS, FETCH, METADATA, PRODUCE
from proxy.enforcement import Enforcement
from proxy.handlers.base import Answer, Forward
from proxy.handlers.registry import HANDLERS
from proxy.observability.usage_sinks import UsageFileSink, record_usage
from proxy.runtime.clock import wall_ms
from proxy.runtime.core import ConnectionCore
from proxy.runtime.counters import ProxyStats
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig
from quotas.thread_time import APPENDED
from quotas.usage_samples import SAMPLE_FIELDS, SCHEMA_VERSION, UsageSample
from tests.unit.proxy.handlers.test_mutations import channel as mutation_channel
from tests.unit.proxy.handlers.test_mutations import create_topics
from tests.unit.proxy.handlers.test_producer_id_handler import channel as producer_id_channel
from tests.unit.proxy.handlers.test_producer_id_handler import produce as produce_with_id
from tests.unit.proxy.runtime.test_connection_order import produce

MS = 1_000_000
US = 1_000
OTHER_API = 7  # forwarded as bytes
T0 = 1_700_000_000_000  # the recorder's wall clock, ms


def produce_response(correlation_id: int) -> bytes:
    body = bytes(ProduceResponse(version=3, responses=[], throttle_time_ms=0).encode(version=3))
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


def connected(
    limits: dict[QuotaType, dict[QuotaEntity, float]] | None = None,
) -> tuple[UsageRecorder, VirtualClock, ConnectionCore, RecordingTransport]:
    clock = VirtualClock()
    windows = QuotaSettings(client=MetricConfig(samples=2, window_ms=1000))
    enforcement = Enforcement(QuotaEngine(QuotaConfig(windows, limits or {})))
    recorder = UsageRecorder("proxy-1", T0)
    core, client, _ = connect(enforcement, clock, usage=recorder)
    return recorder, clock, core, client


def by_api(samples: list[UsageSample]) -> dict[str, UsageSample]:
    return {sample.api: sample for sample in samples}


def test_a_window_counts_requests_bytes_and_request_time_per_principal_and_api() -> None:
    recorder, clock, core, _ = connected()
    first, second = produce(1, 1000), request_frame(OTHER_API, 1, b"", 2)
    core.requests_received(first + second)
    clock.advance(300 * US)
    answer = produce_response(1)
    core.responses_received(answer)
    clock.advance(50 * US)
    core.responses_received(struct.pack(">ii", 4, 2))
    samples = by_api(recorder.drain(T0 + 10_000))
    produced, other = samples["Produce"], samples["ControlledShutdown"]
    assert produced == UsageSample(
        SCHEMA_VERSION, "proxy-1", T0, 10_000, "ANONYMOUS", "app", PRODUCE, "Produce",
        requests=1, bytes_in=len(first), bytes_out=len(answer), request_time_ms=0.3,
        throttle_time_ms=0, throttled_requests=0, mutations_admitted=0, mutations_rejected=0,
        producer_ids_admitted=0, producer_ids_rejected=0, client_ip="192.0.2.1",
        connections=1, held_ms=0, connections_refused=0,
    )  # fmt: skip
    # pipelined: the second waited for the first, which is not its own request time
    assert (other.requests, other.bytes_in, other.request_time_ms) == (1, len(second), 0.05)
    assert recorder.window_start_ms == T0 + 10_000


def test_a_response_after_its_window_closed_is_counted_in_the_next_one() -> None:
    recorder, clock, core, _ = connected()
    frame = produce(1, 100)
    core.requests_received(frame)
    [asked] = recorder.drain(T0 + 10_000)
    assert (asked.requests, asked.bytes_out) == (1, 0)
    clock.advance(12_000 * MS)
    response = produce_response(1)
    core.responses_received(response)
    [answered] = recorder.drain(T0 + 20_000)
    assert (answered.window_start_ms, answered.window_ms) == (T0 + 10_000, 10_000)
    # 12 s for a small batch: what a busy broker spends on one at most (quotas/thread_time.py)
    bound_ns = APPENDED.request_ns + (len(frame) + len(response)) * APPENDED.ns_per_byte
    assert (answered.requests, answered.request_time_ms) == (0, bound_ns / MS)
    assert answered.bytes_out > 0


def test_idle_counters_are_retired_and_a_late_response_goes_to_their_successor() -> None:
    recorder, _, core, _ = connected()
    core.requests_received(produce(1, 100))
    assert len(recorder.drain(T0 + 10_000)) == 1
    assert recorder.drain(T0 + 20_000) == [] and len(recorder) == 0  # idle: retired
    core.responses_received(produce_response(1))
    [late] = recorder.drain(T0 + 30_000)
    assert late.bytes_out > 0 and late.requests == 0


def test_a_throttled_produce_counts_the_throttle_its_response_carried() -> None:
    limits = {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 1000.0}}
    recorder, clock, core, client = connected(limits)
    core.requests_received(produce(1, 3000))
    clock.advance(10 * MS)
    core.responses_received(produce_response(1))
    written = client.written[-1]
    throttle = struct.unpack(">i", written[-4:])[0]
    assert throttle > 0
    [sample] = recorder.drain(T0 + 10_000)
    assert (sample.throttle_time_ms, sample.throttled_requests) == (throttle, 1)


def test_mutations_admitted_and_refused_are_counted_by_partition() -> None:
    s, handler = mutation_channel(), HANDLERS[CREATE_TOPICS]  # rate 2: a burst of 20
    counters = UsageRecorder("p", T0).counters("ANONYMOUS", "app", CREATE_TOPICS, "127.0.0.1")
    outcome = handler.on_request(
        s, request(s, create_topics(30, 4), refreshed=True, usage=counters)
    )
    assert isinstance(outcome, Forward)
    assert (counters.mutations_admitted, counters.mutations_rejected) == (30, 4)


def test_new_producer_ids_admitted_and_refused_are_counted() -> None:
    s, handler = producer_id_channel(), HANDLERS[PRODUCE]  # a bucket of 2: three pass
    counters = UsageRecorder("p", T0).counters("ANONYMOUS", "app", PRODUCE, "127.0.0.1")
    outcomes = [
        handler.on_request(s, request(s, produce_with_id(producer_id), usage=counters))
        for producer_id in (1, 2, 1, 3, 4)
    ]
    assert isinstance(outcomes[-1], Answer)
    assert (counters.producer_ids_admitted, counters.producer_ids_rejected) == (3, 1)


def test_a_sample_is_one_json_object_with_every_field_of_the_schema() -> None:
    recorder = UsageRecorder("p", T0)
    recorder.counters("alice", "app", PRODUCE, "127.0.0.1").requests += 1
    [sample] = recorder.drain(T0 + 10_000)
    line = json.loads(sample.to_json())
    assert list(line) == [name for name, _ in SAMPLE_FIELDS]
    assert line["schema"] == SCHEMA_VERSION and line["user"] == "alice"


def test_the_file_sink_publishes_whole_files_and_deletes_expired_ones(tmp_path: Path) -> None:
    sink = UsageFileSink(tmp_path, "host:9192", rotate_interval_ms=60_000, retention_ms=3_600_000)
    recorder = UsageRecorder("host:9192", T0)
    recorder.counters("alice", "app", PRODUCE, "127.0.0.1").requests += 1
    sink.write(recorder.drain(T0 + 10_000), T0 + 10_000)
    assert [p.name.startswith(".") for p in tmp_path.iterdir()] == [True]  # still open
    recorder.counters("bob", "app", PRODUCE, "127.0.0.1").requests += 1
    sink.write(recorder.drain(T0 + 70_000), T0 + 70_000)  # rotates first, then a new file
    visible = sorted(p for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert len(visible) == 1 and visible[0].name.startswith("usage-host_9192-")
    assert [json.loads(x)["user"] for x in visible[0].read_text().splitlines()] == ["alice"]
    sink.rotate(T0 + 70_000)
    assert len(list(tmp_path.iterdir())) == 2
    old = visible[0]
    stale = T0 / 1000 - 2 * 3600
    os.utime(old, (stale, stale))
    sink.rotate(T0 + 70_000)
    assert not old.exists()


def test_a_file_left_open_by_a_stopped_proxy_is_published_at_start(tmp_path: Path) -> None:
    sink = UsageFileSink(tmp_path, "p", rotate_interval_ms=60_000, retention_ms=3_600_000)
    recorder = UsageRecorder("p", T0)
    recorder.counters("alice", "app", PRODUCE, "127.0.0.1").requests += 1
    sink.write(recorder.drain(T0 + 10_000), T0 + 10_000)
    UsageFileSink(tmp_path, "p", rotate_interval_ms=60_000, retention_ms=3_600_000)
    assert [p.name.startswith("usage-p-") for p in tmp_path.iterdir()] == [True]


def test_another_instances_open_file_is_left_alone(tmp_path: Path) -> None:
    theirs = tmp_path / ".usage-p-2-20261123T100000-000.jsonl"
    theirs.write_text("")
    UsageFileSink(tmp_path, "p", rotate_interval_ms=60_000, retention_ms=3_600_000)
    assert theirs.exists()


async def test_windows_end_on_multiples_of_the_interval_and_the_last_closes_on_cancel(
    tmp_path: Path,
) -> None:
    """Real time, 100-ms windows: what is asserted holds however slow the machine."""
    settings = UsageSettings(interval_s=0.1, directory=str(tmp_path))
    recorder = UsageRecorder("p", wall_ms())
    sink = UsageFileSink(tmp_path, "p", rotate_interval_ms=60_000, retention_ms=3_600_000)
    stats = ProxyStats()
    task = asyncio.create_task(record_usage(recorder, settings, sink, None, stats))
    for _ in range(3):
        recorder.counters("alice", "app", PRODUCE, "127.0.0.1").requests += 1
        await asyncio.sleep(0.12)
    recorder.counters("alice", "app", PRODUCE, "127.0.0.1").requests += 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    lines = [
        json.loads(line)
        for p in tmp_path.glob("usage-*.jsonl")
        for line in p.read_text().splitlines()
    ]
    assert sum(line["requests"] for line in lines) == 4  # the last, after the cancel, too
    starts = [line["window_start_ms"] for line in lines]
    assert all(start % 100 == 0 for start in starts[1:]), starts
    assert stats.usage_samples["file"] == len(lines)
    assert not list(tmp_path.glob(".*"))  # published at the end


def test_a_principal_s_use_from_two_addresses_is_two_samples() -> None:
    recorder = UsageRecorder("p", T0)
    for address in ("10.0.0.7", "10.0.0.8", "10.0.0.8"):
        recorder.counters("alice", "app", PRODUCE, address).requests += 1
    samples = recorder.drain(T0 + 10_000)
    assert sorted((s.client_ip, s.requests) for s in samples) == [("10.0.0.7", 1), ("10.0.0.8", 2)]


def test_a_connection_is_counted_under_the_principal_of_its_latest_request() -> None:
    clock = VirtualClock()
    enforcement = Enforcement(QuotaEngine(QuotaConfig(QuotaSettings(), {})))
    recorder = UsageRecorder("proxy-1", T0)
    cores = [connect(enforcement, clock, usage=recorder)[0] for _ in range(3)]
    for core in cores:
        core.requests_received(request_frame(OTHER_API, 1, b"", 1, client_id=b"app"))
    # one connection's client-id changes: it is counted under the new one, once
    cores[2].requests_received(request_frame(OTHER_API, 1, b"", 2, client_id=b"batch"))
    cores[2].requests_received(request_frame(OTHER_API, 1, b"", 3, client_id=b"batch"))
    counted = {s.client_id: s.connections for s in recorder.drain(T0 + 10_000)}
    assert counted == {"app": 2, "batch": 1}
    cores[0].close()
    cores[2].close()
    for core in cores:
        core.requests_received(request_frame(OTHER_API, 1, b"", 4, client_id=b"app"))
    # a closed connection reads nothing more and is no longer counted
    counted = {s.client_id: s.connections for s in recorder.drain(T0 + 20_000)}
    assert counted == {"app": 1}


def throttled_producer() -> tuple[Enforcement, UsageRecorder, VirtualClock, int]:
    """A producer over its quota, its Produce throttled: the enforcement, its usage
    recorder, the clock once the response went out (10 ms after the request), and the
    throttle the response carried."""
    limits = {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 1000.0}}
    clock = VirtualClock()
    windows = QuotaSettings(client=MetricConfig(samples=2, window_ms=1000))
    enforcement = Enforcement(QuotaEngine(QuotaConfig(windows, limits)))
    recorder = UsageRecorder("proxy-1", T0)
    core, client, _ = connect(enforcement, clock, usage=recorder)
    core.requests_received(produce(1, 3000))
    clock.advance(10 * MS)
    core.responses_received(produce_response(1))
    throttle = struct.unpack(">i", client.written[-1][-4:])[0]
    assert throttle > 100
    return enforcement, recorder, clock, throttle


def test_a_throttled_principal_s_samples_say_how_long_it_was_throttled() -> None:
    """The union of its throttles, however many requests carried them: what `top` divides
    its use by to tell what it asks for."""
    enforcement, recorder, clock, throttle = throttled_producer()
    settlement = enforcement.settlement
    clock.advance((throttle + 100) * MS)
    [sample] = recorder.drain(T0 + 10_000, settlement.take_throttled(clock.now_ms()))
    # decided when the request was read and again when its response went out: once
    assert sample.held_ms == throttle + 10
    assert settlement.take_throttled(clock.now_ms()) is None  # nobody held since


def test_a_hold_past_the_windows_end_counts_in_the_next_window() -> None:
    enforcement, _, clock, throttle = throttled_producer()
    settlement = enforcement.settlement
    half = throttle // 2
    clock.advance(half * MS)
    held = settlement.take_throttled(clock.now_ms())
    assert held is not None and held("ANONYMOUS", "app", PRODUCE) == 10 + half
    clock.advance(throttle * MS)
    rest = settlement.take_throttled(clock.now_ms())
    assert rest is not None and rest("ANONYMOUS", "app", PRODUCE) == throttle - half


def test_held_time_survives_a_change_of_limits_and_is_the_apis_that_were_held() -> None:
    """A change of limits rebuilds the clients' sensor lookups: the held time is kept by
    the sensor's metric tags. Its Fetch and Metadata requests, which no Produce quota
    holds, were not held."""
    enforcement, _, clock, throttle = throttled_producer()
    enforcement.apply_limits({QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 1000.0}})
    clock.advance((throttle + 100) * MS)
    held = enforcement.settlement.take_throttled(clock.now_ms())
    assert held is not None
    assert [held("ANONYMOUS", "app", api) for api in (PRODUCE, FETCH, METADATA)] == [
        throttle + 10, 0, 0,
    ]  # fmt: skip
