"""Learning a connection's principal from the SASL exchange it passes through the proxy.

The proxy has no credentials and verifies nothing: it reads the name a client *claims* in its
first SASL token and adopts it only when the broker, which does verify, answers the last step
of the exchange with success. Until then the connection keeps its previous principal, so a
client can never choose its principal by claiming one, and a failed authentication (the
broker answers an error and closes) never yields one.

The user name is the one Kafka's SASL servers make the principal with the default
principal builder:
- PLAIN (RFC 4616): the authcid; a differing authzid is refused by the broker.
- SCRAM-SHA-256/512 (RFC 5802): the `n=` name of the client-first-message, with `=2C`/`=3D`
  unescaped, adopted when the server-final-message carries the `v=` verifier. With a
  delegation token (`tokenauth=true`) the name is the token id and the principal is the
  token's owner, which only the broker knows: such a connection keeps its principal.
- OAUTHBEARER (RFC 7628, KIP-255): the GS2 authzid when the client gives one (the broker
  refuses it unless it is the token's principal), else the claim of the JWT's payload that
  the broker's `sasl.oauthbearer.sub.claim.name` names (`sub`), read without checking the
  signature, which is the broker's to check. The exchange succeeded when the broker's token
  is empty: a failure is a JSON error the client acknowledges before the error code comes.
  An opaque or encrypted token names no principal the proxy can read.
GSSAPI names its principal through broker-side rules the proxy cannot see; its connections
keep User:ANONYMOUS and a warning says so. `mechanisms()` is the table of what the proxy can
learn: a mechanism is one entry there.

Only SaslHandshake v1+ is followed: with v0 the tokens that follow are not Kafka requests, and
every client since Kafka 1.0 uses SaslAuthenticate instead.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Final, NamedTuple

from protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from protocol.codec import decode_request, decode_response
from protocol.errors import ProtocolError
from protocol.headers import RequestHeader, request_body_offset, response_body_offset


def plain_user(token: bytes) -> str | None:
    """authzid NUL authcid NUL passwd -> authcid."""
    parts = token.split(b"\x00")
    if len(parts) != 3 or not parts[1]:
        return None
    return parts[1].decode("utf-8", "replace")


def scram_user(client_first: bytes) -> str | None:
    """gs2-header, then `n=saslname,r=nonce` -> the unescaped saslname."""
    try:
        text = client_first.decode("utf-8")
    except UnicodeDecodeError:
        return None
    fields = text.split(",")
    # gs2-cbind-flag, [a=authzid], then the bare message starting with n=
    if len(fields) < 4 or not fields[2].startswith("n="):
        return None
    if "tokenauth=true" in fields[4:]:
        return None  # a delegation token: the principal is its owner, not the token id
    return fields[2][2:].replace("=2C", ",").replace("=3D", "=")


def scram_verified(server_final: bytes) -> bool:
    """A server-final-message with the verifier (`v=`), not an error (`e=`)."""
    return server_final.startswith(b"v=")


#: RFC 7628's client initial response, as Kafka's OAuthBearerClientInitialResponse matches
#: it: `n,[a=authzid],` %x01, then key=value pairs each ended by %x01, then %x01
_SASLNAME = rb"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
#: one extension (or auth): a key of letters, a printable value, %x01
_PAIR = re.compile(rb"([A-Za-z]+)=([\x21-\x7e \t\r\n]+)\x01")
_INITIAL = re.compile(
    rb"n,(?:a=(?P<authzid>" + _SASLNAME + rb"))?,\x01(?P<pairs>(?:" + _PAIR.pattern + rb")*)\x01"
)
_AUTH = re.compile(rb"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


class OAuthBearerInitial(NamedTuple):
    """An OAUTHBEARER client's first message."""

    #: "" when the client names none
    authzid: str
    token: str
    extensions: dict[str, str]


def read_oauthbearer(message: bytes) -> OAuthBearerInitial:
    """The message's parts; ProtocolError when Kafka would not accept its form."""
    matched = _INITIAL.fullmatch(message)
    if matched is None:
        raise ProtocolError("not an OAUTHBEARER client initial response")
    pairs = {key.decode(): value.decode() for key, value in _PAIR.findall(matched["pairs"])}
    auth = _AUTH.fullmatch(pairs.pop("auth", "").encode())
    if auth is None or auth["scheme"].lower() != b"bearer":
        raise ProtocolError("an OAUTHBEARER client initial response without a bearer token")
    return OAuthBearerInitial((matched["authzid"] or b"").decode(), auth["token"].decode(), pairs)


def jwt_claim(token: str, claim: str) -> str | None:
    """A string claim of a JWS compact token's payload; None for anything else (an opaque
    token, a JWE's five parts, a payload that is not a JSON object, a claim that is absent,
    empty or not a string)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    encoded = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        payload = json.loads(base64.b64decode(encoded, altchars=b"-_", validate=True))
    except (binascii.Error, ValueError):  # ValueError: JSON's, and UTF-8's
        return None
    value = payload.get(claim) if isinstance(payload, dict) else None
    return value if isinstance(value, str) and value else None


def oauthbearer_user(message: bytes, claim: str) -> str | None:
    try:
        initial = read_oauthbearer(message)
    except ProtocolError:
        return None  # the broker refuses it: nothing to learn
    return initial.authzid or jwt_claim(initial.token, claim)


def oauthbearer_succeeded(server: bytes) -> bool:
    """RFC 7628: success is an empty server response; a failure is a JSON error."""
    return not server


def _accepted(token: bytes) -> bool:
    return True


class Mechanism(NamedTuple):
    """How one SASL mechanism names the user its client claims."""

    #: SaslAuthenticate round trips in one exchange
    steps: int
    #: the user claimed in the client's first token; None when it names none the proxy can
    #: trust to be the principal (a delegation token)
    claimed: Callable[[bytes], str | None]
    #: whether the broker's last token confirms the exchange
    confirmed: Callable[[bytes], bool] = _accepted


#: Kafka's default for sasl.oauthbearer.sub.claim.name
SUB_CLAIM: Final = "sub"


def mechanisms(sub_claim: str = SUB_CLAIM) -> Mapping[str, Mechanism]:
    """Every mechanism whose principal the proxy learns, by Kafka's mechanism name; an
    OAUTHBEARER principal is the token's `sub_claim`, as the broker is configured."""
    return {
        "PLAIN": Mechanism(1, plain_user),
        "SCRAM-SHA-256": Mechanism(2, scram_user, scram_verified),
        "SCRAM-SHA-512": Mechanism(2, scram_user, scram_verified),
        "OAUTHBEARER": Mechanism(
            1, partial(oauthbearer_user, claim=sub_claim), oauthbearer_succeeded
        ),
    }


MECHANISMS: Final = mechanisms()


@dataclass
class SaslExchange:
    """One connection's SASL state; feed it the SASL requests and responses in order."""

    #: the mechanisms whose principal can be learned (the principal builder's table)
    mechanisms: Mapping[str, Mechanism] = field(default_factory=lambda: MECHANISMS)
    #: the mechanism the broker accepted in the last SaslHandshake
    mechanism: str | None = None
    #: the mechanism of the SaslHandshake awaiting its response
    requested: str | None = None
    #: the user the client claims in the exchange under way (not yet verified)
    claimed: str | None = None
    #: SaslAuthenticate responses still expected before the exchange completes
    steps_left: int = 0
    #: the last SaslAuthenticate response ended its exchange refused: an error, or a last
    #: token that does not confirm it
    refused: bool = False

    @property
    def learnable(self) -> bool:
        return self.mechanism in self.mechanisms

    def on_handshake_request(self, frame: bytes, header: RequestHeader) -> None:
        if header.api_version < 1:
            raise ProtocolError(
                "SaslHandshake v0 sends unframed SASL tokens, which the proxy cannot follow"
            )
        request = decode_request(
            frame, request_body_offset(frame, header), SASL_HANDSHAKE, header.api_version
        )
        self.requested = str(request.mechanism)

    def on_handshake_response(self, frame: bytes, version: int) -> None:
        response = decode_response(
            frame, response_body_offset(frame, SASL_HANDSHAKE, version), SASL_HANDSHAKE, version
        )
        self.mechanism = self.requested if response.error_code == 0 else None
        self.requested = None
        self.claimed = None
        self.steps_left = 0

    def on_authenticate_request(self, frame: bytes, header: RequestHeader) -> bool:
        """The first token of an exchange names the claimed user; False when the token of a
        mechanism the proxy learns names none it can read (the connection keeps its
        principal, and the broker decides on the token)."""
        if self.steps_left:
            return True
        request = decode_request(
            frame, request_body_offset(frame, header), SASL_AUTHENTICATE, header.api_version
        )
        mechanism = self.mechanisms.get(self.mechanism or "")
        if mechanism is None:
            self.claimed, self.steps_left = None, 0
            return True
        self.claimed = mechanism.claimed(bytes(request.auth_bytes or b""))
        self.steps_left = mechanism.steps
        return self.claimed is not None

    def on_authenticate_response(self, frame: bytes, version: int) -> str | None:
        """The authenticated user when this response completes a successful exchange."""
        self.refused = False
        if self.steps_left == 0:
            return None
        response = decode_response(
            frame,
            response_body_offset(frame, SASL_AUTHENTICATE, version),
            SASL_AUTHENTICATE,
            version,
        )
        if response.error_code != 0:
            self.claimed, self.steps_left, self.refused = None, 0, True
            return None
        self.steps_left -= 1
        if self.steps_left:
            return None
        user, self.claimed = self.claimed, None
        mechanism = self.mechanisms[self.mechanism or ""]
        if not mechanism.confirmed(bytes(response.auth_bytes or b"")):
            # a failed exchange: what the client sends until the next handshake (an
            # OAUTHBEARER client's acknowledgement of the error) starts no new one
            self.mechanism, self.refused = None, True
            return None
        if getattr(response, "session_lifetime_ms", 0) < 0:  # v1+; 0: no re-authentication
            return None
        return user
