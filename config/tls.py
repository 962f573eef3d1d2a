"""The [listener] and [upstream] sections: TLS towards clients and towards the cluster.

Keys are Kafka's own (security.protocol, ssl.keystore.location with ssl.keystore.type = PEM,
ssl.truststore.location, ssl.client.auth, ssl.endpoint.identification.algorithm), so an
operator copies them from a broker's listener config and from a client's properties. The
SASL half of a security protocol is the clients' business: their SASL exchanges pass through
the proxy to the brokers, so both sections must name SASL or neither.

Validating a section builds its SSL context, so a file that is missing, unreadable, not PEM
or locked by another password is reported at load, naming the key, and the contexts the
proxy serves with are the ones validated.
"""

from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.quotas import flatten_dotted
from config.secrets import SecretError, secret
from config.ssl_principal import SslPrincipalMapper
from config.values import typed_values

PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
#: not a Kafka key: a PLAINTEXT listener in front of a TLS cluster is refused unless set
ALLOW_PLAINTEXT = "allow.plaintext.clients"
#: not a Kafka key: principals from client certificates are refused unless set (the brokers
#: see the proxy, so their ACLs by certificate no longer tell those clients apart)
ACKNOWLEDGE_CERTIFICATES = "acknowledge.broker.sees.proxy"

_SHARED_KEYS: dict[str, tuple[type, ...]] = {
    "security.protocol": (str,),
    "ssl.keystore.type": (str,),
    "ssl.keystore.location": (str,),
    "ssl.key.password": (str,),
    "ssl.truststore.type": (str,),
    "ssl.truststore.location": (str,),
}
#: the JWT claim an OAUTHBEARER token names its principal by: the brokers' own setting, which
#: the listener's must equal (the proxy reads the claim, the broker decides)
SUB_CLAIM_NAME = "sasl.oauthbearer.sub.claim.name"
LISTENER_KEYS = {
    **_SHARED_KEYS,
    SUB_CLAIM_NAME: (str,),
    "ssl.client.auth": (str,),
    "ssl.principal.mapping.rules": (str,),
    ALLOW_PLAINTEXT: (bool,),
    ACKNOWLEDGE_CERTIFICATES: (bool,),
}
_ALGORITHM = "ssl.endpoint.identification.algorithm"
UPSTREAM_KEYS = {**_SHARED_KEYS, _ALGORITHM: (str,)}


@dataclass(frozen=True)
class TlsSettings:
    """One side's security protocol and, when it is SSL or SASL_SSL, its SSL context."""

    security_protocol: str = "PLAINTEXT"
    #: built from the files when the config was loaded (equal settings compare by their keys)
    context: ssl.SSLContext | None = field(default=None, compare=False)
    #: [listener] only, with ssl.client.auth: names a client from its certificate
    principal_mapper: SslPrincipalMapper | None = field(default=None, compare=False)
    #: the section's keys as written (Kafka's names), valid ones only
    keys: tuple[tuple[str, Any], ...] = ()
    #: of the files' contents as the context was built from them: a renewal replaces a file
    #: under the same name, so the keys stay equal and this does not
    digest: str = ""

    def value(self, key: str) -> Any:
        return dict(self.keys).get(key)

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol.endswith("SSL")

    @property
    def files(self) -> tuple[str, ...]:
        """The keystore and truststore this side reads, watched for renewal."""
        paths = (self.value("ssl.keystore.location"), self.value("ssl.truststore.location"))
        return tuple(path for path in paths if path is not None)


def parse_tls(
    listener: dict[str, Any], upstream: dict[str, Any], problems: list[str]
) -> tuple[TlsSettings, TlsSettings]:
    """([listener], [upstream]), appending one message per problem."""
    clients = _parse_side("listener", flatten_dotted(listener), LISTENER_KEYS, problems)
    cluster = parse_tls_side("upstream", flatten_dotted(upstream), problems)
    if clients.sasl != cluster.sasl:
        problems.append(
            f"[listener] key 'security.protocol': {clients.security_protocol} in front of "
            f"[upstream] {cluster.security_protocol}: clients' SASL exchanges pass through to "
            "the brokers, so both name SASL or neither"
        )
    acknowledged = clients.value(ACKNOWLEDGE_CERTIFICATES)
    if cluster.value("ssl.keystore.location") and not cluster.sasl and not acknowledged:
        problems.append(
            "[upstream] key 'ssl.keystore.location': every client reaches the brokers as the "
            "proxy's certificate and gets that principal's ACLs there; set [listener] "
            f"{ACKNOWLEDGE_CERTIFICATES} = true to run so"
        )
    if cluster.tls and not clients.tls and not clients.value(ALLOW_PLAINTEXT):
        problems.append(
            f"[listener] key 'security.protocol': {clients.security_protocol} in front of "
            f"a TLS cluster would carry clients' traffic (and SASL credentials) unencrypted "
            f"to the proxy; set [listener] ssl.keystore.location and security.protocol = "
            f"SSL or SASL_SSL, or {ALLOW_PLAINTEXT} = true if that network is trusted"
        )
    return clients, cluster


def unencrypted_upstream(clients: TlsSettings, cluster: TlsSettings) -> str | None:
    """The warning for TLS clients in front of a plaintext cluster: allowed (the proxy often
    sits beside the brokers), but what the clients encrypted, SASL credentials included,
    crosses the network to the brokers in clear."""
    if not clients.tls or cluster.tls:
        return None
    return (
        f"[listener] speaks {clients.security_protocol} but [upstream] "
        f"{cluster.security_protocol}: clients' traffic"
        + (", SASL credentials included," if clients.sasl else "")
        + " crosses the network to the brokers unencrypted"
    )


def describe(clients: TlsSettings, cluster: TlsSettings) -> list[str]:
    """What check-config says of the two sides; nothing when both are PLAINTEXT and no
    OAUTHBEARER claim is named."""
    claim = clients.value(SUB_CLAIM_NAME)
    oauth = (
        [
            f"[listener] OAUTHBEARER principals by the token's {claim!r} claim (the brokers' must "
            "be the same)"
        ]
        if claim
        else []
    )
    if not clients.tls and not cluster.tls:
        return oauth
    listener = f"[listener] {clients.security_protocol}"
    if clients.principal_mapper is not None:
        auth = clients.value("ssl.client.auth")
        listener += f", client certificates {auth}, principals by {clients.principal_mapper}"
    upstream = f"[upstream] {cluster.security_protocol}"
    if cluster.tls:
        checked = "hostnames verified" if cluster.value(_ALGORITHM) != "" else "no hostname check"
        trusted = cluster.value("ssl.truststore.location") or "the system's CAs"
        upstream += f", trusting {trusted}, {checked}"
    warning = unencrypted_upstream(clients, cluster)
    return [listener, upstream, *oauth, *([f"warning: {warning}"] if warning else [])]


def parse_tls_side(name: str, values: dict[str, Any], problems: list[str]) -> TlsSettings:
    """A side towards the brokers ([upstream], the proxy's own [cluster]), flattened keys."""
    return _parse_side(name, values, UPSTREAM_KEYS, problems)


def _parse_side(
    name: str, flat: dict[str, Any], known: dict[str, tuple[type, ...]], problems: list[str]
) -> TlsSettings:
    values = typed_values(name, flat, known, problems)
    protocol = values.get("security.protocol", "PLAINTEXT")
    if protocol not in PROTOCOLS:
        problems.append(
            f"[{name}] key 'security.protocol': expected one of {', '.join(PROTOCOLS)}, "
            f"got {protocol!r}"
        )
        protocol = "PLAINTEXT"
    if values.get(SUB_CLAIM_NAME) == "":
        problems.append(f"[{name}] key '{SUB_CLAIM_NAME}': a claim name, got ''")
        del values[SUB_CLAIM_NAME]
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if values.get(key, "PEM") != "PEM":
            problems.append(f"[{name}] key '{key}': only PEM is read, got {values[key]!r}")
    keys = tuple(sorted(values.items()))
    if not protocol.endswith("SSL"):
        ssl_keys = sorted(key for key in values if key.startswith("ssl."))
        if ssl_keys:
            problems.append(
                f"[{name}] key '{ssl_keys[0]}': set, but security.protocol is {protocol}"
            )
        return TlsSettings(protocol, keys=keys)
    if name != "listener":
        context = _client_context(name, values, problems)
        return TlsSettings(protocol, context, keys=keys, digest=_digest(values))
    context = _server_context(values, problems)
    mapper = _principal_mapper(values, problems) if context is not None else None
    return TlsSettings(protocol, context, mapper, keys, _digest(values))


def _digest(values: dict[str, Any]) -> str:
    """Read after the context was built: a file replaced in between is seen changed by the
    reloader's next look, and read again."""
    digest = hashlib.sha256()
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        path = values.get(key)
        if path is None:
            continue
        try:
            digest.update(Path(path).read_bytes())
        except OSError:  # the context's load has said why
            continue
    return digest.hexdigest()


def _principal_mapper(values: dict[str, Any], problems: list[str]) -> SslPrincipalMapper | None:
    """Kafka names a client that presents a certificate from it (DefaultKafkaPrincipalBuilder);
    without ssl.client.auth no client presents one, and each is User:ANONYMOUS."""
    rules = values.get("ssl.principal.mapping.rules", "DEFAULT")
    try:
        mapper = SslPrincipalMapper(rules)
    except ValueError as exc:
        problems.append(f"[listener] key 'ssl.principal.mapping.rules': {exc}")
        return None
    if values.get("ssl.client.auth", "none") == "none":
        return None
    if not values.get(ACKNOWLEDGE_CERTIFICATES, False):
        problems.append(
            "[listener] key 'ssl.client.auth': clients are named from their certificates "
            "here, but the brokers see the proxy's connection, so ACLs by certificate on the "
            "brokers no longer tell these clients apart; set "
            f"{ACKNOWLEDGE_CERTIFICATES} = true to run so"
        )
        return None
    return mapper


def _server_context(values: dict[str, Any], problems: list[str]) -> ssl.SSLContext | None:
    """The listeners' context: TLS 1.2 or later, the proxy's certificate, and the clients'
    certificates checked against the truststore when ssl.client.auth asks for them."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    keystore = values.get("ssl.keystore.location")
    if keystore is None:
        problems.append(
            "[listener] key 'ssl.keystore.location': required for security.protocol "
            f"{values['security.protocol']} (a PEM file with the key and certificate chain)"
        )
        return None
    if not _load_keystore("listener", context, keystore, values, problems):
        return None
    auth = values.get("ssl.client.auth", "none")
    if auth not in _CLIENT_AUTH:
        problems.append(
            f"[listener] key 'ssl.client.auth': expected one of {', '.join(_CLIENT_AUTH)}, "
            f"got {auth!r}"
        )
        return None
    truststore = values.get("ssl.truststore.location")
    if auth != "none":
        if truststore is None:
            problems.append(
                f"[listener] key 'ssl.truststore.location': required for ssl.client.auth = "
                f"{auth} (the CAs whose client certificates are accepted)"
            )
            return None
        if not _load_truststore("listener", context, truststore, problems):
            return None
        context.verify_mode = _CLIENT_AUTH[auth]
    return context


def _client_context(
    name: str, values: dict[str, Any], problems: list[str]
) -> ssl.SSLContext | None:
    """The context towards the brokers: their certificates verified against the truststore
    (the system's CAs without one), hostnames verified unless the algorithm is "", and the
    proxy's own certificate when the cluster asks for one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # certificates and hostnames verified
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    algorithm = values.get(_ALGORITHM, "https")
    if algorithm not in ("https", ""):
        problems.append(
            f"[{name}] key 'ssl.endpoint.identification.algorithm': expected \"https\" or "
            f'"" (no hostname verification), got {algorithm!r}'
        )
        return None
    context.check_hostname = algorithm == "https"
    truststore = values.get("ssl.truststore.location")
    if truststore is None:
        context.load_default_certs()  # as Java's default truststore; with one, only it
    elif not _load_truststore(name, context, truststore, problems):
        return None
    keystore = values.get("ssl.keystore.location")
    if keystore is not None and not _load_keystore(name, context, keystore, values, problems):
        return None
    return context


def _load_keystore(
    name: str, context: ssl.SSLContext, path: str, values: dict[str, Any], problems: list[str]
) -> bool:
    password = values.get("ssl.key.password")
    reference = secret(password)
    try:
        if reference is not None:
            password = reference.value()
        context.load_cert_chain(path, password=password)
    except SecretError as exc:
        problems.append(f"[{name}] key 'ssl.key.password': {exc}")
        return False
    except ssl.SSLError as exc:  # OpenSSL's text names its own source line
        problems.append(
            f"[{name}] key 'ssl.keystore.location': cannot load {path}: not a PEM certificate "
            f"chain with its private key, or the key's password is wrong{_reason(exc)}"
        )
        return False
    except OSError as exc:
        problems.append(f"[{name}] key 'ssl.keystore.location': cannot load {path}: {exc}")
        return False
    return True


def _load_truststore(name: str, context: ssl.SSLContext, path: str, problems: list[str]) -> bool:
    try:
        context.load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        problems.append(
            f"[{name}] key 'ssl.truststore.location': cannot load {path}: no PEM certificate "
            f"in it{_reason(exc)}"
        )
        return False
    except OSError as exc:
        problems.append(f"[{name}] key 'ssl.truststore.location': cannot load {path}: {exc}")
        return False
    return True


def _reason(exc: ssl.SSLError) -> str:
    """OpenSSL's name for what it refused, when it gives one (not its source line)."""
    return f" ({exc.reason})" if exc.reason else ""
