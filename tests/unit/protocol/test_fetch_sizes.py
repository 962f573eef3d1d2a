"""A Fetch response's record bytes by topic, read by the lengths: kafka-python's encodings of
every layout the walk meets (v4 aborted transactions, v7 sessions, v11 preferred replicas,
v12 flexible, v13 topic ids, v16-17 as a 4.x broker answers)."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.consumer import FetchResponse

from localkafka.inprocess.wire import response_frame
from protocol.apis import FETCH
from protocol.errors import ProtocolError
from protocol.fetch import fetched_bytes

PARTITION = FetchResponse.FetchableTopicResponse.PartitionData
ORDERS, AUDIT = uuid.UUID(int=1), uuid.UUID(int=2)


def fetch_response(version: int) -> bytes:
    def partition(index: int, records: int, aborted: object) -> object:
        return PARTITION(
            version=version,
            partition_index=index,
            error_code=0,
            high_watermark=5,
            last_stable_offset=5,
            log_start_offset=0,
            aborted_transactions=aborted,
            preferred_read_replica=-1,
            records=b"r" * records if records else None,
        )

    named = version < 13
    responses = [
        ("orders" if named else ORDERS, [partition(0, 100, [(7, 3)]), partition(1, 50, None)]),
        ("audit" if named else AUDIT, [partition(0, 0, None)]),
    ]
    msg = FetchResponse(
        version=version, throttle_time_ms=0, error_code=0, session_id=0, responses=responses
    )
    return response_frame(FETCH, version, msg)


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 17])
def test_record_bytes_by_topic(version: int) -> None:
    orders, audit = ("orders", "audit") if version < 13 else (ORDERS, AUDIT)
    assert fetched_bytes(fetch_response(version), version) == {orders: 150, audit: 0}


def test_a_truncated_response_is_refused() -> None:
    frame = fetch_response(12)
    with pytest.raises(ProtocolError):
        fetched_bytes(frame[:-20], 12)
