"""throttle_time_ms is written where each API version keeps it, and nothing else changes."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import ProduceResponse

from localkafka.inprocess.wire import decode_response, response_frame
from protocol.errors import ProtocolError
from protocol.throttle import with_throttle_time


def produce_response(version: int, throttle: int) -> Any:
    topic = ProduceResponse.TopicProduceResponse
    partition = topic.PartitionProduceResponse
    return ProduceResponse(
        version=version,
        responses=[
            topic(
                version=version,
                name=f"topic-{t}",
                partition_responses=[
                    partition(version=version, index=p, error_code=0, base_offset=100 * p)
                    for p in range(3)
                ],
            )
            for t in range(2)
        ],
        throttle_time_ms=throttle,
    )


@pytest.mark.parametrize("version", [3, 5, 8, 9, 11])
def test_produce_throttle_sits_after_the_partition_responses(version: int) -> None:
    frame = response_frame(0, version, produce_response(version, 0))
    patched = with_throttle_time(frame, 0, version, 1234)
    assert len(patched) == len(frame)
    msg = decode_response(ProduceResponse, patched, 0, version)
    assert msg.throttle_time_ms == 1234
    assert [p.base_offset for t in msg.responses for p in t.partition_responses] == [
        0,
        100,
        200,
    ] * 2


def test_the_larger_of_broker_and_proxy_throttle_wins() -> None:
    frame = response_frame(0, 9, produce_response(9, 5000))
    assert with_throttle_time(frame, 0, 9, 1000) == frame
    patched = with_throttle_time(frame, 0, 9, 6000)
    assert decode_response(ProduceResponse, patched, 0, 9).throttle_time_ms == 6000


@pytest.mark.parametrize("version", [3, 9, 12])
def test_metadata_throttle_is_first(version: int) -> None:
    msg = MetadataResponse(
        version=version, throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1, topics=[]
    )
    patched = with_throttle_time(response_frame(3, version, msg), 3, version, 77)
    assert decode_response(MetadataResponse, patched, 3, version).throttle_time_ms == 77


def test_versions_without_the_field_are_left_alone() -> None:
    msg = MetadataResponse(version=0, brokers=[], topics=[])
    frame = response_frame(3, 0, msg)
    produce_v0 = response_frame(0, 0, produce_response(0, 0))
    assert with_throttle_time(produce_v0, 0, 0, 500) == produce_v0
    assert with_throttle_time(frame, 3, 0, 500) == frame


def test_api_versions_keeps_a_v0_header_and_throttle_after_api_keys() -> None:
    key = ApiVersionsResponse.ApiVersion
    msg = ApiVersionsResponse(
        version=3,
        error_code=0,
        api_keys=[key(version=3, api_key=k, min_version=0, max_version=9) for k in range(5)],
        throttle_time_ms=0,
    )
    frame = response_frame(18, 3, msg)  # ApiVersions: header v0 at every version
    assert len(frame) == 8 + len(msg.encode(version=3))
    patched = with_throttle_time(frame, 18, 3, 321)
    assert ApiVersionsResponse.decode(patched[8:], version=3).throttle_time_ms == 321


def test_fetch_throttle_is_first() -> None:
    msg = FetchResponse(version=12, throttle_time_ms=0, error_code=0, session_id=1, responses=[])
    patched = with_throttle_time(response_frame(1, 12, msg), 1, 12, 900)
    assert decode_response(FetchResponse, patched, 1, 12).throttle_time_ms == 900


def test_truncated_response_is_a_protocol_error() -> None:
    frame = response_frame(0, 9, produce_response(9, 0))
    with pytest.raises(ProtocolError):
        with_throttle_time(frame[:30], 0, 9, 10)
