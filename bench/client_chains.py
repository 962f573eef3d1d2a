"""franz-go's own chains under request_percentage: the broker's quota against the proxy's,
and what each request was charged against what Kafka's own request log says it cost.

Each leg has a one-broker cluster of its own with 2 x 1 s quota windows and the same quota
for users/<default>, and all legs run at once, so that each runs on a machine the others keep
busy (tests/integration/test_client_chains.py asserts the same at 20 %):
- broker: franz-go connects to its broker, which holds it to its own quota;
- proxy: franz-go connects through the proxy of this checkout, which holds it;
- with --against REV: through the proxy at REV (a git worktree), which holds it.
The proxies' brokers hold a quota the chains never reach, so that they measure them too.

Printed per chain: each leg's time and its ratio to the broker's leg. Then per API, for each
proxy's leg: the requests its broker answered, the local (request handler thread) time
Kafka's request log gave them (median and mean: a few requests that wait through a stall of
the broker weigh in the mean), and the request time the proxy charged them (its usage
samples). Last, each leg's request time in all: Kafka's quota sensor (local and network
thread time, JMX) beside the log's local time and the proxy's estimate. Run: python -m
bench.client_chains [--quota 20] [--records 30000] [--against REV]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bench.instructions import checkout
from localkafka import workloads
from localkafka.cluster import KafkaCluster
from localkafka.franz_go import CHAINS, ChainRun, run_chain
from localkafka.jars import java_command
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from protocol.client_quotas import AlterEntry
from quotas.usage_samples import UsageSample

WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
#: a broker quota the proxies' chains never reach: it makes their brokers measure them
UNREACHED = 1e6
CHAIN_TIMEOUT_S = 600.0
#: Kafka's request log: the API and the local (request handler thread) time of each request
_API = re.compile(r'"requestApiKeyName":"(\w+)"')
_LOCAL = re.compile(r'"localTimeMs":([0-9.]+)')
#: franz-go's clients name themselves kgo: the brokers' own requests (transaction markers,
#: the partitions a transactional Produce adds to its transaction since KIP-890, heartbeats)
#: and this bench's quota alterations are not the chains'
_CHAINS_CLIENT = '"clientId":"kgo"'


@dataclass
class Leg:
    name: str
    cluster: KafkaCluster
    request_log: Path
    proxy: RunningProxy | None = None
    usage: Path | None = None
    runs: dict[str, ChainRun] = field(default_factory=dict)
    #: Kafka's quota sensor for ANONYMOUS: % of a thread, once a second
    sensor: list[float] = field(default_factory=list)

    @property
    def seeds(self) -> str:
        return self.proxy.bootstrap if self.proxy is not None else self.cluster.bootstrap_servers


class Sensor:
    """Kafka's request-time sensor of users/<default> (ANONYMOUS), once a second over JMX."""

    def __init__(self, leg: Leg) -> None:
        process = leg.cluster.brokers[0].process
        assert process is not None
        script = workloads.REQUEST_QUOTA_METRICS
        self._jmx = subprocess.Popen(
            java_command(str(script), [str(process.pid), "1000", "100000"], heap="128m"),
            stdout=subprocess.PIPE,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, args=(leg,), daemon=True)
        self._thread.start()

    def _read(self, leg: Leg) -> None:
        assert self._jmx.stdout is not None
        for line in self._jmx.stdout:
            fields = line.split()
            if len(fields) == 5 and fields[1:3] == ["ANONYMOUS", "-"] and fields[3] != "NaN":
                leg.sensor.append(float(fields[3]))

    def stop(self) -> None:
        self._jmx.kill()
        self._jmx.wait()
        self._thread.join(5)


def kafka_local_ms(request_log: Path) -> dict[str, list[float]]:
    """Each API's local times (ms) in a broker's request log, the chains' requests only."""
    local: dict[str, list[float]] = defaultdict(list)
    with request_log.open(errors="replace") as lines:
        for line in lines:
            api, ms = _API.search(line), _LOCAL.search(line)
            if api is None or ms is None or _CHAINS_CLIENT not in line:
                continue
            local[api.group(1)].append(float(ms.group(1)))
    return local


def charged_ms(usage: Path) -> dict[str, tuple[int, float]]:
    """Each API's requests and request time (ms) in a proxy's usage samples."""
    charged: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for path in [*usage.glob("*.jsonl"), *usage.glob(".*.jsonl")]:
        for line in path.read_text().splitlines():
            sample = UsageSample.from_json(line)
            row = charged[_kafka_name(sample.api)]
            row[0] += sample.requests
            row[1] += sample.request_time_ms
    return {api: (int(count), ms) for api, (count, ms) in charged.items()}


def _kafka_name(api: str) -> str:
    """ApiVersions as the request log names it: API_VERSIONS."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", api).upper()


@dataclass
class Setup:
    quota: float
    records: int
    against: str | None
    work: Path
    legs: list[Leg] = field(default_factory=list)


def start(setup: Setup, stack: ExitStack) -> None:
    names = ["broker", "proxy"] + ([f"at {setup.against}"] if setup.against else [])
    # Kafka's request logs in memory, off the brokers' data disks
    shm = Path(tempfile.mkdtemp(prefix="kqp-chains-", dir="/dev/shm"))
    stack.callback(shutil.rmtree, shm)
    clusters = [
        KafkaCluster(
            workdir=setup.work / f"kafka-{index}",
            overrides=WINDOWS,
            request_log=str(shm / f"requests-{index}.log"),
        )
        for index in range(len(names))
    ]
    for cluster in clusters:
        stack.callback(cluster.stop)
    with ThreadPoolExecutor(len(clusters)) as pool:
        list(pool.map(KafkaCluster.start, clusters))
    config = f'{SHORT_QUOTA_WINDOWS}\n[users."<default>"]\nrequest_percentage = {setup.quota}\n'
    for index, (name, cluster) in enumerate(zip(names, clusters, strict=True)):
        leg = Leg(name, cluster, shm / f"requests-{index}.log")
        quota = setup.quota if name == "broker" else UNREACHED
        entry = AlterEntry([("user", None)], [("request_percentage", quota)])
        workloads.alter_client_quotas(cluster.bootstrap_servers, [entry])
        if name != "broker":
            tree = stack.enter_context(checkout(None if name == "proxy" else setup.against))
            directory = setup.work / f"proxy-{index}"
            directory.mkdir()
            leg.usage = directory / "usage-samples"
            leg.proxy = start_proxy(
                directory,
                cluster.bootstrap_servers,
                1,
                config,
                env={"PYTHONPATH": str(tree)},
            )
            stack.callback(leg.proxy.stop)
        setup.legs.append(leg)


def run_chains(setup: Setup) -> None:
    sensors = [Sensor(leg) for leg in setup.legs]
    try:
        for chain in CHAINS:
            with ThreadPoolExecutor(len(setup.legs)) as pool:
                runs = {
                    leg.name: pool.submit(
                        run_chain, chain, leg.seeds, setup.records, CHAIN_TIMEOUT_S
                    )
                    for leg in setup.legs
                }
                for leg in setup.legs:
                    leg.runs[chain] = runs[leg.name].result()
            print(f"{chain} done", flush=True)
    finally:
        for sensor in sensors:
            sensor.stop()


def report(setup: Setup) -> Iterator[str]:
    broker = setup.legs[0]
    yield "| chain | " + " | ".join(f"{leg.name}'s quota" for leg in setup.legs) + " |"
    yield "|---" * (len(setup.legs) + 1) + "|"
    for chain in CHAINS:
        reference = broker.runs[chain].seconds
        cells = []
        for leg in setup.legs:
            run = leg.runs[chain]
            cell = f"{run.seconds:.1f} s ({run.seconds / reference:.2f} x)"
            cells.append(cell if run.passed else f"{cell}, failed")
        yield f"| {chain} | " + " | ".join(cells) + " |"
    for leg in setup.legs[1:]:
        assert leg.proxy is not None and leg.usage is not None
        leg.proxy.stop()  # its last usage samples are written as it drains
        local = kafka_local_ms(leg.request_log)
        charged = charged_ms(leg.usage)
        all_local = sum(sum(times) for times in local.values())
        all_charged = sum(ms for _, ms in charged.values())
        yield ""
        yield f"Requests through the proxy of {leg.name}'s leg, ms per request:"
        yield ""
        yield (
            "| API | requests | Kafka's local time, median | mean | share | proxy's charge"
            " | share | charge / median | charge / mean |"
        )
        yield "|---|---|---|---|---|---|---|---|---|"
        for api in sorted(local, key=lambda api: -sum(local[api])):
            times = local[api]
            count, ms = charged.get(api, (0, 0.0))
            median, mean = statistics.median(times), statistics.fmean(times)
            charge = ms / count if count else 0.0
            yield (
                f"| {api} | {len(times):,} | {median:.3f} | {mean:.3f}"
                f" | {sum(times) / all_local:.1%} | {charge:.3f} | {ms / all_charged:.1%}"
                f" | {charge / median if median else float('inf'):.2f} | {charge / mean:.2f} |"
            )
        sensor_s = sum(leg.sensor) / 100
        yield ""
        yield (
            f"In all: Kafka's quota sensor {sensor_s:.1f} s of a thread, its request log's"
            f" local time {all_local / 1000:.1f} s, the proxy's estimate {all_charged / 1000:.1f} s"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_chains", description=__doc__)
    parser.add_argument("--quota", type=float, default=20.0)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--against", metavar="REV", help="a third leg: the proxy at REV")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="client-chains-") as work, ExitStack() as stack:
        setup = Setup(args.quota, args.records, args.against, Path(work))
        start(setup, stack)
        run_chains(setup)
        print("\n".join(report(setup)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
