"""Which KIP-848 heartbeats only keep their member alive (protocol/group_heartbeat.py)."""

from __future__ import annotations

import uuid

import pytest

from protocol.errors import ProtocolError
from protocol.group_heartbeat import keeps_alive
from protocol.headers import parse_request_header
from tests.support.group_heartbeat import heartbeat


def alive(frame: bytes) -> bool:
    return keeps_alive(frame, parse_request_header(frame))


@pytest.mark.parametrize("version", [0, 1])
def test_a_member_in_its_group_naming_nothing_keeps_alive(version: int) -> None:
    assert alive(heartbeat(epoch=5, version=version))


@pytest.mark.parametrize("epoch", [0, -1, -2])
def test_joining_and_leaving_are_not_keepalives(epoch: int) -> None:
    assert not alive(heartbeat(epoch=epoch))


def test_a_subscription_a_regex_or_acknowledged_partitions_make_work() -> None:
    assert not alive(heartbeat(epoch=5, topics=["orders"]))
    assert not alive(heartbeat(epoch=5, topics=[]))  # an empty list is not null
    assert not alive(heartbeat(epoch=5, regex="orders-.*"))
    assert not alive(heartbeat(epoch=5, partitions=[(uuid.uuid4(), [0, 1])]))


def test_version_0_has_no_regex_to_read() -> None:
    """Its ServerAssignor follows the topics at once: a null assignor and a null list."""
    assert alive(heartbeat(epoch=3, version=0))
    assert not alive(heartbeat(epoch=3, version=0, partitions=[(uuid.uuid4(), [])]))


def test_a_heartbeat_cut_short_is_a_protocol_error() -> None:
    """Cut anywhere in what is read, up to TopicPartitions' count; the body's own tagged
    fields come after it and are not read."""
    frame = heartbeat(epoch=5)
    header = parse_request_header(frame)
    for end in range(header.client_id_end, len(frame) - 1):
        with pytest.raises(ProtocolError):
            keeps_alive(frame[:end], header)
    assert keeps_alive(frame[:-1], header)
