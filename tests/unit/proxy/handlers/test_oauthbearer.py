"""OAUTHBEARER principals: the client's first message read as Kafka reads it (the vectors of
Kafka's OAuthBearerClientInitialResponseTest), the JWT's claim, and the exchange adopting
it only once the broker's answer is a success."""

from __future__ import annotations

import contextlib
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from localkafka.inprocess.harness import handler_channel, handler_request, proxy_context
from localkafka.inprocess.wire import request_frame
from protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from protocol.errors import ProtocolError
from protocol.sasl import (
    OAuthBearerInitial,
    SaslExchange,
    jwt_claim,
    mechanisms,
    oauthbearer_user,
    read_oauthbearer,
)
from proxy.enforcement import Enforcement
from proxy.handlers.principals import PrincipalBuilder
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig, QuotaSettings
from tests.support.oauth import unsigned_jwt
from tests.unit.protocol.test_sasl import FAILED, authenticate, handshake


def first(token: str, authzid: str = "", extensions: str = "") -> bytes:
    """A client's first message as Kafka's OAuthBearerClientInitialResponse writes one."""
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01{extensions}\x01".encode()


def test_kafkas_client_initial_response_vectors() -> None:
    assert read_oauthbearer(b"n,,\x01auth=Bearer 123.345.567\x01\x01") == OAuthBearerInitial(
        "", "123.345.567", {}
    )
    assert read_oauthbearer(b"n,a=myuser,\x01auth=Bearer 345\x01\x01").authzid == "myuser"
    assert read_oauthbearer(
        b"n,,\x01auth=Bearer 123.345.567\x01nineteen=42\x01\x01"
    ).extensions == {"nineteen": "42"}
    rfc7628 = read_oauthbearer(
        b"n,a=user@example.com,\x01host=server.example.com\x01port=143\x01"
        b"auth=Bearer vF9dft4qmTc2Nvb3RlckBhbHRhdmlzdGEuY29tCg\x01\x01"
    )
    assert rfc7628 == OAuthBearerInitial(
        "user@example.com",
        "vF9dft4qmTc2Nvb3RlckBhbHRhdmlzdGEuY29tCg",
        {"host": "server.example.com", "port": "143"},
    )
    # an authzid keeps Kafka's escapes as written; a bare ',' or '=' ends it
    assert read_oauthbearer(b"n,a=a=2Cb=3Dc,\x01auth=Bearer t\x01\x01").authzid == "a=2Cb=3Dc"
    for malformed in (
        b"n,,\x01auth=Bearer 123\x0119=42\x01\x01",  # extension keys are letters only
        b"n,a=a,b,\x01auth=Bearer t\x01\x01",
        b"n,,\x01auth=Basic dXNlcg\x01\x01",  # not a bearer token
        b"n,,\x01host=x\x01\x01",  # no auth
        b"n,,\x01auth=Bearer t\x01",  # unterminated
        b"y,,\x01auth=Bearer t\x01\x01",
        b"",
    ):
        with pytest.raises(ProtocolError):
            read_oauthbearer(malformed)


def test_the_principal_is_the_authzid_or_the_configured_claim() -> None:
    token = unsigned_jwt({"sub": "alice", "principal": "bob", "exp": 1, "scope": ["x"]})
    assert jwt_claim(token, "sub") == "alice"
    assert jwt_claim(token, "principal") == "bob"
    assert oauthbearer_user(first(token), "principal") == "bob"
    assert oauthbearer_user(first(token, authzid="carol"), "sub") == "carol"
    # nothing guessed: opaque, encrypted, not JSON, no claim, a claim that is not a string
    assert jwt_claim("2YotnFZFEjr1zCsicMWpAA", "sub") is None
    assert jwt_claim("a.b.c.d.e", "sub") is None
    assert jwt_claim("e30.bm90IGpzb24.", "sub") is None
    assert jwt_claim(token, "scope") is None and jwt_claim(token, "exp") is None
    assert jwt_claim(unsigned_jwt({"sub": ""}), "sub") is None
    assert oauthbearer_user(b"garbage", "sub") is None


@settings(max_examples=2000, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda a, t, e: first(t, a, e),
            st.text(max_size=12),
            st.text(max_size=40),
            st.text(max_size=20),
        ),
    ),
    st.text(max_size=8),
)
def test_the_reader_raises_only_the_codecs_error(message: bytes, claim: str) -> None:
    with contextlib.suppress(ProtocolError):
        read_oauthbearer(message)
    user = oauthbearer_user(message, claim)
    assert user is None or isinstance(user, str)


def test_the_claim_is_adopted_only_when_the_broker_answers_success() -> None:
    token = unsigned_jwt({"uid": "alice"})
    exchange = SaslExchange(mechanisms("uid"))
    handshake(exchange, "OAUTHBEARER")
    assert authenticate(exchange, first(token), b"") == "alice"
    # re-authentication with a fresh token of the same principal
    handshake(exchange, "OAUTHBEARER")
    assert authenticate(exchange, first(unsigned_jwt({"uid": "alice", "n": 2})), b"") == "alice"
    # a refused token: the broker's JSON error, the client's %x01, then the error code
    refused = SaslExchange(mechanisms("uid"))
    handshake(refused, "OAUTHBEARER")
    assert authenticate(refused, first(token), b'{"status":"invalid_token"}') is None
    assert authenticate(refused, b"\x01", b"", error=FAILED) is None
    # a negative session lifetime is no success
    odd = SaslExchange(mechanisms("uid"))
    handshake(odd, "OAUTHBEARER")
    assert authenticate(odd, first(token), b"", lifetime_ms=-1) is None


def test_an_unreadable_token_is_said_once_per_client_address_per_10_s(
    caplog: pytest.LogCaptureFixture,
) -> None:
    enforcement = Enforcement(QuotaEngine(QuotaConfig(QuotaSettings(), {})))
    context = proxy_context(enforcement)
    context.principals = PrincipalBuilder(mechanisms=mechanisms())

    def attempt(port: int, now_ms: int) -> str:
        s = handler_channel(context)
        s.peer = f"10.0.0.7:{port}"
        hello = request_frame(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="OAUTHBEARER"))
        s.sasl.on_handshake_request(hello, handler_request(s, hello).header)
        s.sasl.mechanism = "OAUTHBEARER"
        opaque = SaslAuthenticateRequest(auth_bytes=first("2YotnFZFEjr1zCsicMWpAA"))
        request = handler_request(s, request_frame(SASL_AUTHENTICATE, 2, opaque), now_ms)
        context.principals.on_authenticate_request(s, request)
        return s.user

    with caplog.at_level(logging.WARNING, logger="proxy.handlers.principals"):
        users = [attempt(port, now_ms) for port, now_ms in ((1, 0), (2, 9_999), (3, 10_000))]
    assert users == ["ANONYMOUS"] * 3
    warned = [r.getMessage() for r in caplog.records if "names no principal" in r.getMessage()]
    assert len(warned) == 2 and "10.0.0.7:1" in warned[0] and "10.0.0.7:3" in warned[1]
