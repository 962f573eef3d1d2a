"""/readyz names every condition and the ones that fail; /livez depends on none of them."""

from __future__ import annotations

import json

from proxy.observability.probes import Probes


def test_ready_only_while_every_condition_holds_and_says_which_fails() -> None:
    reading: dict[str, str | None] = {"quota_store": "reading the quota store topic q"}
    probes = Probes({"listeners": lambda: None, "quota_store": lambda: reading["quota_store"]})
    status, body = probes.ready()
    assert status == 503
    assert json.loads(body) == {
        "status": "not ready",
        "checks": {"listeners": "ok", "quota_store": "reading the quota store topic q"},
    }
    reading["quota_store"] = None
    status, body = probes.ready()
    assert status == 200 and json.loads(body)["status"] == "ready"


def test_live_whatever_readiness_says() -> None:
    probes = Probes({"draining": lambda: "SIGTERM received: draining"})
    assert probes.ready()[0] == 503
    assert probes.live() == (200, b'{"status":"live"}\n')
