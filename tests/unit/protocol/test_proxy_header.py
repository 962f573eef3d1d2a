"""The PROXY protocol header, v1 and v2, as HAProxy's spec writes it (the real HAProxy's
headers are read in tests/integration/test_load_balancer.py)."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from protocol.proxy_header import (
    MAX_HEADER,
    V2_SIGNATURE,
    ProxyHeader,
    ProxyHeaderError,
    parse_header,
    starts_header,
)

KAFKA_REQUEST = struct.pack(">iHHi", 20, 18, 3, 1) + b"\x00\x03app"
TLS_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"


def v2(command: int, family: int, addresses: bytes, tlvs: bytes = b"") -> bytes:
    body = addresses + tlvs
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack(">H", len(body)) + body


def inet(source: str, destination: str, sport: int, dport: int) -> bytes:
    return (
        ipaddress.ip_address(source).packed
        + ipaddress.ip_address(destination).packed
        + struct.pack(">HH", sport, dport)
    )


def test_a_kafka_request_or_a_tls_hello_is_no_header() -> None:
    assert starts_header(KAFKA_REQUEST) is False
    assert starts_header(TLS_CLIENT_HELLO) is False


def test_too_few_bytes_to_tell_wait_for_more() -> None:
    assert starts_header(b"") is None
    assert starts_header(b"PROX") is None
    assert starts_header(V2_SIGNATURE[:11]) is None
    assert starts_header(b"PROXY ") is True
    assert starts_header(V2_SIGNATURE) is True


def test_v1_tcp4_names_the_client() -> None:
    line = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 9192\r\n"
    assert parse_header(line + KAFKA_REQUEST) == ProxyHeader(1, len(line), ("192.0.2.7", 56324))


def test_v1_tcp6_and_unknown() -> None:
    line = b"PROXY TCP6 2001:db8::7 2001:db8::1 4000 9192\r\n"
    assert parse_header(line) == ProxyHeader(1, len(line), ("2001:db8::7", 4000))
    assert parse_header(b"PROXY UNKNOWN\r\n") == ProxyHeader(1, 15, None)
    unknown = b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"
    assert parse_header(unknown) == ProxyHeader(1, len(unknown), None)


def test_v1_incomplete_then_whole() -> None:
    assert parse_header(b"PROXY TCP4 192.0.2.7 10.0.0.1 563") is None


@pytest.mark.parametrize(
    "line",
    [
        b"PROXY TCP4 192.0.2.7 10.0.0.1 56324\r\n",  # a field missing
        b"PROXY TCP4 2001:db8::7 10.0.0.1 1 2\r\n",  # an IPv6 address in TCP4
        b"PROXY TCP4 192.0.2.999 10.0.0.1 1 2\r\n",
        b"PROXY TCP4 192.0.2.7 10.0.0.1 65536 2\r\n",
        b"PROXY TCP4 192.0.2.7 10.0.0.1 01 2\r\n",  # a leading zero
        b"PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n",
        b"PROXY TCP4  192.0.2.7 10.0.0.1 1 2\r\n",  # two spaces
        b"PROXY \xff\r\n",
        b"PROXY TCP4 " + b"1" * 200,  # no CR LF within 107 bytes
    ],
)
def test_v1_malformed_is_refused(line: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        parse_header(line)


def test_v2_inet_names_the_client_and_skips_tlvs() -> None:
    tlv = bytes([0x04]) + struct.pack(">H", 3) + b"abc"  # PP2_TYPE_NOOP
    header = v2(0x1, 0x11, inet("192.0.2.7", "10.0.0.1", 56324, 9192), tlv)
    assert parse_header(header + KAFKA_REQUEST) == ProxyHeader(2, len(header), ("192.0.2.7", 56324))


def test_v2_inet6() -> None:
    header = v2(0x1, 0x21, inet("2001:db8::7", "2001:db8::1", 4000, 9192))
    assert parse_header(header) == ProxyHeader(2, len(header), ("2001:db8::7", 4000))


def test_v2_local_and_addressless_families_keep_the_connection_s_endpoints() -> None:
    local = v2(0x0, 0x00, b"")
    assert parse_header(local) == ProxyHeader(2, 16, None)
    # LOCAL ignores its family and addresses, whatever they say (the spec)
    assert parse_header(v2(0x0, 0x11, b"")) == ProxyHeader(2, 16, None)
    assert parse_header(v2(0x0, 0x41, bytes(3))) == ProxyHeader(2, 19, None)
    unix = v2(0x1, 0x31, bytes(216))
    assert parse_header(unix) == ProxyHeader(2, 16 + 216, None)
    unspec = v2(0x1, 0x00, b"")
    assert parse_header(unspec) == ProxyHeader(2, 16, None)


def test_v2_incomplete_until_its_length_is_there() -> None:
    header = v2(0x1, 0x11, inet("192.0.2.7", "10.0.0.1", 1, 2), bytes(3000))
    assert parse_header(header[:15]) is None
    assert parse_header(header[:-1]) is None
    assert parse_header(header) is not None
    assert len(header) <= MAX_HEADER


@pytest.mark.parametrize(
    "header",
    [
        V2_SIGNATURE + bytes([0x11, 0x11]) + struct.pack(">H", 12) + bytes(12),  # version 1
        V2_SIGNATURE + bytes([0x22, 0x11]) + struct.pack(">H", 12) + bytes(12),  # command 2
        V2_SIGNATURE + bytes([0x21, 0x41]) + struct.pack(">H", 12) + bytes(12),  # family 4
        V2_SIGNATURE + bytes([0x21, 0x11]) + struct.pack(">H", 8) + bytes(8),  # too short
        V2_SIGNATURE + bytes([0x21, 0x12]) + struct.pack(">H", 12) + bytes(12),  # UDP
    ],
)
def test_v2_malformed_is_refused(header: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        parse_header(header)
