"""The client side of SASL PLAIN and SCRAM (RFC 4616, RFC 5802 / 7677), for the proxy's own
connections to its cluster ([cluster]): sans-IO, tokens in and out. Kafka carries each token
in a SaslAuthenticate request after a SaslHandshake naming the mechanism.

Kafka's SCRAM names the user with the saslname escapes (',' as =2C, '=' as =3D) and takes the
password's UTF-8 bytes as they are, without SASLprep, as Kafka's ScramFormatter does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Final

from protocol.errors import ProtocolError

_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS: Final = ("PLAIN", *_HASHES)


class SaslClient:
    """One exchange: `next_token(None)` gives the first token, then each server token gives
    the next one; `done` once the server's last token has been checked."""

    def __init__(
        self, mechanism: str, username: str, password: str, nonce: str | None = None
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
        self.mechanism = mechanism
        self._username = username
        self._password = password.encode()
        self._hash = _HASHES.get(mechanism)
        #: the client nonce (fixed only by tests, to replay the RFC's vectors)
        self._nonce = nonce or base64.b64encode(secrets.token_bytes(24)).decode()
        self._first_bare = ""
        self._server_signature = b""
        self.done = False

    def next_token(self, server: bytes | None) -> bytes | None:
        """The token to send next; None when the exchange is complete."""
        if self._hash is None:  # PLAIN: one token, the broker's answer is empty
            if server is None:
                return b"\0" + self._username.encode() + b"\0" + self._password
            self.done = True
            return None
        if server is None:
            name = self._username.replace("=", "=3D").replace(",", "=2C")
            self._first_bare = f"n={name},r={self._nonce}"
            return f"n,,{self._first_bare}".encode()
        if not self._server_signature:
            return self._final(server.decode())
        self._verify(server.decode())
        return None

    def _final(self, server_first: str) -> bytes:
        assert self._hash is not None
        fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i")
        if not nonce.startswith(self._nonce) or salt is None or iterations is None:
            raise ProtocolError(f"unexpected SCRAM server-first-message: {server_first!r}")
        salted = hashlib.pbkdf2_hmac(
            self._hash, self._password, base64.b64decode(salt), int(iterations)
        )
        client_key = self._mac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        signature = self._mac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._mac(self._mac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify(self, server_final: str) -> None:
        if server_final.startswith("e="):
            raise ProtocolError(f"SCRAM authentication failed: {server_final[2:]}")
        verifier = base64.b64decode(server_final.removeprefix("v="))
        if not hmac.compare_digest(verifier, self._server_signature):
            raise ProtocolError("the SCRAM server signature does not verify")
        self.done = True

    def _mac(self, key: bytes, message: bytes) -> bytes:
        assert self._hash is not None
        return hmac.new(key, message, self._hash).digest()
