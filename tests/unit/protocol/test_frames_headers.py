"""Framing and hand-parsed headers: the per-frame work on the hot path."""

from __future__ import annotations

import struct

import pytest

from localkafka.inprocess.wire import request_frame
from protocol.errors import FrameTooLarge, ProtocolError
from protocol.frames import FrameSplitter
from protocol.headers import parse_request_header, request_body_offset, response_correlation_id
from protocol.produce import read_produce


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_frames_split_across_chunks_and_batched() -> None:
    a, b, c = frame(b"a" * 10), frame(b"bb"), frame(b"")
    stream = a + b + c
    splitter = FrameSplitter()
    out: list[bytes] = []
    for i in range(0, len(stream), 3):
        out += splitter.feed(stream[i : i + 3])
    assert out == [a, b, c]
    assert splitter.buffered == 0
    assert FrameSplitter().feed(stream) == [a, b, c]


def test_oversized_frame_is_refused_from_its_prefix() -> None:
    splitter = FrameSplitter(max_frame_bytes=100)
    with pytest.raises(FrameTooLarge, match="101 bytes exceeds the maximum of 100"):
        splitter.feed(struct.pack(">i", 101))
    assert FrameSplitter(100).feed(frame(b"x" * 100)) == [frame(b"x" * 100)]


def test_negative_frame_size_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        FrameSplitter().feed(struct.pack(">i", -5))


def test_request_header_fields() -> None:
    wire = request_frame(3, 12, b"rest", 77, b"my-client")
    header = parse_request_header(wire)
    assert header[:4] == (3, 12, 77, "my-client")
    assert request_body_offset(wire, header) == header.client_id_end + 1  # v2 header tags
    assert parse_request_header(request_frame(3, 1, client_id=None)).client_id is None


@pytest.mark.parametrize(
    "wire",
    [
        frame(b"\x00\x03\x00"),  # shorter than a header
        request_frame(3, 1, client_id=b"abc")[:-2],  # client_id runs past the frame
        frame(struct.pack(">hhih", -1, 0, 1, 0)),  # negative api key
        frame(struct.pack(">hhih", 3, 0, 1, -7)),  # invalid client_id length
    ],
)
def test_malformed_request_headers(wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_request_header(wire)


def test_response_correlation_id() -> None:
    assert response_correlation_id(frame(struct.pack(">i", 42) + b"body")) == 42
    with pytest.raises(ProtocolError):
        response_correlation_id(frame(b"\x00"))


def acks_of(wire: bytes) -> int:
    header = parse_request_header(wire)
    return read_produce(wire, header, request_body_offset(wire, header)).acks


def test_a_truncated_produce_is_a_protocol_error() -> None:
    wire = request_frame(0, 3, b"", client_id=b"p")
    with pytest.raises(ProtocolError):
        acks_of(wire)


@pytest.mark.parametrize(
    ("version", "body", "acks"),
    [
        (3, struct.pack(">h", -1) + struct.pack(">h", 0), 0),
        (8, struct.pack(">h", 3) + b"txn" + struct.pack(">h", -1), -1),
        (9, b"\x00" + struct.pack(">h", 1), 1),  # null compact txn id
        (11, b"\x04txn" + struct.pack(">h", 0), 0),
    ],
)
def test_produce_acks(version: int, body: bytes, acks: int) -> None:
    wire = request_frame(0, version, body + b"\x00\x00\x00\x00", client_id=b"p")
    assert acks_of(wire) == acks
