"""Which API each handler serves: the single list of the APIs the proxy acts on.

An API not listed here is forwarded as its original bytes, and ApiVersions advertises it as
the broker does; every listed API is capped in ApiVersions to the highest version the proxy
decodes. Adding an API: a protocol module for its bytes, a handler module, a line here.
"""

from __future__ import annotations

from typing import Final

from protocol.apis import (
    ALTER_CLIENT_QUOTAS,
    ALTER_CONFIGS,
    API_VERSIONS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    FETCH,
    FIND_COORDINATOR,
    INCREMENTAL_ALTER_CONFIGS,
    MAX_DECODABLE_VERSION,
    MAY_WAIT,
    MEMBERSHIP,
    METADATA,
    PRODUCE,
    REQUEST_QUOTA_EXEMPT,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from proxy.handlers.addresses import AddressesHandler
from proxy.handlers.api_versions import ApiVersionsHandler
from proxy.handlers.base import Handler, Route, Stage
from proxy.handlers.client_quotas import AlterClientQuotasHandler, DescribeClientQuotasHandler
from proxy.handlers.fetch import FetchHandler
from proxy.handlers.metadata import MetadataHandler
from proxy.handlers.mutations import MutationsHandler
from proxy.handlers.produce import ProduceHandler
from proxy.handlers.resource_configs import AlterConfigsHandler, DescribeConfigsHandler
from proxy.handlers.sasl import SaslAuthenticateHandler, SaslHandshakeHandler
from quotas.entities import GUARDS
from quotas.thread_time import APPENDED, HANDED_ON, HANDLED, KEPT, SENT

_ADDRESSES = AddressesHandler()
_MUTATIONS = MutationsHandler()
_ALTER_CONFIGS = AlterConfigsHandler()
_HANDLERS: dict[int, Handler] = {
    PRODUCE: ProduceHandler(),
    FETCH: FetchHandler(),
    METADATA: MetadataHandler(),
    FIND_COORDINATOR: _ADDRESSES,
    DESCRIBE_CLUSTER: _ADDRESSES,
    SASL_HANDSHAKE: SaslHandshakeHandler(),
    SASL_AUTHENTICATE: SaslAuthenticateHandler(),
    CREATE_TOPICS: _MUTATIONS,
    CREATE_PARTITIONS: _MUTATIONS,
    DELETE_TOPICS: _MUTATIONS,
    DESCRIBE_CLIENT_QUOTAS: DescribeClientQuotasHandler(),
    ALTER_CLIENT_QUOTAS: AlterClientQuotasHandler(),
    DESCRIBE_CONFIGS: DescribeConfigsHandler(),
    ALTER_CONFIGS: _ALTER_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS: _ALTER_CONFIGS,
}
#: api_key -> highest version decoded, for every API a handler acts on (ApiVersions included)
DECODED_VERSIONS: Final = {
    api_key: MAX_DECODABLE_VERSION[api_key] for api_key in (*_HANDLERS, API_VERSIONS)
}
_HANDLERS[API_VERSIONS] = ApiVersionsHandler(DECODED_VERSIONS)

#: api_key -> its handler; get() gives None for an API forwarded untouched
HANDLERS: Final[dict[int, Handler]] = _HANDLERS
#: what a busy broker's threads do with a request, where it is not reading it and answering
#: or handing it on (quotas/thread_time.py)
_BOUNDS: Final = {
    PRODUCE: APPENDED,
    FETCH: SENT,
    API_VERSIONS: KEPT,
    **{api_key: HANDED_ON for api_key in MEMBERSHIP},
}


def _route(api_key: int) -> Route:
    charged = api_key not in REQUEST_QUOTA_EXEMPT
    handler = HANDLERS.get(api_key)
    stage = Stage.SESSION if handler is None else handler.stage
    return Route(
        handler,
        charged,
        stage,
        api_key in MAY_WAIT,
        _BOUNDS.get(api_key, HANDLED),
        GUARDS.get(api_key),
    )


#: every api_key a request header can carry (a non-negative int16), routed here once
ROUTES: Final[tuple[Route, ...]] = tuple(_route(api_key) for api_key in range(1 << 15))
