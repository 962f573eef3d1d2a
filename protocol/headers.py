"""Hand-parsed request and response headers: the per-frame work on the hot path.

Every request header version the proxy meets (v1 and v2) starts with api_key, api_version,
correlation_id and a non-compact nullable client_id string, so those are read at fixed offsets
without knowing the API. Only a body the proxy reads needs the flexible header's tagged fields
skipped.
"""

from __future__ import annotations

from struct import Struct
from typing import Final, NamedTuple

from protocol.apis import request_is_flexible, response_header_is_flexible
from protocol.errors import ProtocolError
from protocol.primitives import skip_tagged_fields

#: the client-id of the proxy's own requests, as a broker's request log shows it
OWN_CLIENT_ID: Final = "kafka-quota-proxy"

_REQUEST_PREFIX = Struct(">ihhih")  # size, api_key, api_version, correlation_id, client_id len
_REQUEST_HEADER_V1 = Struct(">hhih")  # the same without the size
_INT32 = Struct(">i")
_CLIENT_ID_AT = _REQUEST_PREFIX.size


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: offset just past client_id in the wire frame (tagged fields may follow on v2 headers)
    client_id_end: int


def parse_request_header(frame: bytes) -> RequestHeader:
    if len(frame) < _CLIENT_ID_AT:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a header")
    _, api_key, api_version, correlation_id, length = _REQUEST_PREFIX.unpack_from(frame)
    if api_key < 0 or api_version < 0:
        raise ProtocolError(f"invalid request header api_key={api_key} api_version={api_version}")
    if length < 0:
        if length != -1:
            raise ProtocolError(f"invalid client_id length {length}")
        return RequestHeader(api_key, api_version, correlation_id, None, _CLIENT_ID_AT)
    end = _CLIENT_ID_AT + length
    if end > len(frame):
        raise ProtocolError("client_id runs past the frame")
    client_id = frame[_CLIENT_ID_AT:end].decode("utf-8", "replace")
    return RequestHeader(api_key, api_version, correlation_id, client_id, end)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str, body: bytes
) -> bytes:
    """A wire frame for the proxy's own requests, with the header its version uses: v2 (no
    tagged fields) for a flexible version, v1 otherwise."""
    cid = client_id.encode()
    header = _REQUEST_HEADER_V1.pack(api_key, api_version, correlation_id, len(cid)) + cid
    if request_is_flexible(api_key, api_version):
        header += b"\x00"
    return _INT32.pack(len(header) + len(body)) + header + body


def encode_response(correlation_id: int, api_key: int, api_version: int, body: bytes) -> bytes:
    """A wire frame for a response the proxy answers itself, with the header its version uses."""
    header = _INT32.pack(correlation_id)
    if response_header_is_flexible(api_key, api_version):
        header += b"\x00"  # no tagged fields
    return _INT32.pack(len(header) + len(body)) + header + body


def request_body_offset(frame: bytes, header: RequestHeader) -> int:
    """Start of the request body, for the APIs listed in protocol.apis.DECODED."""
    if request_is_flexible(header.api_key, header.api_version):
        return skip_tagged_fields(frame, header.client_id_end)
    return header.client_id_end


def response_correlation_id(frame: bytes) -> int:
    if len(frame) < 8:
        raise ProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
    correlation_id: int = _INT32.unpack_from(frame, 4)[0]
    return correlation_id


def response_body_offset(frame: bytes, api_key: int, api_version: int) -> int:
    if response_header_is_flexible(api_key, api_version):
        return skip_tagged_fields(frame, 8)
    return 8
