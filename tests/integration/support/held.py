"""One scenario, run through one instance (test_principal_hold.py), a fleet of three
(test_fleet.py) and one instance of two workers (test_workers.py): librdkafka processes that
share one client-id flood a topic of six partitions on three brokers, with producer_byte_rate
set for their client-id, while a neighbour produces beside them.

The bound, over the 20 s after the first window at 1 MB/s. Issue 27 and 38 were shown over
30 s (their figures are in docs/performance.md and docs/topic-quotas.md); 20 s keeps the bound's
reasoning and takes six tests 10 s less each, for the suite's budget. Greedy clients fill
the quota windows (2 x 1 s) in the first window, which is not measured, and keep them full:
from then on Kafka's arithmetic admits the quota, and what is over it is what the processes
hold unacknowledged at the edges of the 20 s (3 x IN_FLIGHT records of 1 kB: 3 %) plus a
fleet's own error (at most 2.5 % at the default 250 ms sync:
tests/unit/proxy/enforcement/test_fleet.py): 1.10 x leaves room for a request or two more. With
1000 records
in flight per process the edges alone were worth 10 %, and a loaded 2-core CI run measured a
fleet at 1.139 x; with 200, three runs with a core kept busy beside the test measured
1.009-1.029 x.
"""

from __future__ import annotations

import asyncio
import json
import math
import urllib.request
from collections.abc import Sequence
from typing import NamedTuple

from localkafka.cluster import KafkaCluster
from localkafka.fleet import confluent_fleet, fleet_rate, fleet_timelines
from localkafka.load import (
    Timeline,
    aiokafka_flood,
    assert_no_loss_or_duplicates,
    read_all,
    seq_of,
)
from localkafka.scrape import Samples, scrape, total, value

QUOTA = 1_000_000
FLEET, NEIGHBOUR = "fleet", "neighbour"
PROCESSES, PARTITIONS = 3, 6
IN_FLIGHT = 200
FIRST_WINDOW_S, MEASURED_S = 2.0, 20.0
BOUND = 1.10


#: the held client-id, as /explain is asked about it (no SASL: User:ANONYMOUS)
_HELD = f"user=ANONYMOUS&client_id={FLEET}"


class Watch:
    """Metrics of every instance (or worker) twice a second: Kafka's throttle-time per
    client-id, an average over the quota windows and NaN for a client never throttled, so
    no throttle is missed; in a fleet, each one's local rate of the held client-id and the
    members it counts."""

    def __init__(self, urls: Sequence[str], workers: bool = False) -> None:
        self.urls = list(urls)
        #: the i-th URL's series carry worker="i"
        self._labels = [{"worker": str(index)} if workers else {} for index in range(len(urls))]
        self.throttles: dict[str, list[float]] = {FLEET: [], NEIGHBOUR: []}
        #: per URL, the most its local rate of the held client-id reached
        self.local = [0.0] * len(urls)
        self.members: list[float] = []
        #: each round, the held client-id's fleet-wide rate as each member's /explain gives
        #: it, asked one right after the other (a member killed on purpose left out)
        self.explained: list[list[float]] = []

    async def run(self) -> None:
        while True:
            for index, url in enumerate(self.urls):
                try:
                    samples = await asyncio.to_thread(scrape, url)
                except OSError:
                    continue  # an instance killed on purpose
                self._read(samples, self._labels[index], index)
            if not any(self._labels):  # members, not the workers of one process
                self.explained.append(await asyncio.to_thread(self._explained))
            await asyncio.sleep(0.5)

    def _explained(self) -> list[float]:
        rates = []
        for url in self.urls:
            base = url.removesuffix("/metrics")
            try:
                with urllib.request.urlopen(f"{base}/explain?{_HELD}", timeout=5) as response:
                    answer = json.load(response)
            except OSError:
                continue
            produce = next(q for q in answer["quotas"] if q["key"] == "producer_byte_rate")
            rates.append(produce["live"]["rate"])
        return rates

    def _read(self, samples: Samples, labels: dict[str, str], index: int) -> None:
        for client, seen in self.throttles.items():
            throttle = value(
                samples, "kafka_server_produce_throttle_time", user="", client_id=client, **labels
            )
            if throttle is not None and not math.isnan(throttle):
                seen.append(throttle)
        local = value(
            samples,
            "kafka_quota_proxy_local_rate",
            quota="producer_byte_rate",
            user="",
            client_id=FLEET,
            **labels,
        )
        self.local[index] = max(self.local[index], local or 0.0)
        self.members.append(total(samples, "kafka_quota_proxy_fleet_members"))

    def assert_held(self) -> None:
        assert max(self.throttles[FLEET], default=0) > 0, "the held client-id was never throttled"
        assert not any(self.throttles[NEIGHBOUR]), f"the neighbour was throttled: {self.throttles}"


class Run(NamedTuple):
    timelines: list[Timeline]
    neighbour: Timeline
    #: the held client-id's acknowledged bytes per second over the measured span
    rate: float


async def run_held(
    kafka: KafkaCluster,
    bootstraps: str | Sequence[str],
    topic: str,
    neighbour_topic: str,
    neighbour_rate: float,
    watch: Watch,
) -> Run:
    """The scenario, once: the processes through `bootstraps` (one list each, dealt out),
    the neighbour through the first, the metrics watched all the while."""
    kafka.create_topic(topic, partitions=PARTITIONS)
    kafka.create_topic(neighbour_topic, partitions=1)
    seconds = FIRST_WINDOW_S + MEASURED_S
    first = bootstraps if isinstance(bootstraps, str) else bootstraps[0]
    neighbour = Timeline()
    watcher = asyncio.create_task(watch.run())
    try:
        with confluent_fleet(
            bootstraps, FLEET, topic, seconds, PROCESSES, in_flight=IN_FLIGHT
        ) as processes:
            await aiokafka_flood(
                first, NEIGHBOUR, neighbour_topic, seconds, neighbour, neighbour_rate
            )
            timelines = await asyncio.to_thread(fleet_timelines, processes, seconds + 90)
    finally:
        watcher.cancel()
    return Run(timelines, neighbour, fleet_rate(timelines, FIRST_WINDOW_S, seconds))


def assert_stored_once(kafka: KafkaCluster, topic: str, acknowledged: Sequence[Timeline]) -> None:
    """Every record the timelines acknowledged is in the topic once, and nothing else."""
    stored = [seq_of(value) for value in read_all(kafka.bootstrap_servers, topic)]
    assert_no_loss_or_duplicates([seq for t in acknowledged for seq in t.seqs], stored)
