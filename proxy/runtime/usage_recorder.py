"""Usage samples: what each principal used, per API and client address, over one sampling
window.

Operators size quotas from measured load (KIP-599's advice); the pipeline (pipeline/) reads
these samples. Recording is sans-IO and costs the hot path a dict lookup and a few additions
per request: a connection adds into its principal's counters as requests and responses pass,
and every interval the shell drains them into samples (proxy/observability/usage_sinks.py
writes them).

Counters are zeroed in place when drained, never replaced, so a response that arrives after
its request's window has closed is counted in the next window instead of being lost. A
counter idle for a whole window is retired; whoever still holds it looks it up again.
"""

from __future__ import annotations

from collections.abc import Callable

from protocol.apis import api_name
from quotas.usage_samples import SCHEMA_VERSION, UsageCounters, UsageSample


class UsageRecorder:
    """Every principal's counters of the current window, for one proxy instance."""

    def __init__(self, instance_id: str, now_ms: int) -> None:
        self.instance_id = instance_id
        self.window_start_ms = now_ms
        self._counters: dict[tuple[str, str, int, str], UsageCounters] = {}
        #: (user, client_id, client_ip) -> its connections open now: a connection is
        #: counted under the principal of its latest request
        self._connections: dict[tuple[str, str, str], int] = {}

    def connected(self, principal: tuple[str, str, str]) -> None:
        """A connection's requests now come as this (user, client_id, client_ip)."""
        self._connections[principal] = self._connections.get(principal, 0) + 1

    def disconnected(self, principal: tuple[str, str, str]) -> None:
        """A connection counted under this principal closed, or moved to another."""
        left = self._connections[principal] - 1
        if left:
            self._connections[principal] = left
        else:
            del self._connections[principal]

    def counters(self, user: str, client_id: str, api_key: int, client_ip: str) -> UsageCounters:
        key = (user, client_id, api_key, client_ip)
        counters = self._counters.get(key)
        if counters is None:
            counters = self._counters[key] = UsageCounters(key)
        return counters

    def current(self, counters: UsageCounters) -> UsageCounters:
        """These counters, or their successor if they were retired while a request was out."""
        return self.counters(*counters.key) if counters.retired else counters

    def drain(
        self, now_ms: int, held_ms: Callable[[str, str, int], int] | None = None
    ) -> list[UsageSample]:
        """Close the window at `now_ms`: a sample per key used in it, and a new window.
        `held_ms` says how long each (user, client_id)'s requests of an API were held by its
        quotas in the window (None: nobody's were)."""
        start, length = self.window_start_ms, max(now_ms - self.window_start_ms, 0)
        self.window_start_ms = now_ms
        samples = []
        idle = []
        connections = self._connections
        for key, c in self._counters.items():
            if c.idle:
                idle.append(key)
                continue
            user, client_id, api_key, client_ip = key
            samples.append(
                UsageSample(
                    SCHEMA_VERSION,
                    self.instance_id,
                    start,
                    length,
                    user,
                    client_id,
                    api_key,
                    api_name(api_key),
                    c.requests,
                    c.bytes_in,
                    c.bytes_out,
                    c.request_time_ns / 1e6,
                    c.throttle_time_ms,
                    c.throttled_requests,
                    c.mutations_admitted,
                    c.mutations_rejected,
                    c.producer_ids_admitted,
                    c.producer_ids_rejected,
                    client_ip,
                    connections.get((user, client_id, client_ip), 0),
                    0 if held_ms is None else held_ms(user, client_id, api_key),
                    c.connections_refused,
                )
            )
            c.zero()
        for key in idle:
            self._counters.pop(key).retired = True
        return samples

    def __len__(self) -> int:
        return len(self._counters)
