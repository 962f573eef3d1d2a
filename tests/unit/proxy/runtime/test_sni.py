"""SNI routing's names: which upstream a name asks for, and the names advertised."""

from __future__ import annotations

import pytest

from config.sni import SniSettings
from proxy.runtime.sni import SniRoutes, UnknownName

ROUTES = SniRoutes(SniSettings("bootstrap.kafka.test", "broker-{id}.kafka.test"), 9192)


def test_the_bootstrap_and_each_broker_by_name_whatever_the_case() -> None:
    assert ROUTES.route("bootstrap.kafka.test") is None
    assert ROUTES.route("broker-3.kafka.test") == 3
    assert ROUTES.route("BROKER-12.Kafka.Test") == 12
    assert (ROUTES.broker_host(3), ROUTES.advertised_port) == ("broker-3.kafka.test", 9192)


def test_the_advertised_port_is_the_entry_point_s() -> None:
    routes = SniRoutes(SniSettings("b.example.com", "{id}.example.com", 443), 9192)
    assert (routes.route("7.example.com"), routes.advertised_port) == (7, 443)


@pytest.mark.parametrize(
    "name",
    ["", None, "broker-.kafka.test", "broker-01.kafka.test", "broker-x.kafka.test", "kafka.test"],
)
def test_any_other_name_is_unknown(name: str | None) -> None:
    with pytest.raises(UnknownName):
        ROUTES.route(name)
