"""What a broker took, read at the broker: its topics' log bytes, as DescribeLogDirs gives
them, sampled over time. A proxy's own counters say what it let through; these say what
arrived, which is what a ceiling is for."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence

from config.cluster import ClusterSettings
from protocol.log_dirs import DESCRIBE_LOG_DIRS, VOLUME_VERSION, describe_body, read_log_dirs
from proxy.control.cluster import ClusterClient


async def log_bytes(address: str, topics: Collection[str]) -> int:
    """The bytes of the topics' logs on the broker at `address`, as it describes them."""
    host, _, port = address.rpartition(":")
    async with ClusterClient(ClusterSettings(), [(host, int(port))], 10.0) as client:
        frame = await client.ask(DESCRIBE_LOG_DIRS, VOLUME_VERSION, describe_body())
    error, dirs = read_log_dirs(frame)
    if error:
        raise RuntimeError(f"{address} answered DescribeLogDirs with error {error}")
    return sum(size for d in dirs for (name, _), size in d.partitions.items() if name in topics)


async def watch_logs(
    addresses: Sequence[str], topics: Collection[str], seconds: float
) -> list[tuple[float, int]]:
    """(monotonic time, the topics' log bytes on every broker of `addresses` together) every
    half second for `seconds`."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sizes = await asyncio.gather(*(log_bytes(address, topics) for address in addresses))
        samples.append((time.monotonic(), sum(sizes)))
        await asyncio.sleep(0.5)
    return samples


def window_rates(samples: list[tuple[float, int]], start: float, span_s: float) -> list[float]:
    """The logs' growth per second over every span_s window that starts at `start` or later."""
    rates = []
    for i, (at, size) in enumerate(samples):
        if at < start:
            continue
        later = [(t, s) for t, s in samples[i:] if t - at >= span_s]
        if later:
            end_at, end_size = later[0]
            rates.append((end_size - size) / (end_at - at))
    return rates
