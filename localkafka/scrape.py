"""Reading the proxy's Prometheus endpoint the way a Prometheus server would."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of a metric over every label set that includes `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, label_set), v in samples.items() if n == name and wanted <= label_set)


async def wait_for_metric(
    url: str, accept: Callable[[Samples], bool], timeout_s: float = 15.0
) -> Samples:
    """Scrape until `accept` holds; bounded, and failing with the last scrape."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = await asyncio.to_thread(scrape, url)
        if accept(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"metric condition not met within {timeout_s}s: {samples}")
        await asyncio.sleep(0.1)


async def sample_shares(
    url: str, clients: tuple[str, ...], seconds: float
) -> dict[str, list[float]]:
    """kafka_server_request_request_time (% of a thread) of each client-id, once a second."""
    shares: dict[str, list[float]] = {client: [] for client in clients}
    for _ in range(int(seconds)):
        await asyncio.sleep(1)
        samples = await asyncio.to_thread(scrape, url)
        for client in clients:
            share = value(samples, "kafka_server_request_request_time", user="", client_id=client)
            assert share is not None, client
            shares[client].append(share)
    return shares
