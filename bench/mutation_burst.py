"""Does a burst of CreateTopics from one principal delay another principal's Produce?

One principal (client-id "burst", controller_mutation_rate = 2) writes 1,000 CreateTopics
requests of one single-partition topic each, all at once, on one connection through the
proxy. Meanwhile another principal sends Produce requests (acks=1, one 100-byte record) one
at a time on its own connection. The producer's round trips are measured before the burst
and during it, in one run; the output is p50 / p99 of each and how many topics the burst got
created. Bounded: the burst gives up after --seconds.
"""

from __future__ import annotations

import argparse
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

from bench.latency import TOPIC, RawClient, _bodies, percentile
from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import start_proxy
from protocol.apis import CREATE_TOPICS, PRODUCE
from protocol.headers import encode_request, response_body_offset

_INT32 = struct.Struct(">i")
CONFIG = (
    "[broker]\ncontroller.quota.window.num = 10\ncontroller.quota.window.size.seconds = 1\n"
    '[clients."burst"]\ncontroller_mutation_rate = 2\n'
)


def _create_topic_frame(index: int) -> bytes:
    topic = CreateTopicsRequest.CreatableTopic
    msg = CreateTopicsRequest(
        version=7,
        topics=[
            topic(
                name=f"burst-{index}",
                num_partitions=1,
                replication_factor=1,
                assignments=[],
                configs=[],
            )
        ],
        timeout_ms=30000,
        validate_only=False,
    )
    return encode_request(CREATE_TOPICS, 7, index, "burst", bytes(msg.encode(version=7)))


def burst(address: str, requests: int, seconds: float, created: list[int]) -> None:
    """Write every request at once, then read the answers (until the deadline)."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + seconds
    with socket.create_connection((host, int(port)), timeout=seconds) as sock:
        sender = threading.Thread(
            target=sock.sendall,
            args=(b"".join(_create_topic_frame(i) for i in range(1, requests + 1)),),
            daemon=True,
        )
        sender.start()
        buffer = bytearray()
        answered = 0
        while answered < requests and time.monotonic() < deadline:
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                break
            if not chunk:
                break
            buffer += chunk
            while len(buffer) >= 4 and len(buffer) >= 4 + _INT32.unpack_from(buffer)[0]:
                size = _INT32.unpack_from(buffer)[0]
                frame = bytes(buffer[: 4 + size])
                del buffer[: 4 + size]
                offset = response_body_offset(frame, CREATE_TOPICS, 7)
                msg = CreateTopicsResponse.decode(memoryview(frame)[offset:], version=7)
                created[0] += sum(1 for t in msg.topics if t.error_code == 0)
                answered += 1
        created[1] = answered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mutation_burst", description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--quiet-seconds", type=float, default=10.0, help="before and after")
    args = parser.parse_args(argv)
    cluster = KafkaCluster(brokers_count=1).start()
    try:
        cluster.create_topic(TOPIC, partitions=1)
        with tempfile.TemporaryDirectory() as tmp:
            proxy = start_proxy(Path(tmp), cluster.bootstrap_servers, 1, CONFIG)
            try:
                producer = RawClient(proxy.broker_address(1))
                api_key, version, body = _bodies()["Produce v9 acks=1"]
                assert api_key == PRODUCE
                for _ in range(5000):  # warm up: the broker's JIT, the proxy's caches
                    producer.round_trip_ns(api_key, version, body)

                def quiet() -> list[int]:
                    until = time.monotonic() + args.quiet_seconds
                    samples = []
                    while time.monotonic() < until:
                        samples.append(producer.round_trip_ns(api_key, version, body))
                    return samples

                before = quiet()
                created = [0, 0]
                burster = threading.Thread(
                    target=burst,
                    args=(proxy.bootstrap, args.requests, args.seconds, created),
                )
                burster.start()
                during = []
                while burster.is_alive():
                    during.append(producer.round_trip_ns(api_key, version, body))
                burster.join()
                after = quiet()
                producer.close()
            finally:
                proxy.stop()
    finally:
        cluster.stop()
    print(f"Produce round trip of another principal (us), {args.requests} CreateTopics in a burst")
    phases = (("before the burst", before), ("during the burst", during), ("after it", after))
    for name, samples in phases:
        print(
            f"  {name}: {len(samples)} requests, p50 {percentile(samples, 50):.0f}"
            f" / p99 {percentile(samples, 99):.0f}"
        )
    answered, made = created[1], created[0]
    print(f"  burst: {answered} answered within {args.seconds:.0f} s, {made} topics created")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
