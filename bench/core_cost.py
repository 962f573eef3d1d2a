"""The connection core's own Python cost per round trip, without sockets.

bench.latency measures what the proxy adds on the wire, which on a 2-core machine shared with
the broker swings by hundreds of microseconds; this drives the real connection core (handlers,
enforcement under quotas that never throttle, usage counting) in-process on recording
transports with one request and its response at a time, so what it prints is the Python work
of the proxy per request and nothing else. `--instructions --against REV` compares a change
with its parent in counts that do not move from run to run (bench/instructions.py).
"""

from __future__ import annotations

import argparse
import statistics
import time

from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

from bench.instructions import REPO, checkout, per_operation
from localkafka.inprocess.harness import VirtualClock, connect
from localkafka.inprocess.wire import produce_request, record_batch, request_frame, response_frame
from protocol.apis import METADATA, PRODUCE
from proxy.enforcement import Enforcement
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig

_PRODUCE_VERSION = 9
_METADATA_VERSION = 12


def _frames() -> dict[str, tuple[bytes, bytes]]:
    """(request, response) per API, as a client and a three-broker cluster send them."""
    produce = produce_request(_PRODUCE_VERSION, {0: record_batch(-1, records=8, value=b"v" * 128)})
    produced = ProduceResponse(version=_PRODUCE_VERSION, responses=[], throttle_time_ms=0)
    metadata = request_frame(METADATA, _METADATA_VERSION, b"\x01\x00\x00\x00")  # no topics
    brokers = [(node, f"broker-{node}.local", 9092, None) for node in range(3)]
    answer = MetadataResponse(
        version=_METADATA_VERSION,
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id="bench",
        controller_id=0,
        topics=[],
    )
    produce_answer = response_frame(PRODUCE, _PRODUCE_VERSION, produced, 1)
    return {
        "Produce": (produce, produce_answer),
        #: the same Produce, its topic ("orders") under a topic quota that never throttles
        _TOPIC_QUOTA: (produce, produce_answer),
        "Metadata": (metadata, response_frame(METADATA, _METADATA_VERSION, answer, 1)),
    }


_TOPIC_QUOTA = "Produce, topic quota"


def _engine(topic_quota: bool = False) -> QuotaEngine:
    every_pair = QuotaEntity(DEFAULT, DEFAULT)
    produce = {every_pair: 1e15}
    if topic_quota:
        produce[QuotaEntity(topic=DEFAULT)] = 1e15
    return QuotaEngine(
        QuotaConfig(
            limits={
                QuotaType.PRODUCE: produce,
                QuotaType.FETCH: {every_pair: 1e15},
                QuotaType.REQUEST: {every_pair: 1e9},
            }
        )
    )


def run(api: str, round_trips: int, rounds: int) -> list[float]:
    """us per round trip, one figure per round."""
    request, response = _frames()[api]
    clock = VirtualClock(10**12)
    engine = _engine(topic_quota=api == _TOPIC_QUOTA)
    core, client, upstream = connect(Enforcement(engine), clock, usage=UsageRecorder("bench", 0))
    results = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        for _ in range(round_trips):
            core.requests_received(request)
            clock.advance(50_000)
            core.responses_received(response)
        results.append((time.perf_counter_ns() - started) / round_trips / 1000)
        client.written.clear()
        upstream.written.clear()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.core_cost", description=__doc__)
    parser.add_argument("--round-trips", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per round trip with callgrind instead of timing (repeatable)",
    )
    parser.add_argument(
        "--against", metavar="REV", help="with --instructions: also at REV, and the ratio"
    )
    args = parser.parse_args(argv)
    if args.instructions:
        print("connection core, instructions per round trip (callgrind)")
        for api in _frames():
            call = f"from bench.core_cost import run\nrun({api!r}, n, 1)"
            here = per_operation(REPO, call, 1000, 5000)
            line = f"  {api:<20} {here:,.0f}"
            if args.against:
                with checkout(args.against) as tree:
                    there = per_operation(tree, call, 1000, 5000)
                line += f"  at {args.against}: {there:,.0f}  ratio {here / there:.3f}"
            print(line)
        return 0
    print(f"connection core, Python per round trip (us), {args.round_trips} per round")
    medians = {}
    for api in _frames():
        results = run(api, args.round_trips, args.rounds)
        medians[api] = statistics.median(results)
        print(
            f"  {api:<20} median {medians[api]:.2f}  best {min(results):.2f}"
            f"  rounds: {', '.join(f'{r:.2f}' for r in results)}"
        )
    produce_bytes = len(_frames()["Produce"][0])
    per_mb = {api: medians[api] * 1e6 / produce_bytes / 1000 for api in ("Produce", _TOPIC_QUOTA)}
    print(
        f"Produce handling, CPU ms per MB of requests ({produce_bytes} B each): without topic "
        f"quotas {per_mb['Produce']:.2f}, with one on its topic {per_mb[_TOPIC_QUOTA]:.2f} "
        f"(ratio {per_mb[_TOPIC_QUOTA] / per_mb['Produce']:.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
