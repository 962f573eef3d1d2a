"""What each principal used, per API and sampling window: the counters the proxy adds into as
requests pass, and the sample they become, as the proxy writes it and the pipeline reads it.

This is the one description of the samples' schema (docs/usage-samples.md), so writer and
reader cannot drift apart. It sits below both: the proxy writes samples without the pipeline's
pyspark extra, and the pipeline reads them without the proxy's I/O shell.
"""

from __future__ import annotations

import json
from typing import Final, NamedTuple, get_type_hints

#: the samples' schema version, written into every sample; a reader refuses what it does not
#: know. Adding a field is a new version; see docs/usage-samples.md.
SCHEMA_VERSION: Final = 4
#: the versions a reader takes: 1 had no client_ip, 1 and 2 no connections or held_ms, 1 to
#: 3 no connections_refused
READABLE_VERSIONS: Final = (1, 2, 3, 4)


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
    #: the request time request_percentage charges: each request's estimated thread time
    #: (quotas/thread_time.py)
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
    #: the client's address: the connection's peer, or the client a load balancer's PROXY
    #: protocol header names ([proxy_protocol])
    client_ip: str
    #: this principal's connections from this address to this proxy, open as the window
    #: closed (counted once per connection, whichever APIs it used)
    connections: int
    #: how long in the window this principal was throttled on this proxy: the union of its
    #: applied throttles, each from its decision on, however many requests or connections
    #: carried them (the time a principal hold keeps it waiting); the same on each of its
    #: samples of the window
    held_ms: int
    #: connections of this principal from this address that a connection guard closed, on
    #: their first request past authentication (counted under that request's API)
    connections_refused: int

    def to_json(self) -> str:
        return json.dumps(self._asdict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> UsageSample:
        """A sample as written, of a version this reader knows (ValueError otherwise); the
        fields a version had not yet are read as "" and 0. Read for every sample `top`
        follows, so the fields are checked in one pass over the row."""
        try:
            values = json.loads(text)
        except RecursionError as exc:  # JSON nested deeper than Python's stack
            raise ValueError("not a usage sample: nested too deep") from exc
        if not isinstance(values, dict) or values.get("schema") not in READABLE_VERSIONS:
            raise ValueError("not a usage sample of a known schema version")
        row = [values.get(name) for name in _NAMES]
        if values["schema"] != SCHEMA_VERSION:
            for index, default in _ADDED.get(values["schema"], ()):
                if row[index] is None:
                    row[index] = default
        if not all(type(value) is kind for value, kind in zip(row, _KINDS, strict=True)):
            for index, kind in enumerate(_KINDS):
                value = row[index]
                if kind is float and type(value) is int:
                    row[index] = value = float(value)
                if type(value) is not kind:
                    name = _NAMES[index]
                    raise ValueError(
                        f"a usage sample whose {name} is not {kind.__name__}: {value!r}"
                    )
        return cls._make(row)


#: (name, Python type) of every field, in order: the one description of the schema that the
#: pipeline's Spark schema is built from
SAMPLE_FIELDS: Final[tuple[tuple[str, type], ...]] = tuple(get_type_hints(UsageSample).items())
_NAMES: Final = tuple(name for name, _ in SAMPLE_FIELDS)
_KINDS: Final = tuple(kind for _, kind in SAMPLE_FIELDS)
#: per older version, the fields added since (their index and what they read as)
_ADDED: Final = {
    1: ((_NAMES.index("client_ip"), ""), (_NAMES.index("connections"), 0),
        (_NAMES.index("held_ms"), 0), (_NAMES.index("connections_refused"), 0)),
    2: ((_NAMES.index("connections"), 0), (_NAMES.index("held_ms"), 0),
        (_NAMES.index("connections_refused"), 0)),
    3: ((_NAMES.index("connections_refused"), 0),),
}  # fmt: skip


class UsageCounters:
    """One (user, client_id, api_key, client_ip)'s counts since its window began."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "connections_refused",
        "key",
        "mutations_admitted",
        "mutations_rejected",
        "producer_ids_admitted",
        "producer_ids_rejected",
        "request_time_ns",
        "requests",
        "retired",
        "throttle_time_ms",
        "throttled_requests",
    )

    def __init__(self, key: tuple[str, str, int, str]) -> None:
        self.key = key
        #: dropped from the recorder after an idle window: look the key up again
        self.retired = False
        self.zero()

    def zero(self) -> None:
        self.requests = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.request_time_ns = 0
        self.throttle_time_ms = 0
        self.throttled_requests = 0
        self.mutations_admitted = 0
        self.mutations_rejected = 0
        self.producer_ids_admitted = 0
        self.producer_ids_rejected = 0
        self.connections_refused = 0

    # What a connection reports as a request is answered. A request's read is two additions
    # the core makes itself (requests, bytes_in): as a method call here it cost 0.7 % more
    # instructions per Produce round trip (bench.core_cost --instructions).

    def answered_here(self, size: int) -> None:
        """A response the proxy made itself."""
        self.bytes_out += size

    def answered(self, size: int, request_time_ns: int, throttle_ms: int) -> None:
        """A broker's response, with the request time it was charged and its throttle."""
        self.bytes_out += size
        self.request_time_ns += request_time_ns
        if throttle_ms:
            self.throttle_time_ms += throttle_ms
            self.throttled_requests += 1

    def throttled(self, throttle_ms: int) -> None:
        """A throttle settled without a broker's response."""
        if throttle_ms:
            self.throttle_time_ms += throttle_ms
            self.throttled_requests += 1

    @property
    def idle(self) -> bool:
        """Nothing counted: everything else comes with a request or a response."""
        return not (
            self.requests or self.bytes_out or self.throttle_time_ms or self.connections_refused
        )
