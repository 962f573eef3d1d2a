"""Kafka's own perf tools, direct to the broker and through the proxy, alternating in one run.

Prints records/s and MB/s for ProducerPerformance (max rate) and ConsumerPerformance, the
proxy/direct ratios, produce latency percentiles measured at a fixed, moderate rate (at max
rate latency is the producer's own queueing, which hides what the proxy adds), and the CPU
each process spent per MB moved (from /proc: the broker's, direct and proxied, and the
proxy's), so the proxy's cost reads beside the broker's own. Two proxies run side by side,
one recording usage samples (issue 14, the default) and one with [usage] enabled = false,
so the cost of sampling reads as the difference between them. With --tls the broker listens
with SSL (a throwaway CA's certificate), the proxies serve SSL and speak SSL upstream, and the
perf tools trust that CA: the cost of TLS reads beside direct TLS to the broker.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localkafka.cluster import KafkaCluster
from localkafka.load import (
    CONSUMER_PERFORMANCE,
    PRODUCER_PERFORMANCE,
    consumer_perf_args,
    producer_perf_args,
)
from localkafka.ports import LOOPBACK
from localkafka.proxy_process import RunningProxy, start_proxy, tls_sections

_PRODUCER_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


@dataclass
class ProduceResult:
    records_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float


@dataclass
class ConsumeResult:
    records_per_s: float
    mb_per_s: float


def cpu_ms(pid: int) -> float:
    """User plus system CPU time a process has used, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


def client_properties(cluster: KafkaCluster) -> list[str]:
    """The perf tools' security settings: SSL trusting the throwaway CA, or none."""
    if cluster.ca is None:
        return []
    return [
        "security.protocol=SSL",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={cluster.ca_certificate}",
    ]


def produce(
    cluster: KafkaCluster, bootstrap: str, topic: str, records: int, rate: int, linger_ms: int
) -> ProduceResult:
    out = cluster.tool(
        PRODUCER_PERFORMANCE,
        *producer_perf_args(
            topic,
            records,
            1024,
            rate,
            f"bootstrap.servers={bootstrap}",
            "acks=1",
            f"linger.ms={linger_ms}",
            *client_properties(cluster),
        ),
        timeout=600,
    )
    match = _PRODUCER_SUMMARY.search(out)
    if match is None:
        raise RuntimeError(f"unexpected ProducerPerformance output:\n{out[-2000:]}")
    g = match.groups()
    return ProduceResult(float(g[1]), float(g[2]), float(g[5]), float(g[7]), float(g[8]))


def consume(cluster: KafkaCluster, bootstrap: str, topic: str, records: int) -> ConsumeResult:
    options = ["--hide-header"]
    properties = client_properties(cluster)
    if properties:
        assert cluster.workdir is not None
        config = cluster.workdir / "consumer.properties"
        config.write_text("".join(f"{line}\n" for line in properties))
        options += ["--consumer.config", str(config)]
    out = cluster.tool(
        CONSUMER_PERFORMANCE,
        *consumer_perf_args(bootstrap, topic, records, *options),
        timeout=600,
    )
    fields = out.strip().splitlines()[-1].split(",")
    # ..., fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec: the rate without the group join
    return ConsumeResult(records_per_s=float(fields[9]), mb_per_s=float(fields[8]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--latency-rate", type=int, default=2000, help="records/s")
    parser.add_argument("--latency-records", type=int, default=20_000)
    parser.add_argument("--tls", action="store_true", help="SSL on every hop")
    args = parser.parse_args(argv)

    cluster = KafkaCluster(brokers_count=1, heap="2g", tls=args.tls).start()
    direct = cluster.brokers[0].ssl_address if args.tls else cluster.bootstrap_servers
    proxies: list[RunningProxy] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tls = ""
            if cluster.ca is not None:
                keystore = cluster.ca.server("proxy", LOOPBACK)
                tls = tls_sections(keystore, cluster.ca_certificate)
            for name, enabled in (("proxy", "false"), ("sampled", "true")):
                proxies.append(
                    start_proxy(
                        Path(tmp),
                        direct,
                        brokers=1,
                        extra=f"{tls}[usage]\nenabled = {enabled}\n",
                        name=name,
                    )
                )
            proxy, sampled = proxies
            targets = {
                "direct": direct,
                "proxy": proxy.bootstrap,
                "sampled": sampled.bootstrap,
            }
            results: dict[str, dict[str, list[object]]] = {
                mode: {"produce": [], "consume": [], "latency": []} for mode in targets
            }
            #: (mode, kind) -> [broker CPU ms, proxy CPU ms] summed over the rounds
            cpu: dict[tuple[str, str], list[float]] = {}
            assert cluster.brokers[0].process is not None
            broker = cluster.brokers[0].process.pid
            pids = {
                "direct": (broker, proxy.process.pid),
                "proxy": (broker, proxy.process.pid),
                "sampled": (broker, sampled.process.pid),
            }

            def timed_cpu(
                mode: str, kind: str, run: Callable[..., object], *args: object
            ) -> object:
                before = [cpu_ms(pid) for pid in pids[mode]]
                result = run(*args)
                spent = cpu.setdefault((mode, kind), [0.0, 0.0])
                for index, pid in enumerate(pids[mode]):
                    spent[index] += cpu_ms(pid) - before[index]
                return result

            for round_no in range(args.rounds):
                for mode, bootstrap in targets.items():
                    topic = f"bench-{mode}-{round_no}"
                    cluster.create_topic(topic, args.partitions)
                    results[mode]["produce"].append(
                        timed_cpu(
                            mode, "produce", produce, cluster, bootstrap, topic, args.records, -1, 5
                        )
                    )
                    results[mode]["consume"].append(
                        timed_cpu(mode, "consume", consume, cluster, bootstrap, topic, args.records)
                    )
                    results[mode]["latency"].append(
                        produce(
                            cluster,
                            bootstrap,
                            topic,
                            args.latency_records,
                            args.latency_rate,
                            linger_ms=0,
                        )
                    )
                    print(f"round {round_no + 1}/{args.rounds} {mode} done", flush=True)
            report(results, args)
            report_cpu(cpu, args)
    finally:
        for running in proxies:
            running.stop()
        cluster.stop()
    return 0


def report(results: dict[str, dict[str, list[object]]], args: argparse.Namespace) -> None:
    def mean(mode: str, kind: str, attr: str) -> float:
        return statistics.fmean(getattr(r, attr) for r in results[mode][kind])

    print(
        f"\n{args.records} records of 1 KiB, {args.partitions} partitions, "
        f"{args.rounds} alternating rounds (means){', SSL on every hop' if args.tls else ''}"
    )
    print("proxy: usage samples off; sampled: on (every 10 s, to files)")
    print(
        f"{'':28}{'direct':>12}{'proxy':>12}{'sampled':>12}{'proxy/direct':>14}{'sampled/direct':>16}"
    )
    for kind, attr, label in [
        ("produce", "records_per_s", "produce records/s"),
        ("produce", "mb_per_s", "produce MB/s"),
        ("consume", "records_per_s", "consume records/s"),
        ("consume", "mb_per_s", "consume MB/s"),
    ]:
        direct, proxy = mean("direct", kind, attr), mean("proxy", kind, attr)
        sampled = mean("sampled", kind, attr)
        print(
            f"{label:28}{direct:12.1f}{proxy:12.1f}{sampled:12.1f}"
            f"{proxy / direct:14.3f}{sampled / direct:16.3f}"
        )
    print(f"produce latency at {args.latency_rate} records/s:")
    for attr in ("p50_ms", "p99_ms", "p999_ms"):
        direct, proxy = mean("direct", "latency", attr), mean("proxy", "latency", attr)
        sampled = mean("sampled", "latency", attr)
        print(
            f"  {attr:26}{direct:12.1f}{proxy:12.1f}{sampled:12.1f}   added "
            f"{proxy - direct:+.1f} / {sampled - direct:+.1f} ms"
        )


def report_cpu(cpu: dict[tuple[str, str], list[float]], args: argparse.Namespace) -> None:
    megabytes = args.records * 1024 / 1e6 * args.rounds
    print(f"CPU ms per MB moved ({megabytes:.0f} MB each way, 1 KiB records):")
    for kind in ("produce", "consume"):
        broker_direct = cpu[("direct", kind)][0] / megabytes
        broker_proxied, proxy = (ms / megabytes for ms in cpu[("proxy", kind)])
        sampled = cpu[("sampled", kind)][1] / megabytes
        print(
            f"  {kind}: broker {broker_direct:.2f} direct, {broker_proxied:.2f} behind the proxy;"
            f" proxy {proxy:.2f} ({proxy / broker_direct:.2f} x the broker's own), with usage"
            f" samples {sampled:.2f} ({sampled / proxy:.3f} x without)"
        )


if __name__ == "__main__":
    sys.exit(main())
