"""/livez and /readyz of a running proxy: not ready until what it serves on is read (the
quota store, the fleet's bus, the cluster's brokers), not ready from SIGTERM on while it
still serves for drain_delay_s, and live throughout."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from prometheus_client import CollectorRegistry

from localkafka.cluster import KafkaCluster
from localkafka.ports import free_port
from localkafka.proxy_process import RunningProxy, start_proxy
from protocol.proxy_header import V2_SIGNATURE
from proxy.observability.endpoint import serve_endpoint
from proxy.observability.probes import Probes
from tests.integration.support.clients import create_topic
from tests.integration.support.listeners import served
from tests.integration.support.relay import DelayedRelay

HOLD_S = 3.0
V2_LOCAL = V2_SIGNATURE + bytes([0x20, 0x00, 0x00, 0x00])


def probe(port: int, path: str) -> tuple[int, dict[str, Any]] | None:
    """(status, body) of GET http://127.0.0.1:port/path; None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except (urllib.error.URLError, ConnectionError):
        return None


def test_not_ready_until_the_quota_store_and_the_fleet_bus_are_read(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    relay = DelayedRelay(kafka1.bootstrap_servers, HOLD_S)
    metrics_port = free_port()
    extra = (
        '\n[quota_store]\ntopic = "probes-quota-store"\n'
        '\n[fleet]\nname = "probes"\n\n[usage]\nenabled = false\n'
    )
    started: list[RunningProxy] = []
    starting = threading.Thread(
        target=lambda: started.append(
            start_proxy(tmp_path, relay.address, 1, extra, metrics_port=metrics_port)
        )
    )
    starting.start()
    answers = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = probe(metrics_port, "/readyz")
        if answer is not None:
            answers.append((time.monotonic(), *answer))
            if answer[0] == 200:
                break
        time.sleep(0.1)
    starting.join(30)
    relay.stop()
    try:
        waiting = [body["checks"] for _, status, body in answers if status == 503]
        print(f"{len(waiting)} answers 503, then {answers[-1][1:]}")
        assert answers[-1][1] == 200, answers[-1]
        assert answers[-1][0] >= relay.released_at  # not before the cluster answered
        assert any("reading the quota store topic" in str(c["quota_store"]) for c in waiting)
        assert any("catching up with the fleet's bus" in str(c["fleet_bus"]) for c in waiting)
        assert all(c["draining"] == "ok" for c in waiting)
        assert set(answers[-1][2]["checks"]) == {
            "listeners",
            "cluster_metadata",
            "quota_store",
            "fleet_bus",
            "draining",
        }
        assert probe(metrics_port, "/livez") == (200, {"status": "live"})
    finally:
        for proxy in started:
            proxy.stop()


async def test_not_ready_from_sigterm_and_live_through_the_drain(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    metrics_port = free_port()
    proxy = start_proxy(
        tmp_path,
        kafka1.bootstrap_servers,
        1,
        "drain_delay_s = 2.0\n\n[usage]\nenabled = false\n",
        metrics_port=metrics_port,
    )
    try:
        # a fetch waiting on an empty topic: the drain waits for its answer
        create_topic(kafka1.bootstrap_servers, "probes-empty", partitions=1, replication=1)
        consumer = KafkaConsumer(
            "probes-empty", bootstrap_servers=proxy.bootstrap, fetch_max_wait_ms=3000
        )
        stop_fetching = threading.Event()

        def fetch() -> None:
            while not stop_fetching.is_set():
                consumer.poll(timeout_ms=500)

        fetching = threading.Thread(target=fetch)
        fetching.start()
        await asyncio.sleep(1)
        assert probe(metrics_port, "/readyz") is not None
        proxy.process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        ready, live, served_during_delay = [], [], None
        draining_seen_live = False
        while proxy.process.poll() is None and time.monotonic() - sent < 30:
            answers = await asyncio.gather(
                asyncio.to_thread(probe, metrics_port, "/readyz"),
                asyncio.to_thread(probe, metrics_port, "/livez"),
            )
            if answers[0] is not None:
                ready.append(answers[0])
            if answers[1] is not None:
                live.append(answers[1][0])
                draining_seen_live |= "shutting down" in proxy.log()
            if served_during_delay is None and time.monotonic() - sent > 0.5:
                served_during_delay = await served(proxy.bootstrap, "127.0.0.1")
            await asyncio.sleep(0.05)
        stop_fetching.set()
        fetching.join(10)
        consumer.close()
    finally:  # stopped already, unless the test failed midway
        proxy.stop()
    print(f"after SIGTERM: {len(ready)} readiness answers, {len(live)} liveness answers")
    assert ready and all(status == 503 for status, _ in ready)
    assert all(body["checks"]["draining"] != "ok" for _, body in ready)
    assert live and all(status == 200 for status in live)
    assert draining_seen_live  # live while the drain ran
    assert served_during_delay  # still serving before the drain


@pytest.mark.parametrize(
    ("before", "status"),
    [
        (b"", 200),
        (b"PROXY TCP4 10.0.0.1 10.0.0.2 40000 9464\r\n", 200),  # a health check's v1 header
        (V2_LOCAL, 200),  # and its v2 one
        (b"POST ", 405),
    ],
)
async def test_the_endpoint_answers_a_balancer_s_health_check(before: bytes, status: int) -> None:
    """A health check may come with the balancer's PROXY protocol header (an NLB with proxy
    protocol on sends one); the endpoint reads past it."""
    probes = Probes({"draining": lambda: None})
    server = await serve_endpoint(CollectorRegistry(), probes, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = b"GET /readyz HTTP/1.0\r\n\r\n"
        writer.write(before + (request[4:] if before == b"POST " else request))
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    finally:
        server.close()
    assert answer.startswith(b"HTTP/1.0 %d " % status), answer
