"""Kafka's ConnectionQuotas on a virtual clock: per-address maximums with overrides, the
proxy-wide maximum, and KIP-612's connection_creation_rate with Kafka's arithmetic."""

from __future__ import annotations

from proxy.network.admission import peer_ip
from quotas.connections import (
    ConnectionAdmission,
    ConnectionLimits,
    ConnectionQuotas,
    ConnectionVerdict,
)
from quotas.entities import DEFAULT
from quotas.stats import MetricConfig

WINDOWS = MetricConfig(samples=2, window_ms=1000)
ACCEPT = ConnectionAdmission(ConnectionVerdict.ACCEPT)
REFUSE = ConnectionAdmission(ConnectionVerdict.REFUSE)


def throttled(ms: int) -> ConnectionAdmission:
    return ConnectionAdmission(ConnectionVerdict.THROTTLE, ms)


def test_max_connections_per_ip_with_overrides() -> None:
    quotas = ConnectionQuotas(
        ConnectionLimits(
            max_connections_per_ip=2, max_connections_per_ip_overrides={"10.0.0.9": 0}
        ),
        WINDOWS,
    )
    assert quotas.admit("10.0.0.1", 0) == ACCEPT
    assert quotas.admit("10.0.0.1", 0) == ACCEPT
    assert quotas.admit("10.0.0.1", 0) == REFUSE
    assert quotas.admit("10.0.0.2", 0) == ACCEPT  # another address is not affected
    assert quotas.admit("10.0.0.9", 0) == ConnectionAdmission(
        ConnectionVerdict.REFUSE
    )  # an override of 0
    assert quotas.counts == {"10.0.0.1": 2, "10.0.0.2": 1} and quotas.total == 3
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.1", 0) == ACCEPT


def test_max_connections_counts_every_address() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections=2), WINDOWS)
    assert quotas.has_slot()
    quotas.admit("10.0.0.1", 0)
    quotas.admit("10.0.0.2", 0)
    assert not quotas.has_slot()
    quotas.release("10.0.0.2")
    assert quotas.has_slot()


def test_connection_creation_rate_as_kafka_computes_it() -> None:
    """Rate over 2 x 1 s windows, padded to one window at first: 5 connections in the first
    millisecond are 5/s; the sixth would be 6/s, so it is held (6 - 5) / 5 x 1000 ms and
    unrecorded; 100 ms later 6 / 1.1 s is still over, by 100 ms; at 200 ms it is 5/s."""
    quotas = ConnectionQuotas(ConnectionLimits(connection_creation_rate={"10.0.0.1": 5}), WINDOWS)
    assert [quotas.admit("10.0.0.1", 0) for _ in range(5)] == [ACCEPT] * 5
    assert quotas.admit("10.0.0.1", 0) == throttled(200)
    assert quotas.admit("10.0.0.1", 0) == ConnectionAdmission(
        ConnectionVerdict.THROTTLE, 200
    )  # unrecorded
    assert quotas.admit("10.0.0.1", 100) == throttled(100)
    assert quotas.admit("10.0.0.1", 200) == ACCEPT
    assert quotas.counts == {"10.0.0.1": 6}  # throttled connections are never counted
    assert [quotas.admit("10.0.0.2", 0) for _ in range(50)] == [ACCEPT] * 50


def test_throttle_is_bounded_by_one_window_and_default_entity_applies() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(connection_creation_rate={DEFAULT: 1}), WINDOWS)
    assert quotas.admit("10.0.0.1", 0) == ACCEPT
    # (2 - 1) / 1 x 1000 = 1000 ms, Kafka's bound: quota.window.size.seconds
    assert quotas.admit("10.0.0.1", 0) == throttled(1000)
    # every address has its own sensor under the default quota
    assert quotas.admit("10.0.0.2", 0) == ACCEPT


def test_a_reload_keeps_counts_and_applies_new_rates() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(connection_creation_rate={DEFAULT: 1}), WINDOWS)
    quotas.admit("10.0.0.1", 0)
    assert quotas.admit("10.0.0.1", 0).verdict is ConnectionVerdict.THROTTLE
    quotas.update(ConnectionLimits(connection_creation_rate={DEFAULT: 10}), WINDOWS)
    assert quotas.admit("10.0.0.1", 0) == ACCEPT  # 2/s under the new 10/s
    assert quotas.counts == {"10.0.0.1": 2}
    assert quotas.expire(3_600_000) == 1  # an hour without connections: its sensor goes


def test_a_dual_stack_listener_names_ipv4_clients_as_kafka_does() -> None:
    assert peer_ip("::ffff:10.0.0.1") == "10.0.0.1"
    assert peer_ip("fe80::1%eth0") == "fe80::1"
    assert peer_ip("10.0.0.1") == "10.0.0.1"


def test_a_socket_whose_client_is_not_known_yet_holds_a_slot_of_max_connections() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(max_connections=2), WINDOWS)
    quotas.hold_slot()
    quotas.hold_slot()  # two PROXY protocol headers being read
    assert not quotas.has_slot()
    quotas.unhold_slot()  # one header read: the client takes the slot as itself
    assert quotas.admit("10.0.0.1", 0) == ACCEPT
    assert not quotas.has_slot()
    quotas.unhold_slot()  # the other connection closed before its header
    assert quotas.has_slot() and quotas.counts == {"10.0.0.1": 1}
