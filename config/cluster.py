"""The [cluster] section: the proxy's own identity on the cluster it fronts.

Clients' SASL exchanges pass through the proxy, which holds no credentials of theirs; what the
proxy asks the cluster for itself (the brokers at start-up, the usage samples' topic) goes
through one client of its own, configured under Kafka's client names. Without the section it
is the [upstream] TLS without SASL, as before: a SASL cluster then cannot be asked.

    [cluster]
    security.protocol = "SASL_SSL"            # else [upstream]'s
    sasl.mechanism = "SCRAM-SHA-512"           # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    sasl.username = "kafka-quota-proxy"
    sasl.password = "${env:KQP_CLUSTER_PASSWORD}"   # or ${file:/etc/kqp/cluster.properties:pw}
    ssl.truststore.location = "/etc/kqp/cluster-ca.pem"   # TLS keys as [upstream]

The password is a reference (config/secrets.py), never a value in the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from config.quotas import flatten_dotted
from config.secrets import Secret, SecretError, secret
from config.tls import TlsSettings, parse_tls_side
from protocol.sasl_client import MECHANISMS

SASL_KEYS = ("sasl.mechanism", "sasl.username", "sasl.password")
_SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password"})


@dataclass(frozen=True)
class ClusterSettings:
    """The proxy's own client: TLS as [upstream] (or its own), and SASL credentials."""

    tls: TlsSettings = field(default_factory=TlsSettings)
    sasl_mechanism: str | None = None
    username: str | None = None
    password: Secret | None = None
    #: whether the section is in the file (else everything is [upstream]'s)
    configured: bool = False

    @property
    def security_protocol(self) -> str:
        return self.tls.security_protocol

    @property
    def sasl(self) -> bool:
        return self.tls.sasl and self.password is not None

    def describe(self) -> str:
        """What check-config says of it: never the password, only where it is read from."""
        text = f"[cluster] {self.security_protocol}"
        if self.sasl:
            text += f", {self.sasl_mechanism} as User:{self.username} (password {self.password})"
        return text

    def aiokafka_options(self) -> dict[str, Any]:
        """The proxy's own client as aiokafka takes it (the usage sink, topics of its own);
        the password is read now. Raises SecretError."""
        options: dict[str, Any] = {
            "security_protocol": self.security_protocol,
            "ssl_context": self.tls.context,
        }
        if self.sasl:
            assert self.password is not None
            options.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.username,
                sasl_plain_password=self.password.value(),
            )
        return options


def parse_cluster(
    section: dict[str, Any], upstream: TlsSettings, problems: list[str]
) -> ClusterSettings:
    """[cluster], appending one message per problem; never a secret's value in one."""
    if not section:
        return ClusterSettings(upstream)
    values = flatten_dotted(section)
    for key in _SECRET_KEYS:
        if key in values and secret(values[key]) is None:
            problems.append(
                f"[cluster] key '{key}': write where the secret is, "
                "${env:NAME}, ${file:PATH:KEY} or ${directory:DIR:FILE}, not the secret itself"
            )
            values.pop(key)
    sasl_values = {key: values.pop(key) for key in SASL_KEYS if key in values}
    tls = parse_tls_side("cluster", values, problems) if values else upstream
    mechanism = sasl_values.get("sasl.mechanism")
    username = sasl_values.get("sasl.username")
    password = secret(sasl_values.get("sasl.password"))
    if not tls.sasl:
        if sasl_values:
            problems.append(
                f"[cluster] key '{next(iter(sasl_values))}': set, but security.protocol is "
                f"{tls.security_protocol}"
            )
        return ClusterSettings(tls, configured=True)
    if mechanism not in MECHANISMS:
        problems.append(
            f"[cluster] key 'sasl.mechanism': expected one of {', '.join(MECHANISMS)}, "
            f"got {mechanism!r}"
        )
    if not isinstance(username, str) or not username:
        problems.append("[cluster] key 'sasl.username': required with SASL")
    if password is None:
        problems.append("[cluster] key 'sasl.password': required with SASL")
    else:
        try:
            password.value()
        except SecretError as exc:
            problems.append(f"[cluster] key 'sasl.password': {exc}")
    return ClusterSettings(tls, mechanism, username, password, configured=True)
