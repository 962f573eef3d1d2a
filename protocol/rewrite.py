"""Rewriting broker addresses in responses so that clients only ever learn proxy addresses.

A broker names itself or its peers in Metadata, FindCoordinator (single node before v4, a
batch of coordinators from v4), DescribeCluster, and in the KIP-951 NodeEndpoints tagged
field of Produce (v10+) and Fetch (v16+) responses. Metadata's addresses are spliced in by
protocol.metadata, which reads those responses for the topic cache too. The others are
decoded with kafka-python's schema-generated codec, every address is replaced by the one
`advertise` returns for that node, and the body is re-encoded; unknown tagged fields survive
the round trip. Responses with nothing to rewrite are forwarded as the original bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct
from typing import Any

from protocol.apis import (
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    PRODUCE,
)
from protocol.codec import decode_response
from protocol.headers import response_body_offset
from protocol.skip import has_top_level_tags

_INT32 = Struct(">i")

#: (node_id, upstream host, upstream port) -> the proxy's (host, port) for that node.
Advertise = Callable[[int, str, int], tuple[str, int]]

#: DescribeCluster v1+ EndpointType: 1 = brokers, 2 = controllers.
_CONTROLLER_ENDPOINTS = 2


def _rewrite_nodes(nodes: Any, advertise: Advertise, id_field: str = "node_id") -> bool:
    changed = False
    for node in nodes or ():
        node_id = getattr(node, id_field)
        if node_id < 0:
            continue
        node.host, node.port = advertise(node_id, node.host, node.port)
        changed = True
    return changed


def _find_coordinator(msg: Any, version: int, advertise: Advertise) -> bool:
    if version >= 4:
        return _rewrite_nodes(msg.coordinators, advertise)
    if msg.error_code != 0 or msg.node_id < 0:
        return False
    msg.host, msg.port = advertise(msg.node_id, msg.host, msg.port)
    return True


def _describe_cluster(msg: Any, version: int, advertise: Advertise) -> bool:
    if version >= 1 and msg.endpoint_type == _CONTROLLER_ENDPOINTS:
        return False
    return _rewrite_nodes(msg.brokers, advertise, id_field="broker_id")


def _node_endpoints(msg: Any, version: int, advertise: Advertise) -> bool:
    return _rewrite_nodes(msg.node_endpoints, advertise)


_REWRITERS: dict[int, tuple[int, Callable[[Any, int, Advertise], bool]]] = {
    # api_key -> (first version that can carry addresses, rewriter)
    FIND_COORDINATOR: (0, _find_coordinator),
    DESCRIBE_CLUSTER: (0, _describe_cluster),
    PRODUCE: (10, _node_endpoints),
    FETCH: (16, _node_endpoints),
}


#: APIs whose addresses live only in top-level tagged fields, found without a full decode
_TAGGED_ONLY = frozenset({PRODUCE, FETCH})


def carries_addresses(api_key: int, api_version: int) -> bool:
    entry = _REWRITERS.get(api_key)
    return entry is not None and api_version >= entry[0]


def rewrite_addresses(
    frame: bytes, api_key: int, api_version: int, advertise: Advertise
) -> bytes | None:
    """The response frame with proxy addresses, or None when it names no broker."""
    offset = response_body_offset(frame, api_key, api_version)
    if api_key in _TAGGED_ONLY and not has_top_level_tags(frame, offset, api_key, api_version):
        return None
    msg = decode_response(frame, offset, api_key, api_version)
    if not _REWRITERS[api_key][1](msg, api_version, advertise):
        return None
    return reframe(frame, offset, bytes(msg.encode()))


def reframe(frame: bytes, body_offset: int, body: bytes) -> bytes:
    """A new wire frame keeping the original response header and replacing the body."""
    header = frame[4:body_offset]
    return _INT32.pack(len(header) + len(body)) + header + body
