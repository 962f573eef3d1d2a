"""Which APIs the proxy decodes, and the schema facts taken from kafka-python's message specs.

kafka-python 3 generates its codecs from Apache Kafka's JSON message specs, so the versions it
can decode and the versions that are "flexible" (compact encodings, tagged fields) come from
the same source as the broker's own.
"""

from __future__ import annotations

from typing import Any, Final

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from protocol.schemas import first_flexible_version, request_schemas, response_schemas

PRODUCE: Final = 0
FETCH: Final = 1
METADATA: Final = 3
FIND_COORDINATOR: Final = 10
API_VERSIONS: Final = 18
DESCRIBE_CLUSTER: Final = 60
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
DESCRIBE_CONFIGS: Final = 32
ALTER_CONFIGS: Final = 33
INCREMENTAL_ALTER_CONFIGS: Final = 44
CREATE_PARTITIONS: Final = 37
DESCRIBE_CLIENT_QUOTAS: Final = 48
ALTER_CLIENT_QUOTAS: Final = 49
CONSUMER_GROUP_HEARTBEAT: Final = 68

#: Requests Kafka never charges to a client's request quota: SASL (handled by the network
#: layer) and the cluster actions of ApiKeys (clusterAction = true), which brokers and
#: controllers send among themselves. See docs/kafka-quota-semantics.md §3.4.
REQUEST_QUOTA_EXEMPT: Final = frozenset(
    {SASL_HANDSHAKE, SASL_AUTHENTICATE, 4, 5, 6, 7, 27, 52, 53, 54, 55, 56, 57, 58, 62, 63, 67}
    | set(range(83, 88))
)

#: Requests a broker may answer after its threads are done with them, each named by Kafka's
#: ApiKey: handed to the group or transaction coordinator (whose own threads do the work,
#: and which answer once their records are committed), parked in a purgatory, or forwarded to
#: the controller. Kafka charges such a request only the thread time before it is handed on,
#: so the proxy caps its request time by what requests that cannot wait cost
#: (quotas/thread_time.py). Produce (acks=all) and Fetch (a long poll) wait by their bodies:
#: their handlers say so.
MAY_WAIT: Final = frozenset(
    ApiKey[name].value
    for name in (
        # the group coordinator (a write answers once committed; reads queue for its threads)
        "OffsetCommit",
        "OffsetFetch",
        "JoinGroup",
        "Heartbeat",
        "LeaveGroup",
        "SyncGroup",
        "DescribeGroups",
        "ListGroups",
        "DeleteGroups",
        "OffsetDelete",
        "TxnOffsetCommit",
        "ConsumerGroupHeartbeat",
        "ConsumerGroupDescribe",
        "ShareGroupHeartbeat",
        "ShareGroupDescribe",
        "StreamsGroupHeartbeat",
        "StreamsGroupDescribe",
        "DescribeShareGroupOffsets",
        "AlterShareGroupOffsets",
        "DeleteShareGroupOffsets",
        # the transaction coordinator (appends to its log with acks=all)
        "InitProducerId",
        "AddPartitionsToTxn",
        "AddOffsetsToTxn",
        "EndTxn",
        # purgatories
        "DeleteRecords",
        "ShareFetch",
        "ShareAcknowledge",
        # forwarded to the controller
        "CreateTopics",
        "DeleteTopics",
        "CreatePartitions",
        "CreateAcls",
        "DeleteAcls",
        "AlterConfigs",
        "IncrementalAlterConfigs",
        "AlterClientQuotas",
        "AlterUserScramCredentials",
        "ElectLeaders",
        "AlterPartitionReassignments",
        "ListPartitionReassignments",
        "CreateDelegationToken",
        "RenewDelegationToken",
        "ExpireDelegationToken",
        "UpdateFeatures",
        "UnregisterBroker",
        "AddRaftVoter",
        "RemoveRaftVoter",
        "UpdateRaftVoter",
    )
)

#: A group member's requests that carry no partitions: the group coordinator's own threads
#: do the work, and a request thread only reads the request and hands it on, which Kafka's
#: request log shows as the cheapest of the requests that are not answered from memory
#: (quotas/thread_time.py bounds their request time lower).
MEMBERSHIP: Final = frozenset(
    ApiKey[name].value
    for name in (
        "JoinGroup",
        "SyncGroup",
        "Heartbeat",
        "LeaveGroup",
        "ConsumerGroupHeartbeat",
        "ShareGroupHeartbeat",
        "StreamsGroupHeartbeat",
    )
)

#: api_key -> (request class, response class) for every API whose bodies the proxy reads.
DECODED: Final[dict[int, tuple[Any, Any]]] = {
    PRODUCE: (ProduceRequest, ProduceResponse),
    FETCH: (FetchRequest, FetchResponse),
    METADATA: (MetadataRequest, MetadataResponse),
    FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse),
    API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    DESCRIBE_CLUSTER: (DescribeClusterRequest, DescribeClusterResponse),
    SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse),
    SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    CREATE_TOPICS: (CreateTopicsRequest, CreateTopicsResponse),
    DELETE_TOPICS: (DeleteTopicsRequest, DeleteTopicsResponse),
    CREATE_PARTITIONS: (CreatePartitionsRequest, CreatePartitionsResponse),
    DESCRIBE_CONFIGS: (DescribeConfigsRequest, DescribeConfigsResponse),
    ALTER_CONFIGS: (AlterConfigsRequest, AlterConfigsResponse),
    INCREMENTAL_ALTER_CONFIGS: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    DESCRIBE_CLIENT_QUOTAS: (DescribeClientQuotasRequest, DescribeClientQuotasResponse),
    ALTER_CLIENT_QUOTAS: (AlterClientQuotasRequest, AlterClientQuotasResponse),
}

#: api_key -> highest version the proxy can decode in both directions.
MAX_DECODABLE_VERSION: Final[dict[int, int]] = {
    key: min(req.max_version, resp.max_version) for key, (req, resp) in DECODED.items()
}


#: every API's, as the responses' below: the proxy's own requests of APIs it does not decode
#: (DescribeLogDirs) need their header's version too
_REQUEST_FLEXIBLE_FROM: Final = {
    key: first_flexible_version(schema) for key, schema in request_schemas().items()
}
#: every API Kafka's message specs define, not only the decoded ones: throttle_time_ms is
#: written into any response, so any response header must be skippable
_RESPONSE_FLEXIBLE_FROM: Final = {
    key: first_flexible_version(schema) for key, schema in response_schemas().items()
}


def request_is_flexible(api_key: int, api_version: int) -> bool:
    return api_version >= _REQUEST_FLEXIBLE_FROM[api_key]


def response_is_flexible(api_key: int, api_version: int) -> bool:
    """Whether the response body uses compact encodings and tagged fields."""
    return api_version >= _RESPONSE_FLEXIBLE_FROM[api_key]


def response_header_is_flexible(api_key: int, api_version: int) -> bool:
    """ApiVersions responses keep header v0 at every version so any client can read them."""
    if api_key == API_VERSIONS:
        return False
    return response_is_flexible(api_key, api_version)


def response_class(api_key: int) -> Any:
    return DECODED[api_key][1]


def api_name(api_key: int) -> str:
    """Kafka's name of an API (Produce, Fetch...), as usage samples and logs name it."""
    try:
        name: str = ApiKey(api_key).name
    except ValueError:
        return f"api-{api_key}"
    return name
