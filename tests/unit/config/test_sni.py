"""[sni]: read with [proxy] routing = "sni" alone, and only in front of TLS."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import ConfigError
from config.loader import ProxyConfig, load_config
from config.sni import SniSettings
from localkafka.tls import ThrowawayCA


def load(tmp_path: Path, text: str) -> ProxyConfig:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    return load_config(path)


def test_sni_routing_names_its_hosts(tmp_path: Path) -> None:
    keystore = ThrowawayCA(tmp_path / "ca").server("proxy", "127.0.0.1")
    config = load(
        tmp_path,
        '[proxy]\nrouting = "sni"\nbootstrap_port = 9443\n'
        f'[listener]\nsecurity.protocol = "SSL"\nssl.keystore.location = "{keystore}"\n'
        '[sni]\nbootstrap_host = "Bootstrap.Kafka.Test"\nbroker_host = "b-{id}.kafka.test"\n',
    )
    assert config.sni == SniSettings("bootstrap.kafka.test", "b-{id}.kafka.test", 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[proxy]\nrouting = "sni"\n', "[sni] key 'bootstrap_host': missing"),
        ('[proxy]\nrouting = "sni"\n', "[proxy] key 'routing': \"sni\" needs TLS towards clients"),
        ('[proxy]\nrouting = "nat"\n', "[proxy] key 'routing': expected one of ports, sni"),
        ('[sni]\nbootstrap_host = "b.kafka.test"\n', "[sni]: read only with [proxy] routing"),
        (
            '[proxy]\nrouting = "sni"\n[sni]\nbroker_host = "broker.kafka.test"\n',
            "[sni] key 'broker_host': 'broker.kafka.test' must contain {id} once",
        ),
        (
            '[proxy]\nrouting = "sni"\n[sni]\nbootstrap_host = "bad_name.test"\n',
            "[sni] key 'bootstrap_host': 'bad_name.test' is not a host name",
        ),
    ],
)
def test_sni_problems_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load(tmp_path, text)
    assert message in str(error.value)
