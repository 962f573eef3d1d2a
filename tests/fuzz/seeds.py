"""Which captured client requests seed which harness."""

from __future__ import annotations

import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, Final

from kafka.protocol.producer import ProduceRequest

from protocol.apis import (
    ALTER_CLIENT_QUOTAS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CLIENT_QUOTAS,
    FETCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from protocol.headers import parse_request_header, request_body_offset
from tests.support.group_heartbeat import heartbeat

CORPUS = Path(__file__).with_name("corpus")

#: harness -> the APIs whose captured requests seed it (None: every request)
_APIS: dict[str, frozenset[int] | None] = {
    "framing": None,
    "header": None,
    "produce": frozenset({PRODUCE}),
    "fetch": frozenset({FETCH}),
    "sasl": frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE}),
    "admin": frozenset(
        {
            CREATE_TOPICS,
            CREATE_PARTITIONS,
            DELETE_TOPICS,
            DESCRIBE_CLIENT_QUOTAS,
            ALTER_CLIENT_QUOTAS,
        }
    ),
    "connection": None,
}


def heartbeats() -> dict[str, bytes]:
    """KIP-848 heartbeats of each kind the guard tells apart, written by hand: no captured
    client speaks KIP-848 yet."""
    topic_id = uuid.UUID(int=1)
    kinds: dict[str, dict[str, Any]] = {
        "keepalive": {"epoch": 5},
        "join": {"epoch": 0, "topics": ["orders", "payments"]},
        "leave": {"epoch": -1},
        "regex": {"epoch": 5, "regex": "orders-.*"},
        "acknowledge": {"epoch": 6, "partitions": [(topic_id, [0, 1, 2])]},
    }
    return {
        f"kip848-ConsumerGroupHeartbeat-v{version}-{kind}": heartbeat(version=version, **fields)
        for version in (0, 1)
        for kind, fields in kinds.items()
    }


def captured_responses() -> dict[tuple[int, int], list[bytes]]:
    """(api_key, api_version) -> responses real brokers gave to requests of them."""
    kept: dict[tuple[int, int], list[bytes]] = defaultdict(list)
    for path in sorted((CORPUS / "responses").glob("*.bin")):
        parts = path.stem.split("-")  # <key>-<api>-v<version>-<i>
        kept[(int(parts[0]), int(parts[-2].removeprefix("v")))].append(path.read_bytes())
    return dict(kept)


RESPONSES: Final = captured_responses()


def captured() -> dict[str, bytes]:
    """file name -> one request frame a real client sent."""
    return {path.name: path.read_bytes() for path in sorted(CORPUS.glob("*.bin"))}


def records_of(frame: bytes) -> list[bytes]:
    """The record batches of each partition of a captured Produce request."""
    header = parse_request_header(frame)
    body = memoryview(frame)[request_body_offset(frame, header) :]
    request = ProduceRequest.decode(body, version=header.api_version)
    return [
        bytes(partition.records)
        for topic in request.topic_data
        for partition in topic.partition_data
        if partition.records
    ]


def seeds(harness: str) -> dict[str, bytes]:
    """name -> a seed input of this harness."""
    frames = captured()
    if harness == "group_heartbeat":
        return heartbeats()
    if harness == "record_batches":
        return {
            f"{name}-{i}": records
            for name, frame in frames.items()
            if parse_request_header(frame).api_key == PRODUCE
            for i, records in enumerate(records_of(frame))
        }
    apis = _APIS[harness]
    chosen = {
        name: frame
        for name, frame in frames.items()
        if apis is None or parse_request_header(frame).api_key in apis
    }
    if harness == "connection":  # and each client's requests as one stream
        streams: dict[str, bytes] = defaultdict(bytes)
        for name, frame in frames.items():
            streams[f"{name.split('-')[0]}-stream"] += frame
        chosen.update(streams)
    return chosen


def write_seeds(harness: str, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in seeds(harness).items():
        (directory / name).write_bytes(data)
    return directory
