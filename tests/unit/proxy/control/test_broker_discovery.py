"""Broker discovery alone, its question to the cluster stood in for: an unreachable cluster
is a readiness problem asked again, never an error; once a response names the brokers, the
instance is ready on that count."""

from __future__ import annotations

import asyncio

import pytest

from config.proxy import ProxySettings
from localkafka.inprocess.harness import VirtualClock
from proxy.control import broker_discovery
from proxy.control.broker_discovery import BrokerDiscovery
from proxy.enforcement import Enforcement
from proxy.runtime.context import ProxyContext
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig, QuotaSettings


async def test_an_unreachable_cluster_is_asked_again_until_it_names_its_brokers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enforcement = Enforcement(QuotaEngine(QuotaConfig(QuotaSettings(), {})))
    context = ProxyContext(ProxySettings(), VirtualClock(), enforcement)
    discovery = BrokerDiscovery(context)
    answers: list[Exception | None] = [ConnectionRefusedError(111, "refused"), None]

    async def ask() -> None:
        problem = answers.pop(0)
        if problem is not None:
            raise problem
        context.brokers.advertise(1, "kafka-1", 9092)

    monkeypatch.setattr(discovery, "ask", ask)
    monkeypatch.setattr(broker_discovery, "METADATA_RETRY_S", 0.01)
    assert discovery.unread == "not read yet"
    await discovery.start()
    assert discovery.unread is not None and "ConnectionRefusedError" in discovery.unread
    for _ in range(100):
        if discovery.unread is None:
            break
        await asyncio.sleep(0.01)
    assert discovery.unread is None and answers == []
    discovery.stop()
