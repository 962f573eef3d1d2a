"""The proxy's own connection to its cluster, as its own principal ([cluster]).

What the proxy asks the cluster for itself, outside any client's connection (the brokers, at
start-up), it asks here with the same call handlers use on a client's connection: an api key,
a version and a body in, the response frame out. On a SASL cluster the connection first
authenticates with the [cluster] credentials (protocol/sasl_client.py), as a Kafka client does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from struct import Struct
from typing import Any, Final

from config.cluster import ClusterSettings
from config.errors import StartupError
from config.loader import ProxyConfig
from config.secrets import SecretError
from protocol.apis import DECODED, SASL_AUTHENTICATE, SASL_HANDSHAKE
from protocol.codec import decode_response
from protocol.errors import ProtocolError
from protocol.headers import (
    OWN_CLIENT_ID,
    encode_request,
    response_body_offset,
    response_correlation_id,
)
from protocol.sasl_client import SaslClient

log = logging.getLogger(__name__)

_INT32: Final = Struct(">i")
_HANDSHAKE_VERSION: Final = 1
_AUTHENTICATE_VERSION: Final = 2


class AuthenticationFailed(Exception):
    """The cluster refused the [cluster] credentials: a config error, not a passing fault.
    `key` is the one to look at: the mechanism the cluster does not take, else the password."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class ClusterClient:
    def __init__(
        self, settings: ClusterSettings, addresses: Sequence[tuple[str, int]], timeout_s: float
    ) -> None:
        self._settings = settings
        self._addresses = addresses
        self._timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def __aenter__(self) -> ClusterClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def connect(self) -> None:
        """Connect to the first address that answers, and authenticate; OSError when none
        does, AuthenticationFailed when the cluster refuses the credentials."""
        tls = self._settings.tls.context
        errors = []
        for host, port in self._addresses:
            try:
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        host, port, ssl=tls, server_hostname=host if tls is not None else None
                    ),
                    self._timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                errors.append(f"{host}:{port}: {str(exc) or type(exc).__name__}")
                continue
            if self._settings.sasl:
                try:
                    await self._authenticate()
                except BaseException:  # __aexit__ does not run when __aenter__ fails
                    self.close()
                    raise
            return
        raise OSError(f"no bootstrap server of the cluster reachable ({'; '.join(errors)})")

    async def ask(self, api_key: int, api_version: int, body: bytes) -> bytes:
        """One request of the proxy's own; its response frame."""
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None, "not connected"
        self._correlation_id = correlation_id = self._correlation_id + 1
        writer.write(encode_request(api_key, api_version, correlation_id, OWN_CLIENT_ID, body))
        size = _INT32.unpack(await asyncio.wait_for(reader.readexactly(4), self._timeout_s))[0]
        frame = _INT32.pack(size) + await asyncio.wait_for(
            reader.readexactly(size), self._timeout_s
        )
        if response_correlation_id(frame) != correlation_id:
            raise ProtocolError("the cluster answered out of order")
        return frame

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = self._reader = None

    async def _authenticate(self) -> None:
        settings = self._settings
        assert settings.sasl_mechanism is not None and settings.username is not None
        assert settings.password is not None
        who = f"{settings.sasl_mechanism} as User:{settings.username}"
        try:
            password = settings.password.value()
        except SecretError as exc:
            raise AuthenticationFailed("sasl.password", f"{who}: {exc}") from exc
        client = SaslClient(settings.sasl_mechanism, settings.username, password)
        handshake = await self._call(
            SASL_HANDSHAKE, _HANDSHAKE_VERSION, mechanism=settings.sasl_mechanism
        )
        if handshake.error_code:
            raise AuthenticationFailed(
                "sasl.mechanism", f"{who}: the cluster takes only {', '.join(handshake.mechanisms)}"
            )
        token = client.next_token(None)
        while token is not None:
            answer = await self._call(SASL_AUTHENTICATE, _AUTHENTICATE_VERSION, auth_bytes=token)
            if answer.error_code:
                raise AuthenticationFailed(
                    "sasl.password", f"{who}: {answer.error_message or 'refused'}"
                )
            try:
                token = client.next_token(bytes(answer.auth_bytes or b""))
            except ProtocolError as exc:
                raise AuthenticationFailed("sasl.password", f"{who}: {exc}") from exc
        log.info("the proxy's own client is authenticated to the cluster: %s", who)

    async def _call(self, api_key: int, version: int, **fields: Any) -> Any:
        body = bytes(DECODED[api_key][0](**fields).encode(version=version))
        frame = await self.ask(api_key, version, body)
        return decode_response(
            frame, response_body_offset(frame, api_key, version), api_key, version
        )


async def reach_cluster(config: ProxyConfig) -> None:
    """The cluster answers the proxy's own client, before its topics are opened: aiokafka
    would say only that the quota store or the bus timed out, where the operator needs the
    key to fix, the addresses tried, and whether the credentials were refused (raised as
    AuthenticationFailed)."""
    settings = config.proxy
    try:
        async with ClusterClient(
            config.cluster, settings.upstream_addresses(), settings.connect_timeout_s
        ):
            pass
    except (OSError, TimeoutError, EOFError, ProtocolError) as exc:
        servers = ", ".join(settings.upstream_bootstrap_servers)
        raise StartupError(
            config.path or "config",
            [f"[proxy] key 'upstream_bootstrap_servers' = [{servers}]: {str(exc) or repr(exc)}"],
        ) from exc
