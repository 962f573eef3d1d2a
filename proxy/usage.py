"""Usage samples: what each principal used, per API, over one sampling window.

Operators size quotas from measured load (KIP-599's advice); the pipeline (pipeline/) reads
these samples. Recording is sans-IO and costs the hot path a dict lookup and a few additions
per request: a connection adds into its principal's counters as requests and responses pass,
and every interval the shell drains them into samples (proxy/usage_sinks.py writes them).

Counters are zeroed in place when drained, never replaced, so a response that arrives after
its request's window has closed is counted in the next window instead of being lost. A
counter idle for a whole window is retired; whoever still holds it looks it up again.
"""

from __future__ import annotations

from pipeline.usage_sample import SCHEMA_VERSION, UsageSample, api_name


class UsageCounters:
    """One (user, client_id, api_key)'s counts since its window began."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
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

    def __init__(self, key: tuple[str, str, int]) -> None:
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

    def throttled(self, throttle_ms: int) -> None:
        if throttle_ms:
            self.throttle_time_ms += throttle_ms
            self.throttled_requests += 1

    @property
    def idle(self) -> bool:
        """Nothing counted: everything else comes with a request or a response."""
        return not (self.requests or self.bytes_out or self.throttle_time_ms)


class UsageRecorder:
    """Every principal's counters of the current window, for one proxy instance."""

    def __init__(self, instance_id: str, now_ms: int) -> None:
        self.instance_id = instance_id
        self.window_start_ms = now_ms
        self._counters: dict[tuple[str, str, int], UsageCounters] = {}

    def counters(self, user: str, client_id: str, api_key: int) -> UsageCounters:
        key = (user, client_id, api_key)
        counters = self._counters.get(key)
        if counters is None:
            counters = self._counters[key] = UsageCounters(key)
        return counters

    def current(self, counters: UsageCounters) -> UsageCounters:
        """These counters, or their successor if they were retired while a request was out."""
        return self.counters(*counters.key) if counters.retired else counters

    def drain(self, now_ms: int) -> list[UsageSample]:
        """Close the window at `now_ms`: a sample per key used in it, and a new window."""
        start, length = self.window_start_ms, max(now_ms - self.window_start_ms, 0)
        self.window_start_ms = now_ms
        samples = []
        idle = []
        for key, c in self._counters.items():
            if c.idle:
                idle.append(key)
                continue
            user, client_id, api_key = key
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
                )
            )
            c.zero()
        for key in idle:
            self._counters.pop(key).retired = True
        return samples

    def __len__(self) -> int:
        return len(self._counters)
