"""The SNI name of a ClientHello, read before the handshake: OpenSSL's own ClientHello (the
one Python's ssl module sends) is the vector."""

from __future__ import annotations

import ssl

import pytest

from protocol.client_hello import NotClientHello, server_name


def client_hello(name: str | None) -> bytes:
    """What a TLS client sends first, asking for `name`."""
    context = ssl.create_default_context()
    context.check_hostname = name is not None
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def in_two_records(hello: bytes) -> bytes:
    """The same ClientHello, its handshake message split over two records."""
    message = hello[5:]
    half = len(message) // 2
    return b"".join(
        hello[:3] + len(part).to_bytes(2, "big") + part for part in (message[:half], message[half:])
    )


def test_the_name_a_client_asks_for() -> None:
    assert server_name(client_hello("Broker-2.Kafka.Example.com")) == "broker-2.kafka.example.com"


def test_a_client_that_names_nothing() -> None:
    assert server_name(client_hello(None)) == ""


def test_not_whole_yet() -> None:
    hello = client_hello("bootstrap.kafka.test")
    for cut in (0, 3, 5, 9, len(hello) - 1):
        assert server_name(hello[:cut]) is None


def test_a_hello_over_two_records() -> None:
    hello = in_two_records(client_hello("broker-1.kafka.test"))
    assert server_name(hello) == "broker-1.kafka.test"
    assert server_name(hello[:-1]) is None


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x00\x00\x10\x00\x12\x00\x03",  # a Kafka request
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
        bytes([22, 3, 1, 0, 4, 2, 0, 0, 0]),  # a handshake, but a ServerHello
        bytes([22, 3, 1, 0, 8, 1, 0, 0, 4, 3, 3, 0, 0]),  # a ClientHello cut inside
    ],
)
def test_what_is_no_client_hello_is_refused(data: bytes) -> None:
    with pytest.raises(NotClientHello):
        server_name(data)
