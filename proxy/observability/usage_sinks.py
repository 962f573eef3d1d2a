"""Where usage samples go: JSON-lines files in a rotating directory, and a Kafka topic.

Neither may slow client traffic. Files are written from a worker thread once per sampling
interval; the Kafka producer takes samples from a bounded buffer, and a full buffer drops
samples and counts them (kafka_quota_proxy_usage_samples_dropped) rather than wait.

A file is written under a hidden name (Spark and Hadoop skip names starting with '.') and
renamed when it is rotated, so a reader only ever sees whole files.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from config.cluster import ClusterSettings
from config.secrets import SecretError
from config.usage import UsageSettings
from proxy.runtime.clock import wall_ms
from proxy.runtime.counters import ProxyStats
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.usage_samples import UsageSample

log = logging.getLogger(__name__)

_SUFFIX = ".jsonl"
#: how long the Kafka sink waits before it tries a lost cluster again
_RETRY_S = 5.0


class UsageFileSink:
    """Appends each interval's samples to the current file; a new file every rotate interval."""

    def __init__(
        self, directory: Path, instance_id: str, rotate_interval_ms: int, retention_ms: int
    ) -> None:
        self.directory = directory
        self._prefix = "usage-" + re.sub(r"[^A-Za-z0-9_.-]", "_", instance_id)
        self._rotate_interval_ms = rotate_interval_ms
        self._retention_ms = retention_ms
        self._active: Path | None = None
        self._opened_ms = 0
        directory.mkdir(parents=True, exist_ok=True)
        own = re.compile(rf"\.{re.escape(self._prefix)}-\d{{8}}T\d{{6}}-\d{{3}}{_SUFFIX}")
        for leftover in directory.iterdir():
            if own.fullmatch(leftover.name):  # a previous run's file, cut short
                self._publish(leftover)

    def write(self, samples: Sequence[UsageSample], now_ms: int) -> None:
        """Blocking file I/O: call it from a worker thread."""
        if self._active is not None and now_ms - self._opened_ms >= self._rotate_interval_ms:
            self.rotate(now_ms)
        if not samples:
            return
        if self._active is None:
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ms / 1000))
            self._active = self.directory / f".{self._prefix}-{stamp}-{now_ms % 1000:03d}{_SUFFIX}"
            self._opened_ms = now_ms
        text = "".join(sample.to_json() + "\n" for sample in samples)
        with self._active.open("a", encoding="utf-8") as out:
            out.write(text)

    def rotate(self, now_ms: int) -> None:
        """Publish the current file and delete published files past retention."""
        if self._active is not None:
            self._publish(self._active)
            self._active = None
        oldest = now_ms / 1000 - self._retention_ms / 1000
        for path in self.directory.glob(f"usage-*{_SUFFIX}"):
            try:
                if path.stat().st_mtime < oldest:
                    path.unlink()
            except FileNotFoundError:
                pass

    @staticmethod
    def _publish(path: Path) -> None:
        os.replace(path, path.with_name(path.name[1:]))


class UsageKafkaSink:
    """Produces samples to a topic through aiokafka, from a buffer of bounded length."""

    def __init__(
        self,
        bootstrap_servers: Sequence[str],
        topic: str,
        capacity: int,
        stats: ProxyStats,
        cluster: ClusterSettings | None = None,
    ) -> None:
        self.bootstrap_servers = list(bootstrap_servers)
        #: on the upstream cluster, the proxy's own client ([cluster]); None: plaintext
        self._cluster = cluster
        self.topic = topic
        self._buffer: deque[UsageSample] = deque()
        self._capacity = capacity
        self._stats = stats
        self._ready = asyncio.Event()
        #: set by a reload of the [upstream] files: the producer is made again with them
        self._renewed = asyncio.Event()

    def offer(self, samples: Sequence[UsageSample]) -> None:
        """Never waits: what does not fit in the buffer is dropped and counted."""
        room = self._capacity - len(self._buffer)
        self._buffer.extend(samples[:room])
        dropped = len(samples) - min(room, len(samples))
        if dropped > 0:
            self._stats.usage_dropped["kafka"] += dropped
        if self._buffer:
            self._ready.set()

    def renew(self, cluster: ClusterSettings) -> None:
        """A reload renewed the [cluster] files or credentials: aiokafka keeps the context
        and password it was made with for every connection it opens, so the producer is
        made again with these. A sink writing to another cluster (kafka_bootstrap_servers)
        does not use [cluster]."""
        if self._cluster is None:
            return
        self._cluster = cluster
        self._renewed.set()
        self._ready.set()

    async def run(self) -> None:
        """Produce until cancelled; a cluster that cannot be reached is tried again, while
        the buffer fills and then drops."""
        while True:
            self._renewed.clear()
            try:
                client = self._cluster.aiokafka_options() if self._cluster is not None else {}
            except SecretError as exc:
                log.warning("usage samples to Kafka topic %s: %s; retrying", self.topic, exc)
                await asyncio.sleep(_RETRY_S)
                continue
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap_servers,
                client_id="kafka-quota-proxy-usage",
                acks=1,
                linger_ms=100,
                **client,
            )
            try:
                await producer.start()
                await self._produce(producer)
            except (KafkaError, OSError) as exc:
                log.warning("usage samples to Kafka topic %s: %r; retrying", self.topic, exc)
            finally:
                await producer.stop()
            if not self._renewed.is_set():
                await asyncio.sleep(_RETRY_S)

    async def _produce(self, producer: AIOKafkaProducer) -> None:
        counts = self._stats
        while not self._renewed.is_set():
            await self._ready.wait()
            self._ready.clear()
            deliveries = []
            while self._buffer:
                sample = self._buffer[0]
                key = f"{sample.user}/{sample.client_id}".encode()
                deliveries.append(
                    await producer.send(self.topic, sample.to_json().encode(), key=key)
                )
                self._buffer.popleft()
            results = await asyncio.gather(*deliveries, return_exceptions=True)
            failed = sum(isinstance(result, BaseException) for result in results)
            counts.usage_dropped["kafka"] += failed
            counts.usage_samples["kafka"] += len(results) - failed

    async def flush(self, timeout_s: float) -> None:
        """At shutdown: give the producer a bounded time to take what is buffered."""
        deadline = time.monotonic() + timeout_s
        while self._buffer and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def abandon(self) -> None:
        """At shutdown: what is still buffered is never produced."""
        self._stats.usage_dropped["kafka"] += len(self._buffer)
        self._buffer.clear()


def instance_id(settings: UsageSettings, bootstrap_port: int) -> str:
    return settings.instance_id or f"{os.uname().nodename}:{bootstrap_port}"


async def record_usage(
    recorder: UsageRecorder,
    settings: UsageSettings,
    files: UsageFileSink | None,
    kafka: UsageKafkaSink | None,
    stats: ProxyStats,
    throttled: Callable[[], Callable[[str, str, int], int] | None] = lambda: None,
    now_ms: Callable[[], int] = wall_ms,
) -> None:
    """Close a sampling window at every multiple of the interval (so the windows of several
    proxies line up) and hand its samples to the sinks; the last window closes on cancel.
    `throttled` gives how long each principal's requests of each API were held since it
    was last called (Settlement.take_throttled)."""
    interval_ms = int(settings.interval_s * 1000)
    writing: asyncio.Future[None] | None = None
    try:
        while True:
            boundary = (now_ms() // interval_ms + 1) * interval_ms
            await asyncio.sleep(max(boundary - now_ms(), 0) / 1000)
            samples = recorder.drain(boundary, throttled())
            if kafka is not None:
                kafka.offer(samples)
            if files is not None:
                writing = asyncio.ensure_future(asyncio.to_thread(_write, files, samples, stats))
                await asyncio.shield(writing)
    finally:
        if writing is not None and not writing.done():
            await asyncio.wait([writing])  # the worker thread goes on regardless: let it end
        now = now_ms()
        samples = recorder.drain(now, throttled())
        if files is not None:
            _write(files, samples, stats)
            files.rotate(now)
        if kafka is not None:
            kafka.offer(samples)


def _write(files: UsageFileSink, samples: list[UsageSample], stats: ProxyStats) -> None:
    try:
        files.write(samples, wall_ms())
    except OSError as exc:
        stats.usage_dropped["file"] += len(samples)
        log.error("usage samples not written to %s: %s", files.directory, exc)
    else:
        stats.usage_samples["file"] += len(samples)
