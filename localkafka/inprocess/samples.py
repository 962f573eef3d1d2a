"""Usage samples made up for the pipeline's tests and benchmark, in the proxy's own schema."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from protocol.apis import api_name
from quotas.usage_samples import SCHEMA_VERSION, UsageSample

#: a Tuesday, 00:00 UTC, in ms: generated windows start on multiples of the interval
T0 = 1_763_424_000_000
INTERVAL_MS = 10_000


def sample(
    user: str,
    client_id: str,
    api_key: int,
    window: int,
    *,
    proxy: str = "proxy-1",
    window_ms: int = INTERVAL_MS,
    schema: int = SCHEMA_VERSION,
    requests: int = 1,
    bytes_in: int = 0,
    bytes_out: int = 0,
    request_time_ms: float = 0.0,
    throttle_time_ms: int = 0,
    throttled_requests: int = 0,
    mutations_admitted: int = 0,
    mutations_rejected: int = 0,
    producer_ids_admitted: int = 0,
    producer_ids_rejected: int = 0,
    client_ip: str = "127.0.0.1",
    connections: int = 1,
    held_ms: int = 0,
    connections_refused: int = 0,
) -> UsageSample:
    """The sample of the `window`-th sampling window after T0."""
    return UsageSample(
        schema, proxy, T0 + window * INTERVAL_MS, window_ms, user, client_id, api_key,
        api_name(api_key), requests, bytes_in, bytes_out, request_time_ms, throttle_time_ms,
        throttled_requests, mutations_admitted, mutations_rejected, producer_ids_admitted,
        producer_ids_rejected, client_ip, connections, held_ms, connections_refused,
    )  # fmt: skip


def write(path: Path, samples: list[UsageSample]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(s.to_json() + "\n" for s in samples))
    return path


def day_of_principals(
    principals: int, windows: int, fetchers: int, seed: int = 7
) -> Iterator[UsageSample]:
    """A fleet's day: every principal produces at a rate of its own, with noise and now and
    then a burst, and the first `fetchers` also consume: a Produce sample per principal and
    window, and a Fetch sample per fetcher and window."""
    rng = random.Random(seed)
    rates = [rng.lognormvariate(11, 1.5) for _ in range(principals)]
    for window in range(windows):
        for index, rate in enumerate(rates):
            burst = 4.0 if rng.random() < 0.002 else 1.0
            volume = int(rate * burst * rng.uniform(0.5, 1.5) * INTERVAL_MS / 1000)
            user, client_id = f"tenant-{index % 250}", f"app-{index}"
            yield sample(
                user, client_id, 0, window, requests=20, bytes_in=volume, bytes_out=200,
                request_time_ms=rng.uniform(5, 50),
            )  # fmt: skip
            if index < fetchers:
                yield sample(
                    user, client_id, 1, window, requests=40, bytes_in=300, bytes_out=2 * volume,
                    request_time_ms=rng.uniform(5, 50),
                )  # fmt: skip
