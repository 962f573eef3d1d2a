"""The principal builder: the one place that names a connection's principal.

As Kafka's DefaultKafkaPrincipalBuilder: a client that presents a certificate to a listener
asking for one is User: + its subject through ssl.principal.mapping.rules, and a SASL exchange
on top names it again, with the user its mechanism authenticates. The proxy verifies nothing
itself: a certificate was verified by the TLS handshake, and a SASL name is adopted only once
the broker answers the exchange with success (protocol/sasl.py). Each SASL mechanism the proxy
can learn is one entry of the mechanism table; a principal source is a method here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from config.ssl_principal import SslPrincipalMapper, distinguished_name
from protocol.sasl import MECHANISMS, Mechanism, SaslExchange
from proxy.handlers.base import Channel, Request

log = logging.getLogger(__name__)

#: a client whose tokens name no principal the proxy can read is said so once in this long
_WARN_EVERY_MS = 10_000
#: client addresses remembered for it, before the oldest are forgotten
_WARNED_KEPT = 10_000


class PrincipalBuilder:
    def __init__(
        self,
        certificates: SslPrincipalMapper | None = None,
        mechanisms: Mapping[str, Mechanism] = MECHANISMS,
    ) -> None:
        #: ssl.principal.mapping.rules of a listener with ssl.client.auth; None: certificates
        #: name nobody
        self.certificates = certificates
        self.mechanisms = mechanisms
        #: client address (no port) -> when it was last warned about, ms
        self._warned: dict[str, int] = {}

    def exchange(self) -> SaslExchange:
        """A new connection's SASL state, over this builder's mechanisms."""
        return SaslExchange(self.mechanisms)

    def from_certificate(self, channel: Channel, certificate: bytes | None) -> bool:
        """Name the connection from the certificate its client presented (DER); False when
        no rule maps its subject, as the client's authentication fails on a broker (the
        connection is closed). A client without one stays User:ANONYMOUS."""
        if self.certificates is None or not certificate:
            return True
        try:
            channel.user = self.certificates.name(distinguished_name(certificate))
        except ValueError as exc:  # NoMatchingRule, or a replacement Java would refuse
            log.warning(
                "closing client %s: no principal for its certificate: %s", channel.peer, exc
            )
            return False
        log.info(
            "client %s authenticated as User:%s by its certificate", channel.peer, channel.user
        )
        return True

    def on_handshake_request(self, channel: Channel, request: Request) -> None:
        channel.sasl.on_handshake_request(request.frame, request.header)

    def on_handshake_response(self, channel: Channel, frame: bytes, request: Request) -> None:
        sasl = channel.sasl
        sasl.on_handshake_response(frame, request.header.api_version)
        if sasl.mechanism is not None and not sasl.learnable:
            log.warning(
                "client %s authenticates with %s, whose principal the proxy cannot learn: "
                "its quotas are those of User:%s",
                channel.peer,
                sasl.mechanism,
                channel.user,
            )

    def on_authenticate_request(self, channel: Channel, request: Request) -> None:
        if not channel.sasl.on_authenticate_request(request.frame, request.header):
            self._unreadable(channel, request.now_ms)

    def _unreadable(self, channel: Channel, now_ms: int) -> None:
        """A warning per client address per 10 s: a client reconnecting in a loop with an
        opaque token would otherwise take every line the log's filter of repeated lines
        (proxy/observability/log_limit.py: 5 of a kind per 10 s, whoever causes them) lets
        through, and
        hide the other clients that need telling."""
        address = channel.address
        if now_ms - self._warned.get(address, now_ms - _WARN_EVERY_MS) < _WARN_EVERY_MS:
            return
        if len(self._warned) >= _WARNED_KEPT:
            self._warned = {
                kept: at for kept, at in self._warned.items() if now_ms - at < _WARN_EVERY_MS
            }
        self._warned[address] = now_ms
        log.warning(
            "client %s authenticates with %s, but its token names no principal the proxy "
            "can read (an opaque or encrypted token, or no such claim): its quotas are "
            "those of User:%s",
            channel.peer,
            channel.sasl.mechanism,
            channel.user,
        )

    def on_authenticate_response(self, channel: Channel, frame: bytes, request: Request) -> None:
        user = channel.sasl.on_authenticate_response(frame, request.header.api_version)
        if user is not None:
            log.info("client %s authenticated as User:%s", channel.peer, user)
            channel.user = user
