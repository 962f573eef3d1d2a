"""The proxy asks a real broker for a topic's partitions on a client's own SASL connection.

On a SASL cluster the proxy holds no credentials: the connections clients authenticated are
the only ones it has. Here the proxy runs in-process in front of a SASL_PLAINTEXT listener;
while an aiokafka producer authenticated with SCRAM produces through it, the proxy sends a
Metadata request of its own on that producer's connection for a topic the client never asked
about. The topic cache learns the topic's partition count; the producer sees no error, keeps
producing, and every record it had acknowledged is stored once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from config.proxy import ProxySettings
from localkafka.cluster import KafkaCluster
from localkafka.load import Timeline, aiokafka_flood, assert_no_loss_or_duplicates, read_all, seq_of
from localkafka.proxy_process import free_port_block
from proxy.enforcement import Enforcement
from proxy.handlers.inquiries import ask_topics
from proxy.network.loop import LoopClock
from proxy.network.server import ProxyServer
from proxy.runtime.context import ProxyContext
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig
from tests.integration.support.clients import SASL_USERS

PRODUCED, ELSEWHERE = "produced", "elsewhere"


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.05)


async def test_own_metadata_request_on_a_sasl_client_connection(kafka1: KafkaCluster) -> None:
    kafka1.create_topic(PRODUCED, partitions=1)
    settings = ProxySettings(
        upstream_bootstrap_servers=(kafka1.brokers[0].sasl_address,),
        bootstrap_port=0,
        broker_port_base=free_port_block(1),
    )
    server = ProxyServer(
        ProxyContext(settings, LoopClock(), Enforcement(QuotaEngine(QuotaConfig())))
    )
    await server.start()
    timeline = Timeline()
    producing = asyncio.create_task(
        aiokafka_flood(
            server.bootstrap_address,
            "carol-app",
            PRODUCED,
            12.0,
            timeline,
            offered_rate=200_000,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="carol",
            sasl_plain_password=SASL_USERS["carol"],
        )
    )
    try:
        await until(lambda: len(timeline.events) > 100)
        # created after the client bootstrapped, so no Metadata of the client's names it
        await asyncio.to_thread(kafka1.create_topic, ELSEWHERE, 4)
        assert server.context.topics.by_name(ELSEWHERE) is None
        cores = [c.core for c in server.connections if c.core is not None]
        # the bootstrap connection may be idle or closed; the producer's connection takes it
        assert any(ask_topics(core.channel, [ELSEWHERE]) for core in cores)
        await until(lambda: server.context.topics.by_name(ELSEWHERE) is not None)
        topic = server.context.topics.by_name(ELSEWHERE)
        assert topic is not None and topic.partitions == 4 and topic.topic_id is not None
        acknowledged = len(timeline.events)
        await until(lambda: len(timeline.events) > acknowledged + 100)  # still producing
        sent = await producing
    finally:
        if not producing.done():
            producing.cancel()
        await server.stop()
    stored = [seq_of(value) for value in read_all(kafka1.bootstrap_servers, PRODUCED)]
    assert_no_loss_or_duplicates(timeline.seqs, stored)
    assert len(stored) == sent
