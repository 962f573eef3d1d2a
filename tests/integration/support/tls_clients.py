"""One Python client family producing or consuming over TLS, as a program of its own: run
inside a network namespace (tests/integration/test_sni.py), where host names resolve through
the namespace's hosts file.

    python -m tests.integration.support.tls_clients produce aiokafka BOOTSTRAP TOPIC CA COUNT
    python -m tests.integration.support.tls_clients consume aiokafka BOOTSTRAP TOPIC CA COUNT

A consumer prints what it read, one value per line.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from aiokafka.helpers import create_ssl_context

from tests.integration.support import clients


def values(client: str, count: int) -> list[bytes]:
    return [f"{client}-{i}".encode() for i in range(count)]


def _aiokafka_produce(bootstrap: str, topic: str, produced: list[bytes], **settings: Any) -> None:
    asyncio.run(clients.aiokafka_produce(bootstrap, topic, produced, **settings))


def _aiokafka_consume(
    bootstrap: str, topic: str, group: str, count: int, **settings: Any
) -> tuple[list[bytes], set[str]]:
    return asyncio.run(clients.aiokafka_consume(bootstrap, topic, group, count, **settings))


#: a family's produce, its consume, and its TLS settings given the CA file
Family = tuple[
    Callable[..., None],
    Callable[..., tuple[list[bytes], set[str]]],
    Callable[[str], dict[str, Any]],
]
FAMILIES: dict[str, Family] = {
    "aiokafka": (
        _aiokafka_produce,
        _aiokafka_consume,
        lambda ca: {"security_protocol": "SSL", "ssl_context": create_ssl_context(cafile=ca)},
    ),
    "kafka-python": (
        clients.kafka_python_produce,
        clients.kafka_python_consume,
        lambda ca: {"security_protocol": "SSL", "ssl_cafile": ca},
    ),
    "confluent": (
        clients.confluent_produce,
        clients.confluent_consume,
        lambda ca: {"security.protocol": "SSL", "ssl.ca.location": ca},
    ),
}


def main(argv: list[str]) -> int:
    action, client, bootstrap, topic, ca, count_text = argv
    produce, consume, tls = FAMILIES[client]
    count = int(count_text)
    if action == "produce":
        produce(bootstrap, topic, values(client, count), **tls(ca))
        return 0
    got, _ = consume(bootstrap, topic, f"{topic}-{client}", count, **tls(ca))
    sys.stdout.write("".join(value.decode() + "\n" for value in got))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
