"""OAUTHBEARER for tests: unsigned JWTs, as Kafka's unsecured login callback handler makes
them (a broker with no validator named accepts them), and each client family's settings for
one user.

The principal is the claim `claim` of the token; a broker's unsecuredValidatorPrincipalClaimName
and the proxy's sasl.oauthbearer.sub.claim.name name the same one.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from aiokafka.abc import AbstractTokenProvider as AiokafkaTokenProvider
from kafka.net.sasl.oauth import AbstractTokenProvider as KafkaPythonTokenProvider

from localkafka.cluster import OAUTH_LOGIN

#: a token's lifetime: longer than any test, so re-authentication follows the broker's
#: connections.max.reauth.ms, not the token's expiry
LIFETIME_S = 3600


def unsigned_jwt(claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}."


def token(user: str, claim: str) -> str:
    """A fresh token naming `user` by `claim`, with the times the validator requires."""
    now = int(time.time())
    return unsigned_jwt({claim: user, "iat": now, "exp": now + LIFETIME_S})


class _KafkaPythonTokens(KafkaPythonTokenProvider):  # type: ignore[misc]
    def __init__(self, user: str, claim: str) -> None:
        self.user, self.claim = user, claim

    def token(self) -> str:
        return token(self.user, self.claim)


class _AiokafkaTokens(AiokafkaTokenProvider):  # type: ignore[misc]
    def __init__(self, user: str, claim: str) -> None:
        self.user, self.claim = user, claim

    async def token(self) -> str:
        return token(self.user, self.claim)


def aiokafka_oauth(user: str, claim: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": _AiokafkaTokens(user, claim),
    }


def kafka_python_oauth(user: str, claim: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": _KafkaPythonTokens(user, claim),
    }


def confluent_oauth(user: str, claim: str) -> dict[str, str]:
    """librdkafka's own unsecured JWT handler."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": f"principalClaimName={claim} principal={user}",
    }


def java_oauth(user: str, claim: str) -> list[str]:
    """Producer properties for Kafka's Java client: its unsecured login callback handler."""
    return [
        "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanism=OAUTHBEARER",
        f'sasl.jaas.config={OAUTH_LOGIN} required unsecuredLoginPrincipalClaimName="{claim}" '
        f'unsecuredLoginStringClaim_{claim}="{user}";',
    ]
