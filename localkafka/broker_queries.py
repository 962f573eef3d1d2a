"""Asking a running broker over the wire: how many brokers, a topic's partitions; the
bytes of one exact read."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Sequence

from kafka.admin import KafkaAdminClient, NewTopic

from protocol.apis import METADATA
from protocol.headers import encode_request
from protocol.metadata import OWN_METADATA_VERSION, metadata_request_body, read_metadata_response


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    replication: int,
    replicas: Sequence[Sequence[int]] | None = None,
) -> None:
    """With kafka-python's admin client: TopicCommand took a second of JVM start for each of
    the suite's topics, and a topic is set-up, not what a test is about. The controller
    answers once the topic is committed and each broker's metadata follows a moment later:
    this returns once every broker of `bootstrap` describes it (TopicCommand's JVM start had
    left them that moment, and tests came to rely on it). `replicas`: each partition's
    replicas by node id, the first its leader (then `replication` is not used)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="localkafka")
    if replicas is None:
        topic = NewTopic(name, partitions, replication)
    else:
        assignments = {index: list(nodes) for index, nodes in enumerate(replicas)}
        topic = NewTopic(name, replica_assignments=assignments)
    try:
        admin.create_topics([topic])
    finally:
        admin.close()
    deadline = time.monotonic() + 10
    for address in bootstrap.split(","):
        host, _, port = address.rpartition(":")
        while metadata_partitions(host, int(port), name) != partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{address} does not describe the topic {name} after 10 s")
            time.sleep(0.02)


def metadata_partitions(host: str, port: int, topic: str, timeout: float = 2.0) -> int | None:
    """The partitions a node describes the topic with, or None while it does not."""
    body = metadata_request_body([topic])
    frame = encode_request(METADATA, OWN_METADATA_VERSION, 1, "localkafka", body)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(frame)
            size = recv_exact(sock, 4)
            answer = read_metadata_response(
                size + recv_exact(sock, struct.unpack(">i", size)[0]), OWN_METADATA_VERSION
            )
    except OSError:
        return None
    return next((t.partitions for t in answer.topics if t.name == topic), None)


def metadata_broker_count(host: str, port: int, timeout: float = 2.0) -> int:
    """Number of brokers a node reports in Metadata v1, or -1 while it does not serve yet."""
    # Metadata v1 with an empty topic list: brokers only
    frame = encode_request(METADATA, 1, 1, "localkafka", struct.pack(">i", 0))
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(frame)
            size = struct.unpack(">i", recv_exact(sock, 4))[0]
            body = recv_exact(sock, size)
    except OSError:
        return -1
    count: int = struct.unpack_from(">i", body, 4)[0]  # after the correlation id
    return count


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks += chunk
    return bytes(chunks)
