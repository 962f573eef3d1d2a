"""`kafka-quota-proxy top` with 10,000 active principals: first screen, refresh, memory.

    python -m bench.top_view [--principals 10000] [--proxies 3] [--windows 3]
    python -m bench.top_view --screenshot docs/top-example.svg

The real screen (proxy/top/screen.py, headless through Textual's test pilot) on a feed
that hands it what the usage topic would, as JSON records a fetch of about 2 MB at a time:
every principal's samples (Produce and Fetch) from each proxy, a tenth of the principals
over their quota. At the start, `--windows` windows of backlog (what top reads back);
then a window spread over ten refreshes (samples every 10 s, the screen every second).
Prints the time to the first screen drawn with rows, to the backlog read, each steady
refresh's time (decoding, ranking every principal, drawing the first rows), and what the
view of one whole window holds (Python's allocations, tracemalloc, measured apart since it
slows every allocation). `--screenshot` draws a small fleet's
screen as an SVG: the picture in docs/monitoring.md.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from config.cluster import ClusterSettings
from protocol.fleet_records import Publication
from proxy.top.feed import LiveFeed, Update
from proxy.top.screen import TopApp
from proxy.top.view import LiveView, Measure
from quotas.entities import DEFAULT, KAFKA_QUOTA_TYPES, QuotaEntity
from quotas.store import FILE, QuotaStore
from quotas.usage_samples import SCHEMA_VERSION, UsageSample

WINDOW_MS = 10_000
QUOTA = 1_048_576.0
#: records per poll at most, as a consumer's fetch of about 2 MB of samples returns them
BATCH = 5_000
#: the usage samples' interval, and top's refresh: a window arrives over this many refreshes
REFRESHES_PER_WINDOW = 10


class SyntheticFeed(LiveFeed):
    """A fleet's usage topic, made up: each poll is the next window of every proxy, as the
    JSON records the topic holds (made before the clock starts), decoded as the real feed
    decodes them."""

    def __init__(self, principals: int, proxies: int, windows: int, seed: int = 7) -> None:
        store = QuotaStore()
        store.replace(
            FILE,
            {
                QuotaEntity(client_id=DEFAULT): {"producer_byte_rate": QUOTA},
                QuotaEntity(client_id="orders-flood"): {"producer_byte_rate": QUOTA / 4},
                QuotaEntity(topic="clicks"): {"producer_byte_rate": QUOTA},
                QuotaEntity(topic=DEFAULT): {"producer_byte_rate": 4 * QUOTA},
            },
        )
        super().__init__(ClusterSettings(), [], "usage", "quotas", "fleet", store)
        names = [f"proxy-{index}:9192/w0/{100 + index}" for index in range(proxies)]
        rng = random.Random(seed)
        # the backlog's last window ends now: made from one reading of the clock, so no
        # window is a span old within the run, however close to a multiple of the interval
        # it starts (windows on multiples of it went stale in the first second about 1 run in 7)
        now_ms = int(time.time() * 1000)
        self.records = [
            sample.to_json().encode()
            for w in range(windows)
            for sample in _window(rng, principals, names, now_ms + (w - windows + 1) * WINDOW_MS)
        ]
        #: how many records have arrived on the topic and not been read yet
        self.arrived = len(self.records)
        # the fleet's bus: each member publishes every 250 ms the bytes two topics under a
        # quota took since its last publication
        self.members = names
        self.topic_rates = {"clicks": QUOTA * 1.3 / proxies, "orders": QUOTA * 0.4 / proxies}
        self.published_at: float | None = None

    async def start(self, since_ms: int) -> None:
        return None

    async def poll(self, timeout_ms: int) -> Update:
        """What a consumer's getmany returns: up to a fetch of what has arrived."""
        count = min(BATCH, self.arrived)
        records, self.records = self.records[:count], self.records[count:]
        self.arrived -= count
        publications = []
        now = time.monotonic()
        if self.published_at is None or now - self.published_at >= 0.25:
            elapsed = 0.0 if self.published_at is None else now - self.published_at
            self.published_at = now
            produce = len(KAFKA_QUOTA_TYPES)
            uses = [
                (produce, topic, "", rate * elapsed) for topic, rate in self.topic_rates.items()
            ]
            publications = [Publication(name, 0, 0, uses, {}) for name in self.members]
        return Update(
            samples=[UsageSample.from_json(record) for record in records],
            publications=publications,
        )

    async def close(self) -> None:
        return None


def _window(
    rng: random.Random, principals: int, proxies: list[str], start: int
) -> list[UsageSample]:
    """Every principal's Produce and Fetch on every proxy in the window from `start`; a
    tenth held at their produce quota for 30 to 70 % of the window."""
    samples = []
    for index in range(principals):
        client_id = "orders-flood" if index == 0 else f"app-{index:05d}"
        hot = index % 10 == 0
        address = f"10.0.{index // 250}.{index % 250}"
        for proxy in proxies:
            # bytes over the 10 s window: about the quota's rate, held, or up to 0.3 of it
            produced = int((rng.uniform(0.97, 1.06) if hot else rng.uniform(0.0, 0.3)) * QUOTA * 10)
            if index == 0:  # orders-flood, under a quarter of the quota
                produced //= 4
            throttled = hot
            held = int(rng.uniform(0.3, 0.7) * WINDOW_MS) if hot else 0
            samples.append(
                UsageSample(
                    SCHEMA_VERSION, proxy, start, WINDOW_MS, "ANONYMOUS", client_id, 0,
                    "Produce", 200, produced // len(proxies), 9000, 120.0,
                    800 if throttled else 0, 4 if throttled else 0, 0, 0, 0, 0, address, 2,
                    held, 0,
                )
            )  # fmt: skip
            samples.append(
                UsageSample(
                    SCHEMA_VERSION, proxy, start, WINDOW_MS, "ANONYMOUS", client_id, 1,
                    "Fetch", 50, 4000, produced // 2, 60.0, 0, 0, 0, 0, 0, 0, address, 2, 0, 0,
                )
            )  # fmt: skip
    return samples


def _args(sort: str = "produce") -> argparse.Namespace:
    return argparse.Namespace(sort=sort, filter="")


async def measure(principals: int, proxies: int, windows: int) -> None:
    """`windows` windows of backlog (what top reads back at its start), then steady state."""
    feed = SyntheticFeed(principals, proxies, windows + 1)
    per_window = principals * proxies * 2
    backlog = feed.arrived = len(feed.records) - per_window
    window = feed.records[-per_window:]
    started = time.perf_counter()
    app = TopApp(feed, _args(), refresh_s=3600.0)  # the bench refreshes, not a timer
    async with app.run_test(size=(180, 50)) as pilot:
        while not app.shown:  # refreshed as the screen's timer would, each a fetch or more
            await app.refresh_view()
            # a refresh asked for while the mount's first one runs returns at once: yield
            # to it, or this loop starves it
            await pilot.pause(0.001)
            if time.perf_counter() - started > 60:
                raise RuntimeError("no row drawn in 60 s")
        first = time.perf_counter() - started
        while feed.arrived:  # the backlog, a fetch at a time
            await app.refresh_view()
        caught_up = time.perf_counter() - started
        # steady: the next window arrives over REFRESHES_PER_WINDOW refreshes
        times = []
        while feed.records:
            feed.arrived = min(len(feed.records), -(-per_window // REFRESHES_PER_WINDOW))
            began = time.perf_counter()
            await app.refresh_view()
            await pilot.pause()
            times.append(time.perf_counter() - began)
    # memory apart, since tracemalloc slows every allocation: a view of one whole window
    tracemalloc.start()
    view = LiveView()
    view.add(UsageSample.from_json(record) for record in window)
    view.rows(Measure.PRODUCE)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"{principals:,} principals on {proxies} proxies ({per_window:,} samples a window):"
        f" first screen {first:.2f} s; {backlog:,} samples of backlog read in {caught_up:.2f} s;"
        f" a refresh with a tenth of a window (the 10 s interval, refreshed every second):"
        f" median {statistics.median(times):.3f} s, max {max(times):.3f} s; the view of a"
        f" window holds {held / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB)"
    )


async def screenshot(path: Path) -> None:
    feed = SyntheticFeed(40, 2, 1)
    app = TopApp(feed, _args())
    async with app.run_test(size=(150, 32)) as pilot:
        while not app.shown:
            await pilot.pause(0.01)
        for _ in range(4):  # a second of the bus, refreshed as the screen's timer would
            await pilot.pause(0.3)
            await app.refresh_view()
        app.save_screenshot(path.name, str(path.parent))
    print(f"drew {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.top_view", description=__doc__)
    parser.add_argument("--principals", type=int, default=10_000)
    parser.add_argument("--proxies", type=int, default=3)
    parser.add_argument(
        "--windows", type=int, default=2, help="windows of backlog at start (top reads 20 s)"
    )
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args(argv)
    if args.screenshot is not None:
        asyncio.run(screenshot(args.screenshot))
        return 0
    asyncio.run(measure(args.principals, args.proxies, args.windows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
