"""KIP-936's producer-id filter: its memory, speed and false positives, and what the producer-id
step adds to the Produce path.

1. One user with producer_ids_rate = 1,000,000 an hour takes 1,000,000 distinct producer ids
   within one layer's time: the filters' bytes beside what the layer shape predicts, and
   ids admitted per second (hash, look up in every live layer, charge the bucket, add),
   and the filter's own check-and-add per second without the bucket.
2. Then 200,000 ids never added are looked up: the measured false-positive rate beside the
   configured one.
3. The Produce handler on real Produce frames (16 KiB of records), 1,000 idempotent producers
   each on its own connection taking turns, with producer_ids_rate off and on: CPU per MiB.
"""

from __future__ import annotations

import argparse
import time

from localkafka.inprocess.harness import handler_channel, handler_request, proxy_context
from localkafka.inprocess.wire import produce_request, record_batch
from protocol.apis import PRODUCE
from proxy.enforcement import Enforcement
from proxy.handlers.registry import HANDLERS
from quotas.bloom import (
    MAX_LAYER_IDS,
    BloomShape,
    LayeredBloomFilter,
    hashed,
    layer_false_positive_rate,
)
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import ProducerIdCacheSettings, QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig

HOUR_WINDOWS = MetricConfig(samples=11, window_ms=3_600_000)
FALSE_POSITIVE_RATE = 0.01
LAYERS = 4


def engine(rate: float | None) -> QuotaEngine:
    settings = QuotaSettings(
        producer_ids=HOUR_WINDOWS,
        producer_id_cache=ProducerIdCacheSettings(
            layer_count=LAYERS, false_positive_rate=FALSE_POSITIVE_RATE
        ),
    )
    limits = {} if rate is None else {QuotaType.PRODUCER_IDS: {QuotaEntity(DEFAULT): rate}}
    return QuotaEngine(QuotaConfig(settings, limits))


def filter_run(ids: int, unseen: int) -> None:
    quotas = engine(float(ids))
    manager = quotas.producer_ids
    sensors = manager.sensors_for("churner", "app", 0)
    # what the design predicts, computed apart from the filter: the first slot's layer is
    # made for a rate's worth of new ids (plus the one a strict check lets through)
    predicted = BloomShape.for_items(
        min(ids + 1, MAX_LAYER_IDS), layer_false_positive_rate(FALSE_POSITIVE_RATE, LAYERS)
    )
    started = time.perf_counter()
    for producer_id in range(ids):
        manager.admit(sensors, (producer_id,), 0)
    elapsed = time.perf_counter() - started
    filt = manager.filter_of(sensors.tags)
    assert filt is not None
    layers = list(filt.layers())
    print(f"{ids:,} distinct producer ids of one user in one window, {FALSE_POSITIVE_RATE:.0%}:")
    print(
        f"  {len(layers)} layer(s) of {', '.join(f'{c:,}' for _, c, _ in layers)} ids;"
        f" bit arrays {manager.filter_bytes() / 1e6:.2f} MB, the shape predicts"
        f" {predicted.size_bytes / 1e6:.2f} MB ({predicted.bits:,} bits, {predicted.hashes}"
        f" hashes); one Bloom filter of {ids:,} at {FALSE_POSITIVE_RATE:.0%} would be"
        f" {BloomShape.for_items(ids, FALSE_POSITIVE_RATE).size_bytes / 1e6:.2f} MB"
    )
    print(f"  admitted (check, charge the bucket, add): {ids / elapsed:,.0f} per second")
    bare = LayeredBloomFilter(HOUR_WINDOWS.window_ms, LAYERS, FALSE_POSITIVE_RATE)
    started = time.perf_counter()
    for producer_id in range(ids):
        item = hashed(producer_id)
        if not bare.seen(item, ids + 1, 0):
            bare.add(item, ids + 1, 0)
    rate = ids / (time.perf_counter() - started)
    print(f"  the filter alone (check, add): {rate:,.0f} per second")
    started = time.perf_counter()
    hits = sum(filt.contains(hashed(p)) for p in range(10**12, 10**12 + unseen))
    lookups = unseen / (time.perf_counter() - started)
    print(
        f"  false positives: {hits / unseen:.4%} of {unseen:,} unseen ids"
        f" (configured {FALSE_POSITIVE_RATE:.2%}); lookups {lookups:,.0f} per second"
    )


def worst_case_false_positives(new_ids: int, unseen: int) -> None:
    """layer_count slots of one layer each, every layer filled to its capacity (the most a
    window holds without a slot overflowing): the rate the shapes promise for the whole."""
    filt = LayeredBloomFilter(HOUR_WINDOWS.window_ms, LAYERS, FALSE_POSITIVE_RATE)
    slot_ms, next_id = HOUR_WINDOWS.window_ms // LAYERS, 0
    for slot in range(LAYERS):
        filt.add(hashed(next_id), new_ids, slot * slot_ms)
        *_, (_, _, capacity) = filt.layers()
        for producer_id in range(next_id + 1, next_id + capacity):
            filt.add(hashed(producer_id), new_ids, slot * slot_ms)
        next_id += capacity
    hits = sum(filt.contains(hashed(p)) for p in range(10**12, 10**12 + unseen))
    sizes = ", ".join(f"{count:,}" for _, count, _ in filt.layers())
    print(
        f"  every layer full ({sizes} ids): false positives {hits / unseen:.3%}"
        f" (configured {FALSE_POSITIVE_RATE:.2%})"
    )


def produce_frame(producer_id: int, correlation_id: int, record_bytes: int) -> bytes:
    batch = record_batch(producer_id, records=record_bytes // 1000, value=b"x" * 1000)
    return produce_request(9, {0: batch}, "bench", correlation_id, acks=1)


def produce_cpu(rate: float | None, requests: int, producers: int) -> float:
    """CPU seconds per MiB of Produce requests through the handler, each producer on a
    connection of its own as clients connect, the connections taking turns."""
    context = proxy_context(Enforcement(engine(rate)))
    connections = []
    for p in range(1, producers + 1):
        connections.append((handler_channel(context), produce_frame(p, p, 16 * 1024)))
    handler = HANDLERS[PRODUCE]
    total = 0
    started = time.process_time()
    for n in range(requests):
        channel, frame = connections[n % producers]
        handler.on_request(channel, handler_request(channel, frame, n // 100))
        total += len(frame)
    return (time.process_time() - started) / (total / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--unseen", type=int, default=200_000)
    parser.add_argument("--requests", type=int, default=200_000)
    args = parser.parse_args()
    filter_run(args.ids, args.unseen)
    worst_case_false_positives(10_001, args.unseen)
    off = produce_cpu(None, args.requests, 1000)
    on = produce_cpu(10_000.0, args.requests, 1000)
    print("Produce handler, 16 KiB requests, 1,000 producers on their own connections:")
    print(
        f"  CPU per MiB: {off * 1e3:.3f} ms without producer_ids_rate,"
        f" {on * 1e3:.3f} ms with it ({on / off:.2f} x)"
    )


if __name__ == "__main__":
    main()
