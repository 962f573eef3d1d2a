"""One usage sample as the proxy writes it and the pipeline reads it: the one description of
the samples' schema (docs/usage-samples.md), so writer and reader cannot drift apart.

It imports neither pyspark nor the proxy: the proxy writes samples without the pipeline's
extra, and the pipeline reads them without the proxy's I/O shell.
"""

from __future__ import annotations

import json
from typing import Final, NamedTuple, get_type_hints

from kafka.protocol.api_key import ApiKey

#: the samples' schema version, written into every sample; a reader refuses what it does not
#: know. Adding a field is a new version; see docs/usage-samples.md.
SCHEMA_VERSION: Final = 1


class UsageSample(NamedTuple):
    """One principal's use of one API over one window (docs/usage-samples.md)."""

    schema: int
    #: the proxy instance that measured it ([usage] instance_id)
    proxy: str
    #: the window, wall-clock milliseconds since the epoch, and its length
    window_start_ms: int
    window_ms: int
    user: str
    client_id: str
    api_key: int
    api: str
    requests: int
    #: request frames as read from the client, response frames as written to it
    bytes_in: int
    bytes_out: int
    #: from reading a request to its response, less a long-poll Fetch's allowed wait (the
    #: time request_percentage charges)
    request_time_ms: float
    #: throttles applied to this principal's requests, and how many requests carried one
    throttle_time_ms: int
    throttled_requests: int
    #: partitions of CreateTopics / CreatePartitions / DeleteTopics let through and refused
    #: by controller_mutation_rate (counted only where that quota applies)
    mutations_admitted: int
    mutations_rejected: int
    #: producer ids unseen in the user's window, let through and refused by
    #: producer_ids_rate (counted only where that quota applies)
    producer_ids_admitted: int
    producer_ids_rejected: int

    def to_json(self) -> str:
        return json.dumps(self._asdict(), separators=(",", ":"))


#: (name, Python type) of every field, in order: the one description of the schema that the
#: pipeline's Spark schema is built from
SAMPLE_FIELDS: Final[tuple[tuple[str, type], ...]] = tuple(get_type_hints(UsageSample).items())


def api_name(api_key: int) -> str:
    try:
        name: str = ApiKey(api_key).name
    except ValueError:
        return f"api-{api_key}"
    return name
