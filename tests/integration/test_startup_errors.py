"""Every configuration or environment mistake at start-up ends with one line that names the
section, the key and the value, and status 2; never a traceback.

One table: each case writes a config (and takes a port, or leaves a variable unset), runs
`kafka-quota-proxy run` as an operator would, and compares the last line it printed. Cases
on a SASL cluster use the session's three brokers; the others need no Kafka.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.ports import free_port
from tests.integration.support.clients import CLUSTER, IDENTITY_USERS, PASSWORD_ENV

#: a port nothing listens on: connection refused at once
REFUSED = "127.0.0.1:1"
#: TEST-NET-1 (RFC 5737): an address of no machine's interface
NOT_HERE = "192.0.2.1"


@dataclass
class Setting:
    """What a case may refer to in its config and its expected line."""

    tmp: Path
    stack: ExitStack
    sasl_address: Callable[[], str]
    ports: dict[str, int] = field(default_factory=dict)

    def port(self, name: str) -> int:
        if name not in self.ports:
            self.ports[name] = free_port()
        return self.ports[name]

    def taken(self, name: str) -> int:
        """A port some other process listens on (a second `make run`)."""
        sock = self.stack.enter_context(socket.socket())
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        self.ports[name] = sock.getsockname()[1]
        return self.ports[name]


def proxy(
    setting: Setting, upstream: str = REFUSED, metrics_port: int | None = None, **keys: object
) -> str:
    """[proxy] with `keys`; metrics only when a port is given; no usage samples."""
    metrics = "enabled = false" if metrics_port is None else f"port = {metrics_port}"
    values = {
        "upstream_bootstrap_servers": [upstream],
        "bootstrap_port": setting.port("bootstrap"),
        "broker_port_base": setting.port("brokers"),
        "connect_timeout_s": 2,
        **keys,
    }
    lines = "\n".join(f"{key} = {toml(value)}" for key, value in values.items())
    return f"[proxy]\n{lines}\n\n[metrics]\n{metrics}\n\n[usage]\nenabled = false\n"


def toml(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(toml(item) for item in value) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


def sasl(setting: Setting, workers: int = 1) -> str:
    """Clients' SASL passed through to the brokers' SASL listener (both sides name it)."""
    return proxy(setting, setting.sasl_address(), workers=workers) + (
        '\n[listener]\nsecurity.protocol = "SASL_PLAINTEXT"\n'
        '\n[upstream]\nsecurity.protocol = "SASL_PLAINTEXT"\n'
    )


def usage_under_a_file(setting: Setting) -> str:
    (setting.tmp / "a-file").write_text("")
    return proxy(setting).replace(
        "[usage]\nenabled = false", f'[usage]\nenabled = true\ndirectory = "{setting.tmp}/a-file/x"'
    )


def listener_tls(setting: Setting, keystore: str) -> str:
    return proxy(setting) + (
        f'\n[listener]\nsecurity.protocol = "SSL"\nssl.keystore.location = "{keystore}"\n'
    )


def not_a_certificate(setting: Setting) -> str:
    (setting.tmp / "proxy.pem").write_text("not a certificate\n")
    return listener_tls(setting, f"{setting.tmp}/proxy.pem")


@dataclass(frozen=True)
class Case:
    name: str
    config: Callable[[Setting], str]
    #: the last line printed, formatted with the config's path and the setting's ports
    line: str
    env: dict[str, str | None] = field(default_factory=dict)


CASES = [
    Case(
        "no file",
        lambda s: "",
        "kafka-quota-proxy: invalid config: {missing}: cannot read: No such file or directory",
    ),
    Case(
        "not TOML",
        lambda s: "[proxy\n",
        "kafka-quota-proxy: invalid config: {path}: not valid TOML: Expected ']' at the end of "
        "a table declaration (at line 1, column 7)",
    ),
    Case(
        "a port that is not a number",
        lambda s: proxy(s, bootstrap_port="9192"),
        "kafka-quota-proxy: invalid config: {path}: [proxy] key 'bootstrap_port': expected "
        "int, got str '9192'",
    ),
    Case(
        "the bootstrap port in use",
        lambda s: proxy(s, bootstrap_port=s.taken("bootstrap")),
        "kafka-quota-proxy: cannot start: {path}: [proxy] key 'bootstrap_port' = {bootstrap}: "
        "cannot listen on 127.0.0.1:{bootstrap}: Address already in use",
    ),
    Case(
        "the metrics port in use",
        lambda s: proxy(s, metrics_port=s.taken("metrics")),
        "kafka-quota-proxy: cannot start: {path}: [metrics] key 'port' = {metrics}: cannot "
        "listen on 127.0.0.1:{metrics}: Address already in use",
    ),
    Case(
        "a listen host of another machine",
        lambda s: proxy(s, listen_host=NOT_HERE),
        "kafka-quota-proxy: cannot start: {path}: [proxy] key 'listen_host' = '192.0.2.1': "
        "cannot listen on 192.0.2.1:{bootstrap}: Cannot assign requested address",
    ),
    Case(
        "a listen host no name service knows",
        lambda s: proxy(s, listen_host="proxy.invalid"),
        "kafka-quota-proxy: cannot start: {path}: [proxy] key 'listen_host' = 'proxy.invalid': "
        "cannot listen on proxy.invalid:{bootstrap}: Name or service not known",
    ),
    Case(
        "a usage directory that cannot be made",
        usage_under_a_file,
        "kafka-quota-proxy: invalid config: {path}: [usage] key 'directory': cannot write "
        "'{tmp}/a-file/x': [Errno 20] Not a directory: '{tmp}/a-file/x'",
    ),
    Case(
        "a certificate that is not there",
        lambda s: listener_tls(s, f"{s.tmp}/absent.pem"),
        "kafka-quota-proxy: invalid config: {path}: [listener] key 'ssl.keystore.location': "
        "cannot load {tmp}/absent.pem: [Errno 2] No such file or directory",
    ),
    Case(
        "a certificate that is not a certificate",
        not_a_certificate,
        "kafka-quota-proxy: invalid config: {path}: [listener] key 'ssl.keystore.location': "
        "cannot load {tmp}/proxy.pem: not a PEM certificate chain with its private key, or "
        "the key's password is wrong",
    ),
    Case(
        "no bootstrap server answers the quota store",
        lambda s: proxy(s) + '\n[quota_store]\ntopic = "kqp-quotas"\n',
        "kafka-quota-proxy: cannot start: {path}: [proxy] key 'upstream_bootstrap_servers' = "
        "[127.0.0.1:1]: no bootstrap server of the cluster reachable (127.0.0.1:1: [Errno 111] "
        "Connection refused)",
    ),
    Case(
        "no bootstrap server answers the fleet",
        lambda s: proxy(s) + '\n[fleet]\nname = "edge"\n',
        "kafka-quota-proxy: cannot start: {path}: [proxy] key 'upstream_bootstrap_servers' = "
        "[127.0.0.1:1]: no bootstrap server of the cluster reachable (127.0.0.1:1: [Errno 111] "
        "Connection refused)",
    ),
    Case(
        "a quota store on a SASL cluster without [cluster]",
        lambda s: sasl(s) + '\n[quota_store]\ntopic = "kqp-quotas"\n',
        "kafka-quota-proxy: invalid config: {path}: [quota_store] key 'topic' = 'kqp-quotas': "
        "the upstream cluster speaks SASL_PLAINTEXT and the proxy holds no SASL credentials of "
        "its own; give it some in [cluster]",
    ),
    Case(
        "workers on a SASL cluster without [cluster]",
        lambda s: sasl(s, workers=2),
        "kafka-quota-proxy: invalid config: {path}: [proxy] key 'workers' = 2: workers share "
        "one budget through a topic on the cluster, which speaks SASL_PLAINTEXT, and the proxy "
        "holds no SASL credentials of its own; give it some in [cluster]",
    ),
    Case(
        "a [cluster] password whose variable is not set",
        lambda s: sasl(s) + CLUSTER,
        "kafka-quota-proxy: invalid config: {path}: [cluster] key 'sasl.password': "
        f"${{{{env:{PASSWORD_ENV}}}}}: the environment variable {PASSWORD_ENV} is not set",
        env={PASSWORD_ENV: None},
    ),
    Case(
        "a [cluster] password the cluster refuses",
        lambda s: sasl(s) + CLUSTER,
        "kafka-quota-proxy: cannot start: {path}: [cluster] key 'sasl.password': the cluster "
        "refused the proxy's own client, SCRAM-SHA-512 as User:kqp: Authentication failed "
        "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
        env={PASSWORD_ENV: "not-the-secret-at-all"},
    ),
    Case(
        "a [cluster] password the cluster refuses, with a quota store",
        lambda s: sasl(s) + CLUSTER + '\n[quota_store]\ntopic = "kqp-quotas"\n',
        "kafka-quota-proxy: cannot start: {path}: [cluster] key 'sasl.password': the cluster "
        "refused the proxy's own client, SCRAM-SHA-512 as User:kqp: Authentication failed "
        "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
        env={PASSWORD_ENV: "not-the-secret-at-all"},
    ),
]


@pytest.fixture
def setting(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Setting]:
    def sasl_address() -> str:  # the session's brokers, only for the cases that need them
        kafka: KafkaCluster = request.getfixturevalue("kafka3")
        return kafka.brokers[0].sasl_address

    with ExitStack() as stack:
        yield Setting(tmp_path, stack, sasl_address)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_start_up_mistake_is_one_line_naming_its_key_and_status_2(
    case: Case, setting: Setting
) -> None:
    path = setting.tmp / "proxy.toml"
    missing = setting.tmp / "absent.toml"
    text = case.config(setting)
    if text:
        path.write_text(text)
    env = {**os.environ, PASSWORD_ENV: IDENTITY_USERS["kqp"]}
    for name, value in case.env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    run = subprocess.run(
        [sys.executable, "-m", "proxy", "run", "--config", str(path if text else missing)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    expected = case.line.format(path=path, missing=missing, tmp=setting.tmp, **setting.ports)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.splitlines()[-1] == expected
    assert "not-the-secret-at-all" not in run.stderr + run.stdout
