"""[listener] and [upstream]: Kafka's TLS keys, contexts built at load, and no silent
downgrade; every problem names the file, the section and the key."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from config.errors import ConfigError
from config.loader import ProxyConfig, load_config
from config.tls import describe, unencrypted_upstream
from localkafka.tls import ThrowawayCA
from proxy.control.reload import ConfigReloader
from proxy.runtime.counters import ProxyStats


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return ThrowawayCA(tmp_path_factory.mktemp("ca"))


def load(tmp_path: Path, text: str) -> tuple[Path, list[str]]:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    try:
        load_config(path)
    except ConfigError as exc:
        assert exc.path == path
        return path, exc.problems
    return path, []


def test_tls_on_both_sides_builds_both_contexts(tmp_path: Path, ca: ThrowawayCA) -> None:
    keystore = ca.server("proxy", "127.0.0.1")
    path = tmp_path / "proxy.toml"
    path.write_text(
        f"""
[listener]
security.protocol = "SASL_SSL"
ssl.keystore.type = "PEM"
ssl.keystore.location = "{keystore}"
ssl.client.auth = "required"
ssl.truststore.location = "{ca.certificate_path}"
ssl.principal.mapping.rules = "RULE:^CN=(.*?),OU=apps$/$1/L, DEFAULT"
acknowledge.broker.sees.proxy = true

[upstream]
security.protocol = "SASL_SSL"
ssl.truststore.location = "{ca.certificate_path}"
ssl.endpoint.identification.algorithm = ""
"""
    )
    config = load_config(path)
    server, client = config.listener.context, config.upstream.context
    assert server is not None and client is not None
    assert server.verify_mode == ssl.CERT_REQUIRED
    assert server.minimum_version == client.minimum_version == ssl.TLSVersion.TLSv1_2
    # Kafka's "" turns hostname verification off, never certificate verification
    assert not client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    assert load_config(path) == config  # the same files and keys: no change on reload
    mapper = config.listener.principal_mapper
    assert mapper is not None and mapper.name("CN=Writer-A,OU=apps") == "writer-a"


def test_plaintext_is_the_default_and_builds_nothing(tmp_path: Path) -> None:
    path, problems = load(tmp_path, "[proxy]\n")
    config = load_config(path)
    assert not problems and config.listener.context is None and config.upstream.context is None


def test_a_plaintext_listener_in_front_of_tls_is_refused_unless_allowed(
    tmp_path: Path, ca: ThrowawayCA
) -> None:
    truststore = ca.certificate_path
    upstream = f'[upstream]\nsecurity.protocol = "SSL"\nssl.truststore.location = "{truststore}"\n'
    _, problems = load(tmp_path, upstream)
    assert len(problems) == 1
    assert problems[0].startswith("[listener] key 'security.protocol': PLAINTEXT in front of")
    assert "allow.plaintext.clients = true" in problems[0]
    _, problems = load(tmp_path, upstream + "[listener]\nallow.plaintext.clients = true\n")
    assert problems == []


def test_every_tls_problem_names_its_section_and_key(tmp_path: Path, ca: ThrowawayCA) -> None:
    _, problems = load(
        tmp_path,
        f"""
[listener]
security.protocol = "SASL_SSL"
ssl.client.auth = "required"
ssl.keystore.type = "JKS"
ssl.cipher.suites = "x"

[upstream]
security.protocol = "SSL"
ssl.truststore.location = "{tmp_path / "missing.pem"}"
ssl.endpoint.identification.algorithm = "ldap"
""",
    )
    assert problems[0].startswith("[listener] key 'ssl.cipher.suites': unknown key (known: ")
    assert problems[1] == "[listener] key 'ssl.keystore.type': only PEM is read, got 'JKS'"
    assert problems[2].startswith("[listener] key 'ssl.keystore.location': required for")
    assert problems[3].startswith("[upstream] key 'ssl.endpoint.identification.algorithm': ")
    assert problems[4].startswith("[listener] key 'security.protocol': SASL_SSL in front of ")
    assert len(problems) == 5

    _, problems = load(
        tmp_path,
        f"""
[listener]
security.protocol = "SSL"
ssl.keystore.location = "{ca.certificate_path}"

[upstream]
security.protocol = "SSL"
ssl.truststore.location = "{tmp_path / "missing.pem"}"
""",
    )
    # a certificate without its key, and a truststore that is not there
    assert problems[0].startswith(
        f"[listener] key 'ssl.keystore.location': cannot load {ca.certificate_path}: "
    )
    assert problems[1].startswith("[upstream] key 'ssl.truststore.location': cannot load ")
    assert len(problems) == 2


def test_ssl_keys_under_a_plaintext_protocol_are_a_mistake(tmp_path: Path) -> None:
    _, problems = load(tmp_path, '[upstream]\nssl.truststore.location = "/ca.pem"\n')
    assert problems == [
        "[upstream] key 'ssl.truststore.location': set, but security.protocol is PLAINTEXT"
    ]


def test_principals_from_certificates_need_the_operator_to_acknowledge_it(
    tmp_path: Path, ca: ThrowawayCA
) -> None:
    """The brokers see the proxy, not the client: their ACLs by certificate stop telling
    clients apart, which an operator must accept knowingly."""
    keystore = ca.server("proxy", "127.0.0.1")
    listener = f"""
[listener]
security.protocol = "SSL"
ssl.keystore.location = "{keystore}"
ssl.client.auth = "requested"
ssl.truststore.location = "{ca.certificate_path}"
"""
    _, problems = load(tmp_path, listener)
    assert len(problems) == 1
    assert problems[0].startswith("[listener] key 'ssl.client.auth': clients are named from")
    assert "acknowledge.broker.sees.proxy = true" in problems[0]
    path, problems = load(tmp_path, listener + "acknowledge.broker.sees.proxy = true\n")
    assert problems == [] and load_config(path).listener.principal_mapper is not None
    _, problems = load(
        tmp_path,
        listener + 'acknowledge.broker.sees.proxy = true\nssl.principal.mapping.rules = "DEFAUL"\n',
    )
    assert problems == [
        "[listener] key 'ssl.principal.mapping.rules': Invalid rule: `DEFAUL`, "
        "unmatched substring: `DEFAUL`"
    ]


def test_usage_samples_cannot_go_to_a_sasl_cluster_without_credentials(tmp_path: Path) -> None:
    _, problems = load(
        tmp_path,
        '[usage]\nkafka_topic = "usage"\n'
        '[listener]\nsecurity.protocol = "SASL_PLAINTEXT"\n'
        '[upstream]\nsecurity.protocol = "SASL_PLAINTEXT"\n',
    )
    assert len(problems) == 1
    assert problems[0].startswith(
        "[usage] key 'kafka_topic' = 'usage': the upstream cluster speaks SASL_PLAINTEXT"
    )
    _, problems = load(
        tmp_path,
        '[usage]\nkafka_topic = "usage"\nkafka_bootstrap_servers = ["10.0.0.1:9092"]\n'
        '[listener]\nsecurity.protocol = "SASL_PLAINTEXT"\n'
        '[upstream]\nsecurity.protocol = "SASL_PLAINTEXT"\n',
    )
    assert problems == []


def test_the_upstream_truststore_replaces_the_systems_cas(tmp_path: Path, ca: ThrowawayCA) -> None:
    """As a Kafka client's: a publicly trusted certificate for a broker's name is not enough."""
    path, problems = load(
        tmp_path,
        f'[upstream]\nsecurity.protocol = "SSL"\n'
        f'ssl.truststore.location = "{ca.certificate_path}"\n'
        "[listener]\nallow.plaintext.clients = true\n",
    )
    context = load_config(path).upstream.context
    assert problems == [] and context is not None and len(context.get_ca_certs()) == 1


def test_the_proxys_own_certificate_upstream_needs_the_acknowledgement(
    tmp_path: Path, ca: ThrowawayCA
) -> None:
    """Without SASL, every client reaches the brokers as the proxy's certificate."""
    keystore = ca.server("proxy-client", "127.0.0.1")
    upstream = (
        f'[upstream]\nsecurity.protocol = "SSL"\n'
        f'ssl.truststore.location = "{ca.certificate_path}"\n'
        f'ssl.keystore.location = "{keystore}"\n'
        "[listener]\nallow.plaintext.clients = true\n"
    )
    _, problems = load(tmp_path, upstream)
    assert len(problems) == 1
    assert problems[0].startswith("[upstream] key 'ssl.keystore.location': every client reaches")
    _, problems = load(tmp_path, upstream + "acknowledge.broker.sees.proxy = true\n")
    assert problems == []


def test_a_reload_takes_renewed_files_but_refuses_a_new_protocol(
    tmp_path: Path, ca: ThrowawayCA
) -> None:
    keystore = tmp_path / "proxy.pem"
    os.replace(ca.server("first", "127.0.0.1"), keystore)
    path = tmp_path / "proxy.toml"
    path.write_text(
        f'[listener]\nsecurity.protocol = "SSL"\nssl.keystore.location = "{keystore}"\n'
    )
    applied: list[ProxyConfig] = []
    stats = ProxyStats()
    reloader = ConfigReloader(load_config(path), applied.append, stats)
    assert keystore in reloader.config.watched_files()
    before = reloader.config.listener.context
    os.replace(ca.server("renewed", "127.0.0.1"), keystore)
    assert reloader.reload("renewed")
    renewed = applied[-1].listener.context
    assert renewed is not None and renewed is not before
    path.write_text('[listener]\nsecurity.protocol = "PLAINTEXT"\n')
    assert not reloader.reload("protocol") and stats.reloads_failed == 1
    assert reloader.config.listener.security_protocol == "SSL" and len(applied) == 1


def test_cluster_settings_differ_once_a_file_under_the_same_name_is_renewed(
    tmp_path: Path, ca: ThrowawayCA
) -> None:
    """What tells the proxy's own clients (quota store, fleet bus, usage sink) to reconnect
    on a reload: a renewed truststore, not a reload that changed something else."""
    truststore = tmp_path / "cluster-ca.pem"
    truststore.write_bytes(ca.certificate_path.read_bytes())
    path = tmp_path / "proxy.toml"
    path.write_text(
        '[upstream]\nsecurity.protocol = "SSL"\n'
        f'ssl.truststore.location = "{truststore}"\n'
        "[listener]\nallow.plaintext.clients = true\n"
    )
    first = load_config(path).cluster
    assert load_config(path).cluster == first
    os.replace(ThrowawayCA(tmp_path / "renewed").certificate_path, truststore)
    renewed = load_config(path).cluster
    assert renewed != first and renewed.tls.keys == first.tls.keys


def test_tls_clients_in_front_of_a_plaintext_cluster_are_warned_about(
    tmp_path: Path, ca: ThrowawayCA
) -> None:
    keystore = ca.server("proxy", "127.0.0.1")
    listener = f'[listener]\nssl.keystore.location = "{keystore}"\n'
    path, _ = load(
        tmp_path,
        listener
        + 'security.protocol = "SASL_SSL"\n[upstream]\nsecurity.protocol = "SASL_PLAINTEXT"\n',
    )
    config = load_config(path)
    assert unencrypted_upstream(config.listener, config.upstream) == (
        "[listener] speaks SASL_SSL but [upstream] SASL_PLAINTEXT: clients' traffic, SASL "
        "credentials included, crosses the network to the brokers unencrypted"
    )
    path, _ = load(tmp_path, listener + 'security.protocol = "SSL"\n')
    config = load_config(path)
    assert unencrypted_upstream(config.listener, config.upstream) == (
        "[listener] speaks SSL but [upstream] PLAINTEXT: clients' traffic crosses the network "
        "to the brokers unencrypted"
    )
    assert unencrypted_upstream(config.upstream, config.upstream) is None


def test_check_config_describes_both_sides(tmp_path: Path, ca: ThrowawayCA) -> None:
    keystore = ca.server("proxy", "127.0.0.1")
    path, problems = load(
        tmp_path,
        f"""
[listener]
security.protocol = "SSL"
ssl.keystore.location = "{keystore}"
ssl.client.auth = "required"
ssl.truststore.location = "{ca.certificate_path}"
ssl.principal.mapping.rules = "RULE:^CN=(.*?),OU=apps$/$1/L, DEFAULT"
acknowledge.broker.sees.proxy = true
""",
    )
    config = load_config(path)
    assert problems == []
    assert describe(config.listener, config.upstream) == [
        "[listener] SSL, client certificates required, principals by "
        "[RULE:^CN=(.*?),OU=apps$/$1/L, DEFAULT]",
        "[upstream] PLAINTEXT",
        "warning: [listener] speaks SSL but [upstream] PLAINTEXT: clients' traffic crosses the "
        "network to the brokers unencrypted",
    ]
    path, _ = load(tmp_path, "[proxy]\n")
    config = load_config(path)
    assert problems == []
    assert describe(config.listener, config.upstream) == []
