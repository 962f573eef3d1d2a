"""Config errors name the file, the section/entity and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import ConfigError
from config.guards import FailedLoginSettings
from config.loader import load_config
from quotas.entities import (
    CEILING_CLASSES,
    CLUSTER_CEILINGS,
    DEFAULT,
    DISK_LIMITS,
    GUARDS,
    QuotaEntity,
    QuotaType,
)
from quotas.settings import GuardSettings
from quotas.stats import MetricConfig


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    return path


def test_valid_proxy_section(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """
[proxy]
upstream_bootstrap_servers = ["kafka-1:9092", "kafka-2:9092"]
listen_host = "0.0.0.0"
advertised_host = "proxy.example"
bootstrap_port = 19092
broker_port_base = 19100
""",
        )
    )
    assert config.proxy.upstream_addresses() == [("kafka-1", 9092), ("kafka-2", 9092)]
    assert config.proxy.advertised == "proxy.example"


def test_every_problem_is_reported_with_file_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[proxy]
bootstrap_port = "9092"
max_frame_bytes = 0
uvloop = 1
listen_hots = "x"
upstream_bootstrap_servers = ["no-port"]

[quota]
""",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    lines = str(caught.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)
    text = str(caught.value)
    assert "[proxy] key 'bootstrap_port': expected int, got str '9092'" in text
    assert "[proxy] key 'max_frame_bytes': must be > 0, got 0" in text
    assert "[proxy] key 'uvloop': expected bool, got int 1" in text
    assert "[proxy] key 'listen_hots': unknown key" in text
    assert "[proxy] key 'upstream_bootstrap_servers'" in text
    assert "unknown section [quota]" in text
    assert len(lines) == 6


def test_unreadable_and_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[proxy\n"))


QUOTAS = """
[broker]
quota.window.num = 5
"quota.window.size.seconds" = 2
controller.quota.window.size.seconds = 3
producer.id.quota.window.size.seconds = 60

[users.alice]
producer_byte_rate = 1048576
producer_ids_rate = 100

[users.alice.clients.reporting]
consumer_byte_rate = 2097152
request_percentage = 12.5

[users."<default>"]
request_percentage = 50

[users."<default>".clients."<default>"]
controller_mutation_rate = 10

[clients."<default>"]
producer_byte_rate = 10485760
"""


def test_quota_entities_and_broker_settings(tmp_path: Path) -> None:
    quotas = load_config(write(tmp_path, QUOTAS)).quotas
    assert quotas.settings.client == MetricConfig(samples=5, window_ms=2000)
    assert quotas.settings.controller == MetricConfig(samples=11, window_ms=3000)
    assert quotas.settings.producer_ids == MetricConfig(samples=11, window_ms=60_000)
    assert quotas.limits[QuotaType.PRODUCE] == {
        QuotaEntity("alice"): 1048576,
        QuotaEntity(client_id=DEFAULT): 10485760,
    }
    assert quotas.limits[QuotaType.FETCH] == {QuotaEntity("alice", "reporting"): 2097152}
    assert quotas.limits[QuotaType.REQUEST] == {
        QuotaEntity("alice", "reporting"): 12.5,
        QuotaEntity(DEFAULT): 50,
    }
    assert quotas.limits[QuotaType.CONTROLLER_MUTATION] == {QuotaEntity(DEFAULT, DEFAULT): 10}
    assert quotas.limits[QuotaType.PRODUCER_IDS] == {QuotaEntity("alice"): 100}


def test_every_quota_problem_names_file_entity_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[broker]
quota.window.num = 0
quota.window.sizes = 1
"producer.id.quota.cache.false.positive.rate" = 2
"producer.id.quota.cache.layer.count" = 1

[users.alice]
producer_byte_rate = 1.5
request_percentage = -3
consumer_bytes_rate = 10

[users.alice.clients.app]
producer_ids_rate = 10
controller_mutation_rate = "fast"

[clients."<default>"]
producer_ids_rate = 10
consumer_byte_rate = true
""",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    lines = str(caught.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)
    expected = [
        "[broker] key 'quota.window.num': must be >= 1, got 0",
        "[broker] key 'quota.window.sizes': unknown key",
        "[broker] key 'producer.id.quota.cache.false.positive.rate': expected a number between",
        "[broker] key 'producer.id.quota.cache.layer.count': expected at least 2 layers, got 1",
        "users/alice: key 'producer_byte_rate': producer_byte_rate cannot be a fractional value.",
        "users/alice: key 'request_percentage': Quota request_percentage must be greater than 0",
        "users/alice: key 'consumer_bytes_rate': Invalid configuration key consumer_bytes_rate "
        "(known: producer_byte_rate, consumer_byte_rate, request_percentage, "
        f"controller_mutation_rate, {', '.join(guard.key for guard in GUARDS.values())}, "
        "kafka-quota-proxy.connections, kafka-quota-proxy.connection_creation_rate, "
        "kafka-quota-proxy.ceiling_exempt, kafka-quota-proxy.produce_floor, "
        "kafka-quota-proxy.fetch_floor, kafka-quota-proxy.request_floor, "
        "producer_ids_rate or a 'clients' table)",
        "users/alice/clients/app: key 'producer_ids_rate': Invalid configuration key "
        "producer_ids_rate (producer_ids_rate applies to users/<user> and users/<default> only",
        "users/alice/clients/app: key 'controller_mutation_rate': expected a number, got 'fast'",
        "clients/<default>: key 'producer_ids_rate': Invalid configuration key producer_ids_rate",
        "clients/<default>: key 'consumer_byte_rate': expected a number, got True",
    ]
    for fragment in expected:
        assert any(fragment in line for line in lines), fragment
    assert len(lines) == len(expected)


def test_shadow_mode_globally_or_per_quota(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")).shadow == frozenset()
    everything = load_config(write(tmp_path, "[enforcement]\nshadow = true\n")).shadow
    limits = {*CEILING_CLASSES, *CLUSTER_CEILINGS.values(), *DISK_LIMITS}
    assert everything == set(QuotaType) - limits
    listed = load_config(
        write(tmp_path, '[enforcement]\nshadow = ["consumer_byte_rate", "request_percentage"]\n')
    )
    assert listed.shadow == {QuotaType.FETCH, QuotaType.REQUEST}
    nested = write(tmp_path, '[enforcement]\nshadow = [["request_percentage"]]\n')
    with pytest.raises(ConfigError, match="unknown quota"):
        load_config(nested)
    path = write(tmp_path, '[enforcement]\nshadow = ["consumer_bytes_rate"]\nenforce = 1\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    lines = str(caught.value).splitlines()
    assert sorted(lines) == [
        f"{path}: [enforcement] key 'enforce': unknown key (known: hold, shadow)",
        f"{path}: [enforcement] key 'shadow': unknown quota 'consumer_bytes_rate' (known: "
        "producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate, "
        f"producer_ids_rate, {', '.join(guard.key for guard in GUARDS.values())}, "
        "kafka-quota-proxy.connections, kafka-quota-proxy.connection_creation_rate, "
        "kafka-quota-proxy.produce_ceiling, kafka-quota-proxy.fetch_ceiling, "
        "kafka-quota-proxy.request_ceiling, kafka-quota-proxy.disk_guard)",
    ]


def test_a_throttle_holds_the_principal_unless_told_to_hold_the_connection(
    tmp_path: Path,
) -> None:
    assert load_config(write(tmp_path, "")).hold_principal
    apart = load_config(write(tmp_path, '[enforcement]\nhold = "connection"\n'))
    assert not apart.hold_principal
    with pytest.raises(ConfigError, match="key 'hold': expected one of principal, connection"):
        load_config(write(tmp_path, '[enforcement]\nhold = "user"\n'))


def test_usage_settings_and_their_problems(tmp_path: Path) -> None:
    good = load_config(
        write(tmp_path, '[usage]\ninterval_s = 5\nkafka_topic = "usage"\ndirectory = ""\n')
    ).usage
    assert (good.interval_s, good.kafka_topic, good.directory, good.enabled) == (
        5,
        "usage",
        "",
        True,
    )
    path = write(
        tmp_path,
        '[usage]\ninterval_s = 0\nkafka_bootstrap_servers = ["nohost"]\nsamples = 3\n',
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "[usage] key 'interval_s': must be > 0, got 0" in text
    assert "[usage] key 'kafka_bootstrap_servers': expected a list of 'host:port'" in text
    assert "[usage] key 'samples': unknown key" in text


def test_connection_limits_and_ips_entities(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """
[proxy]
max_connections = 5000
max_connections_per_ip = 100
max_connections_per_ip_overrides = { "10.0.0.7" = 0, "::1" = 300 }
queued_max_request_bytes = 104857600
connections_max_idle_ms = 60000
drain_timeout_s = 20

[ips."<default>"]
connection_creation_rate = 20

[ips."10.0.0.8"]
connection_creation_rate = 100
""",
        )
    )
    assert config.proxy.max_connections == 5000
    assert config.proxy.max_connections_per_ip_overrides == {"10.0.0.7": 0, "::1": 300}
    assert config.ip_connection_rates == {DEFAULT: 20.0, "10.0.0.8": 100.0}
    assert config.proxy.drain_timeout_s == 20


def test_connection_limit_problems_name_the_key_or_entity(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[proxy]
max_connections = 0
max_connections_per_ip = 0
max_connections_per_ip_overrides = { "not-an-ip" = 3 }
queued_max_request_bytes = -1
connections_max_idle_ms = 0

[ips."10.0.0.300"]
connection_creation_rate = 5

[ips."<default>"]
connection_creation_rate = 0.5
connections = 3
""",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "[proxy] key 'max_connections': must be > 0, got 0" in text
    assert "[proxy] key 'max_connections_per_ip': 0 admits no client" in text
    assert "[proxy] key 'max_connections_per_ip_overrides': expected IP address" in text
    assert "[proxy] key 'queued_max_request_bytes': must be > 0, got -1" in text
    assert "[proxy] key 'connections_max_idle_ms': must be > 0, or -1 to never" in text
    assert "ips/10.0.0.300: not an IP address" in text
    assert (
        "ips/<default>: key 'connection_creation_rate': connection_creation_rate cannot be a "
        "fractional value." in text
    )
    assert "ips/<default>: key 'connections': Invalid configuration key connections" in text
    assert len(text.splitlines()) == 8


def test_idle_connections_are_never_closed_with_minus_one(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[proxy]\nconnections_max_idle_ms = -1\n"))
    assert config.proxy.connections_max_idle_ms == -1


def test_a_fleet_and_workers(tmp_path: Path) -> None:
    alone = load_config(write(tmp_path, "[proxy]\nbootstrap_port = 9192\n"))
    assert (alone.proxy.workers, alone.fleet_name) == (1, "")
    named = load_config(write(tmp_path, '[fleet]\nname = "eu-1"\nsync_interval_ms = 100\n'))
    assert (named.fleet_name, named.fleet.sync_interval_ms) == ("eu-1", 100)
    # several workers without a name: the fleet of this host's workers, per bootstrap port
    workers = load_config(write(tmp_path, "[proxy]\nworkers = 4\nbootstrap_port = 9192\n"))
    assert workers.proxy.workers == 4 and workers.fleet_name.endswith("-9192")


def test_fleet_and_worker_problems_name_the_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[proxy]
workers = 0
[fleet]
name = "eu 1"
sync_interval_ms = 5
""",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert "[proxy] key 'workers': must be between 1 and 256, got 0" in text
    assert "[fleet] key 'name': 'eu 1' cannot name a Kafka topic" in text
    assert "[fleet] key 'sync_interval_ms': must be between 10 and 10000, got 5" in text
    with pytest.raises(ConfigError, match=r"\[fleet\] key 'name': missing"):
        load_config(write(tmp_path, "[fleet]\nsync_interval_ms = 100\n"))
    with pytest.raises(ConfigError, match=r"\[proxy\] key 'bootstrap_port': workers share"):
        load_config(write(tmp_path, "[proxy]\nworkers = 2\nbootstrap_port = 0\n"))


def test_the_failed_login_backoff_is_on_with_its_table(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")).failed_logins is None
    on = load_config(write(tmp_path, "[guards.failed_logins]\n")).failed_logins
    assert on == FailedLoginSettings(first_wait_ms=100, max_wait_ms=20_000, shadow=False)
    text = "[guards.failed_logins]\nfirst_wait_ms = 250\nmax_wait_ms = 5000\nshadow = true\n"
    assert load_config(write(tmp_path, text)).failed_logins == FailedLoginSettings(250, 5000, True)
    path = write(
        tmp_path,
        "[guards.failed_logins]\nfirst_wait_ms = 0\nmax_wait_ms = -1\nwait = 1\n[guards.logins]\n",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert sorted(str(caught.value).splitlines()) == [
        f"{path}: [guards.failed_logins] key 'first_wait_ms': expected a positive number of "
        "milliseconds, got 0",
        f"{path}: [guards.failed_logins] key 'max_wait_ms': expected a positive number of "
        "milliseconds, got -1",
        f"{path}: [guards.failed_logins] key 'wait': unknown key (known: first_wait_ms, "
        "max_wait_ms, shadow)",
        f"{path}: unknown table [guards.logins] (known: connections, disk, failed_logins, "
        "requests)",
    ]
    short = write(tmp_path, "[guards.failed_logins]\nfirst_wait_ms = 500\nmax_wait_ms = 200\n")
    with pytest.raises(ConfigError, match="'max_wait_ms': 200 is less than first_wait_ms"):
        load_config(short)


def test_a_request_rate_guard_is_a_quota_key_of_its_entity(tmp_path: Path) -> None:
    """Written as TOML's dotted key, as kafka-configs names it."""
    text = (
        '[users."<default>"]\nkafka-quota-proxy.join_group_rate = 2\n'
        "[clients.app]\n'kafka-quota-proxy.metadata_rate' = 5.5\n"
    )
    config = load_config(write(tmp_path, text))
    assert config.quotas.limits == {
        QuotaType.JOIN_GROUP_RATE: {QuotaEntity(user=DEFAULT): 2.0},
        QuotaType.METADATA_RATE: {QuotaEntity(client_id="app"): 5.5},
    }
    assert config.quotas.settings.guards == GuardSettings(burst_s=10, max_throttle_ms=1000)
    assert config.shadow == frozenset()
    path = write(tmp_path, "[users.bob]\nkafka-quota-proxy.join_group_rate = 0\n")
    with pytest.raises(ConfigError, match=r"Quota kafka-quota-proxy\.join_group_rate must be"):
        load_config(path)


def test_the_guards_buckets_and_their_shadow_mode(tmp_path: Path) -> None:
    text = "[guards.requests]\nburst_s = 30\nmax_throttle_ms = 3000\nshadow = true\n"
    config = load_config(write(tmp_path, text))
    assert config.quotas.settings.guards == GuardSettings(burst_s=30, max_throttle_ms=3000)
    assert config.shadow == frozenset(GUARDS.values())
    path = write(tmp_path, "[guards.requests]\nburst_s = 0\nmax_throttle_ms = 3001\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert sorted(str(caught.value).splitlines()) == [
        f"{path}: [guards.requests] key 'burst_s': expected at least 1 second, got 0",
        f"{path}: [guards.requests] key 'max_throttle_ms': expected 1 to 3000, got 3001: a "
        "guard's throttle mutes the connection, and a longer one could keep a group member's "
        "heartbeat past Kafka's shortest session (group.min.session.timeout.ms, 6000 ms by "
        "default), expelling it from its group",
    ]


def test_a_guard_may_have_a_burst_of_its_own(tmp_path: Path) -> None:
    text = (
        "[guards.requests]\nburst_s = 5\nbursts = { join_group = 30, connection_creation = 60 }\n"
        "[guards.connections]\nshadow = true\n"
    )
    config = load_config(write(tmp_path, text))
    guards = config.quotas.settings.guards
    assert guards.windows(QuotaType.JOIN_GROUP_RATE).samples == 30
    assert guards.windows(QuotaType.CONNECTION_CREATION_RATE).samples == 60
    assert guards.windows(QuotaType.METADATA_RATE).samples == 5
    assert config.shadow == frozenset({QuotaType.CONNECTIONS, QuotaType.CONNECTION_CREATION_RATE})
    path = write(tmp_path, "[guards.requests]\nbursts = { joins = 30, metadata = 0 }\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert sorted(str(caught.value).splitlines()) == [
        f"{path}: [guards.requests] key 'bursts': 'metadata' expected at least 1 second, got 0",
        f"{path}: [guards.requests] key 'bursts': unknown guard 'joins' (known: metadata, "
        "find_coordinator, join_group, sync_group, consumer_group_heartbeat, offset_commit, "
        "init_producer_id, list_offsets, connection_creation)",
    ]
