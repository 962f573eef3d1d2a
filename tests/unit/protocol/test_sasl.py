"""The principal comes from the SASL exchange only once the broker reports success."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from localkafka.inprocess.wire import request_frame, response_frame
from protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader, parse_request_header
from protocol.sasl import SaslExchange, plain_user, scram_user

AUTH_VERSION = 2  # flexible: request header v2, compact bytes
FAILED = 58  # SASL_AUTHENTICATION_FAILED


def request(api_key: int, version: int, body: Any) -> tuple[bytes, RequestHeader]:
    frame = request_frame(api_key, version, body, client_id=b"client")
    return frame, parse_request_header(frame)


def handshake(exchange: SaslExchange, mechanism: str, error: int = 0) -> None:
    exchange.on_handshake_request(
        *request(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))
    )
    body = SaslHandshakeResponse(error_code=error, mechanisms=["PLAIN", "SCRAM-SHA-256"])
    exchange.on_handshake_response(response_frame(SASL_HANDSHAKE, 1, body, 1), 1)


def authenticate(
    exchange: SaslExchange, token: bytes, reply: bytes, error: int = 0, lifetime_ms: int = 0
) -> str | None:
    exchange.on_authenticate_request(
        *request(SASL_AUTHENTICATE, AUTH_VERSION, SaslAuthenticateRequest(auth_bytes=token))
    )
    body = SaslAuthenticateResponse(
        error_code=error, error_message=None, auth_bytes=reply, session_lifetime_ms=lifetime_ms
    )
    frame = response_frame(SASL_AUTHENTICATE, AUTH_VERSION, body, 1)
    return exchange.on_authenticate_response(frame, AUTH_VERSION)


def test_plain_user_is_adopted_only_on_success() -> None:
    exchange = SaslExchange()
    handshake(exchange, "PLAIN")
    assert authenticate(exchange, b"\x00alice\x00secret", b"") == "alice"
    failed = SaslExchange()
    handshake(failed, "PLAIN")
    assert authenticate(failed, b"\x00alice\x00wrong", b"", error=FAILED) is None


def test_plain_principal_is_the_authcid_not_the_requested_authzid() -> None:
    assert plain_user(b"admin\x00alice\x00secret") == "alice"
    assert plain_user(b"\x00\x00secret") is None
    assert plain_user(b"garbage") is None


def test_scram_user_needs_both_steps_and_the_server_verifier() -> None:
    first = b"n,,n=al=2Cice=3D,r=nonce"
    assert scram_user(first) == "al,ice="
    assert scram_user(b"n,a=bob,n=bob,r=x") == "bob"
    # a delegation token's id is not its owner's name
    assert scram_user(b"n,,n=token-id,r=x,tokenauth=true") is None
    exchange = SaslExchange()
    handshake(exchange, "SCRAM-SHA-512")
    assert authenticate(exchange, first, b"r=nonce+server,s=salt,i=4096") is None
    assert authenticate(exchange, b"c=biws,r=nonce+server,p=proof", b"v=verifier") == "al,ice="
    # the broker refusing the client proof yields nothing
    refused = SaslExchange()
    handshake(refused, "SCRAM-SHA-256")
    assert authenticate(refused, first, b"r=nonce+server,s=salt,i=4096") is None
    assert authenticate(refused, b"c=biws,r=nonce+server,p=bad", b"", error=FAILED) is None
    # a success without the verifier is not a completed SCRAM exchange
    odd = SaslExchange()
    handshake(odd, "SCRAM-SHA-256")
    authenticate(odd, first, b"r=x")
    assert authenticate(odd, b"c=biws,r=x,p=proof", b"e=other-error") is None


def test_an_exchange_says_when_the_broker_refused_it() -> None:
    """What the failed-login backoff counts: an error, or a last token that does not confirm
    the exchange; not a step on the way, and not a success."""
    first = b"n,,n=alice,r=nonce"
    scram = SaslExchange()
    handshake(scram, "SCRAM-SHA-256")
    authenticate(scram, first, b"r=nonce+server,s=salt,i=4096")
    assert not scram.refused
    authenticate(scram, b"c=biws,r=nonce+server,p=bad", b"", error=FAILED)
    assert scram.refused
    unconfirmed = SaslExchange()
    handshake(unconfirmed, "SCRAM-SHA-256")
    authenticate(unconfirmed, first, b"r=x")
    authenticate(unconfirmed, b"c=biws,r=x,p=proof", b"e=other-error")
    assert unconfirmed.refused
    plain = SaslExchange()
    handshake(plain, "PLAIN")
    authenticate(plain, b"\x00alice\x00wrong", b"", error=FAILED)
    assert plain.refused
    handshake(plain, "PLAIN")
    assert authenticate(plain, b"\x00alice\x00secret", b"") == "alice" and not plain.refused


def test_rejected_or_unlearnable_mechanisms_yield_no_principal() -> None:
    rejected = SaslExchange()
    handshake(rejected, "PLAIN", error=33)  # UNSUPPORTED_SASL_MECHANISM
    assert authenticate(rejected, b"\x00alice\x00secret", b"") is None
    kerberos = SaslExchange()
    handshake(kerberos, "GSSAPI")
    assert not kerberos.learnable
    assert authenticate(kerberos, b"\x60\x82kerberos", b"") is None


def test_a_second_exchange_on_the_connection_replaces_the_first() -> None:
    """KIP-368 re-authentication goes through the same steps; the broker refuses another
    principal, and a refused exchange names nobody."""
    exchange = SaslExchange()
    handshake(exchange, "PLAIN")
    assert authenticate(exchange, b"\x00alice\x00secret", b"") == "alice"
    handshake(exchange, "PLAIN")
    assert authenticate(exchange, b"\x00bob\x00secret", b"", error=FAILED) is None
    handshake(exchange, "PLAIN")
    assert authenticate(exchange, b"\x00alice\x00secret", b"") == "alice"


def test_handshake_v0_is_refused() -> None:
    with pytest.raises(ProtocolError, match="v0"):
        SaslExchange().on_handshake_request(
            *request(SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
        )
