"""The cost of one quota decision, as the proxy makes it for every answered request.

One decision is what the proxy does for a request: for a Produce, the producer_byte_rate charge
when it is read, and when it is answered the request time estimated from its round trip
(quotas/thread_time.py) and settled (the connection's sensors for the principal, record the
bytes and the request time, check both against their quotas); a Fetch charges its response
bytes and settles; a Metadata settles its request time alone.
Connections of distinct (user, client-id) principals are live, each with its own sensors and
its own kept Principal, and requests arrive in a shuffled order. It runs twice: with 100
principals, whose sensors stay in the CPU's caches, and with 10,000, whose sensors mostly do
not (each decision then waits on memory for a few dozen objects, which no arithmetic
saving removes). Target (issue 10): a median under 2 us.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench.instructions import REPO, checkout, per_operation
from localkafka.inprocess.wire import request_frame
from protocol.apis import FETCH, METADATA, PRODUCE
from protocol.headers import parse_request_header
from proxy.enforcement import Enforcement
from proxy.handlers.base import Request
from proxy.handlers.registry import ROUTES
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig
from quotas.thread_time import ThreadTimes

TARGET_US = 2.0


def build_engine() -> QuotaEngine:
    every_pair = QuotaEntity(DEFAULT, DEFAULT)
    return QuotaEngine(
        QuotaConfig(
            limits={
                QuotaType.PRODUCE: {every_pair: 1_048_576.0, QuotaEntity("user-7"): 10.0},
                QuotaType.FETCH: {every_pair: 2_097_152.0},
                QuotaType.REQUEST: {every_pair: 25.0},
            }
        )
    )


def run(principals: int, decisions: int, rounds: int) -> list[float]:
    engine = build_engine()
    enforcement = Enforcement(engine)
    sensors, settlement = enforcement.sensors, enforcement.settlement
    costs = ThreadTimes().broker("broker-1")
    apis = [PRODUCE, PRODUCE, FETCH, METADATA]
    connections = []
    for i in range(principals):
        user, client_id = f"user-{i}", f"client-{i % 97}"
        principal = sensors.principal(None, user, client_id)
        requests = []
        for api_key in apis:  # the connection's request of each API, as the core reads it
            frame = request_frame(api_key, 0, b"", client_id=client_id.encode())
            header = parse_request_header(frame)
            requests.append(Request(frame, header, ROUTES[api_key], principal, 0))
        connections.append((user, client_id, requests))
    now = 1_000_000

    def decide(
        user: str, client_id: str, api_key: int, request: Request, round_trip_ns: int, now: int
    ) -> int:
        """What the core, the Produce and Fetch handlers and settlement do: the connection's
        kept principal, the charges (request time estimated from the round trip), and the
        throttle settled."""
        request.principal = sensors.principal(request.principal, user, client_id)
        request.now_ms, request.verdict = now, None
        if api_key == PRODUCE:
            enforcement.produce.charge(request, 1024)
        elif api_key == FETCH:
            enforcement.fetch.charge(request, 512)
        elapsed_ns = costs.charge(api_key, 1100, round_trip_ns, request.waits, request.route.bound)
        return settlement.settle(request, elapsed_ns, now)

    for user, client_id, requests in connections:  # every principal has live sensors
        decide(user, client_id, PRODUCE, requests[0], 200_000, now)
    order = [random.randrange(principals) for _ in range(decisions)]
    results = []
    for _ in range(rounds):  # time runs on: 64 decisions per ms, new and long-lived sensors
        started = time.perf_counter_ns()
        for index, connection in enumerate(order):
            user, client_id, requests = connections[connection]
            kind = index & 3
            round_trip = 150_000 + (index & 255) * 100  # round trips that differ
            decide(user, client_id, apis[kind], requests[kind], round_trip, now + (index >> 6))
        elapsed = time.perf_counter_ns() - started
        results.append(elapsed / decisions / 1000)
        now += decisions >> 6
    live = sum(1 for manager in engine.managers() for _ in manager.sensors())
    print(f"live sensors: {live} across {principals} principals")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quota_decision", description=__doc__)
    parser.add_argument("--principals", type=int, action="append", help="default: 100, then 10,000")
    parser.add_argument("--decisions", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per decision with callgrind instead of timing (repeatable)",
    )
    parser.add_argument(
        "--against", metavar="REV", help="with --instructions: also at REV, and the ratio"
    )
    args = parser.parse_args(argv)
    if args.instructions:
        print("quota decision, instructions per decision (callgrind)")
        for principals in args.principals or (100,):
            call = (
                "import contextlib, io\nfrom bench.quota_decision import run\n"
                f"with contextlib.redirect_stdout(io.StringIO()): run({principals}, n, 1)"
            )
            here = per_operation(REPO, call, 2000, 10_000)
            line = f"  {principals} principals: {here:,.0f}"
            if args.against:
                with checkout(args.against) as tree:
                    there = per_operation(tree, call, 2000, 10_000)
                line += f"  at {args.against}: {there:,.0f}  ratio {here / there:.3f}"
            print(line)
        return 0
    for principals in args.principals or (100, 10_000):
        results = run(principals, args.decisions, args.rounds)
        best, median = min(results), statistics.median(results)
        print(f"quota decision (resolve + record + check), {args.decisions} per round")
        print("  rounds us/decision: " + ", ".join(f"{r:.2f}" for r in results))
        verdict = "met" if median < TARGET_US else "MISSED"
        print(
            f"  {principals} principals: median {median:.2f} us, best {best:.2f} us,"
            f" target < {TARGET_US} us: {verdict}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
