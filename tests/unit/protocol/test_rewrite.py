"""Address rewriting and ApiVersions capping, on frames built with kafka-python's codecs."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse
from kafka.protocol.producer import ProduceResponse

from localkafka.inprocess.wire import decode_response, response_frame
from protocol.api_versions import cap_api_versions, unsupported_version_response
from protocol.apis import API_VERSIONS
from protocol.headers import response_correlation_id
from protocol.rewrite import carries_addresses, rewrite_addresses
from proxy.handlers.registry import DECODED_VERSIONS

ADVERTISED: dict[int, tuple[str, int]] = {}


def advertise(node_id: int, host: str, port: int) -> tuple[str, int]:
    ADVERTISED[node_id] = (host, port)
    return "proxy.local", 20000 + node_id


def decode(cls: Any, frame: bytes, api_key: int, version: int) -> Any:
    assert response_correlation_id(frame) == 9  # correlation id kept
    return decode_response(cls, frame, api_key, version)


@pytest.mark.parametrize("version", [1, 3])
def test_find_coordinator_single_node(version: int) -> None:
    msg = FindCoordinatorResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        node_id=2,
        host="kafka-2",
        port=9092,
    )
    out = rewrite_addresses(response_frame(10, version, msg), 10, version, advertise)
    assert out is not None
    got = decode(FindCoordinatorResponse, out, 10, version)
    assert (got.node_id, got.host, got.port) == (2, "proxy.local", 20002)


def test_find_coordinator_error_is_forwarded_unchanged() -> None:
    msg = FindCoordinatorResponse(
        version=3,
        throttle_time_ms=0,
        error_code=15,
        error_message=None,
        node_id=-1,
        host="",
        port=-1,
    )
    assert rewrite_addresses(response_frame(10, 3, msg), 10, 3, advertise) is None


@pytest.mark.parametrize("version", [4, 6])
def test_find_coordinator_batched(version: int) -> None:
    coordinator = FindCoordinatorResponse.Coordinator
    msg = FindCoordinatorResponse(
        version=version,
        throttle_time_ms=0,
        coordinators=[
            coordinator(
                version=version,
                key="g1",
                node_id=3,
                host="kafka-3",
                port=9092,
                error_code=0,
                error_message=None,
            ),
            coordinator(
                version=version,
                key="g2",
                node_id=-1,
                host="",
                port=-1,
                error_code=15,
                error_message=None,
            ),
        ],
    )
    out = rewrite_addresses(response_frame(10, version, msg), 10, version, advertise)
    assert out is not None
    got = decode(FindCoordinatorResponse, out, 10, version).coordinators
    assert [(c.key, c.node_id, c.host, c.port) for c in got] == [
        ("g1", 3, "proxy.local", 20003),
        ("g2", -1, "", -1),
    ]


@pytest.mark.parametrize(("endpoint_type", "rewritten"), [(1, True), (2, False)])
def test_describe_cluster(endpoint_type: int, rewritten: bool) -> None:
    broker = DescribeClusterResponse.DescribeClusterBroker
    msg = DescribeClusterResponse(
        version=1,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id="c",
        controller_id=1,
        brokers=[broker(version=1, broker_id=1, host="kafka-1", port=9092, rack=None)],
        authorized_operations=set(),
    )
    out = rewrite_addresses(response_frame(60, 1, msg), 60, 1, advertise)
    if not rewritten:
        assert out is None  # controller endpoints are not served by the proxy
        return
    assert out is not None
    got = decode(DescribeClusterResponse, out, 60, 1).brokers[0]
    assert (got.host, got.port) == ("proxy.local", 20001)


def test_produce_node_endpoints_kip_951() -> None:
    endpoint = ProduceResponse.NodeEndpoint
    msg = ProduceResponse(
        version=11,
        responses=[],
        throttle_time_ms=0,
        node_endpoints=[endpoint(version=11, node_id=3, host="kafka-3", port=9092, rack=None)],
    )
    assert carries_addresses(0, 11) and not carries_addresses(0, 9)
    out = rewrite_addresses(response_frame(0, 11, msg), 0, 11, advertise)
    assert out is not None
    got = decode(ProduceResponse, out, 0, 11).node_endpoints[0]
    assert (got.node_id, got.host, got.port) == (3, "proxy.local", 20003)


def test_fetch_without_node_endpoints_is_forwarded_as_is() -> None:
    msg = FetchResponse(
        version=16, throttle_time_ms=0, error_code=0, session_id=0, responses=[], node_endpoints=[]
    )
    assert carries_addresses(1, 16) and not carries_addresses(1, 15)
    assert rewrite_addresses(response_frame(1, 16, msg), 1, 16, advertise) is None


def test_fetch_node_endpoints_kip_951() -> None:
    endpoint = FetchResponse.NodeEndpoint
    msg = FetchResponse(
        version=17,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[],
        node_endpoints=[endpoint(version=17, node_id=1, host="kafka-1", port=9092, rack="r")],
    )
    out = rewrite_addresses(response_frame(1, 17, msg), 1, 17, advertise)
    assert out is not None
    got = decode(FetchResponse, out, 1, 17).node_endpoints[0]
    assert (got.host, got.port, got.rack) == ("proxy.local", 20001, "r")


def api_versions_frame(maxima: dict[int, int], version: int = 3) -> bytes:
    entry = ApiVersionsResponse.ApiVersion
    msg = ApiVersionsResponse(
        version=version,
        error_code=0,
        throttle_time_ms=0,
        api_keys=[
            entry(version=version, api_key=k, min_version=0, max_version=v)
            for k, v in maxima.items()
        ],
    )
    return response_frame(API_VERSIONS, version, msg)


def test_api_versions_capped_to_what_the_proxy_decodes() -> None:
    metadata_max = DECODED_VERSIONS[3]
    frame = api_versions_frame({3: metadata_max + 5, 200: 99, 0: 1})
    out = cap_api_versions(frame, 3, DECODED_VERSIONS)
    assert out is not None
    got = {e.api_key: e.max_version for e in decode(ApiVersionsResponse, out, 18, 3).api_keys}
    assert got == {3: metadata_max, 200: 99, 0: 1}  # unknown API 200 passes through


def test_api_versions_within_caps_is_forwarded_as_is() -> None:
    assert cap_api_versions(api_versions_frame({3: 1, 18: 3}), 3, DECODED_VERSIONS) is None


def test_unsupported_version_answer_is_a_valid_v0_response() -> None:
    frame = unsupported_version_response(5, 4)
    msg = ApiVersionsResponse.decode(frame[8:], version=0)
    assert response_correlation_id(frame) == 5
    assert msg.error_code == 35
    assert [(e.api_key, e.max_version) for e in msg.api_keys] == [(18, 4)]
    # error responses are never rewritten
    assert cap_api_versions(frame, 0, DECODED_VERSIONS) is None


def fetch_with_records(version: int, endpoints: list[Any]) -> bytes:
    topic = FetchResponse.FetchableTopicResponse
    partition = topic.PartitionData
    aborted = partition.AbortedTransaction
    partitions = [
        partition(
            version=version,
            partition_index=p,
            error_code=0,
            high_watermark=100,
            last_stable_offset=100,
            log_start_offset=0,
            aborted_transactions=[aborted(version=version, producer_id=7, first_offset=3)]
            if p
            else None,
            preferred_read_replica=-1,
            records=bytes(range(256)) * (p + 1),
        )
        for p in range(3)
    ]
    msg = FetchResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=1,
        responses=[topic(version=version, topic="t", topic_id=uuid.uuid4(), partitions=partitions)],
        node_endpoints=endpoints,
    )
    return response_frame(1, version, msg)


@pytest.mark.parametrize("version", [16, 17, 18])
def test_fetch_walker_steps_over_records_to_the_tagged_section(version: int) -> None:
    assert rewrite_addresses(fetch_with_records(version, []), 1, version, advertise) is None
    endpoint = FetchResponse.NodeEndpoint(
        version=version, node_id=2, host="kafka-2", port=1, rack=None
    )
    out = rewrite_addresses(fetch_with_records(version, [endpoint]), 1, version, advertise)
    assert out is not None
    got = decode(FetchResponse, out, 1, version)
    assert [(e.node_id, e.host, e.port) for e in got.node_endpoints] == [(2, "proxy.local", 20002)]
    assert got.responses[0].partitions[2].records == bytes(range(256)) * 3  # records intact
