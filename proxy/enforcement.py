"""Per-request quota decisions at the proxy, in the order a Kafka broker makes them.

Kafka's KafkaApis records a Produce request's size and a Fetch response's size into the
byte-rate sensors and the request's thread time into the request sensor, then throttles by
the larger of the resulting times. The proxy cannot see the broker's threads, so request
time here is the time from reading a request to answering it, which includes the broker.
"""

from __future__ import annotations

import time

from protocol.apis import FETCH, PRODUCE, REQUEST_QUOTA_EXEMPT
from quotas.engine import QuotaEngine

#: ClientRequestQuotaManager.NANOS_TO_PERCENTAGE_PER_SECOND
_NANOS_TO_PERCENTAGE = 100.0 / 1_000_000_000


def now_ms() -> int:
    """The quota clock: monotonic, so a wall-clock step never unthrottles or blocks anyone."""
    return time.monotonic_ns() // 1_000_000


class Enforcer:
    """Owns the live QuotaEngine (replaced on reload) and turns traffic into throttle times."""

    def __init__(self, engine: QuotaEngine) -> None:
        self.engine = engine

    def produce_without_response(
        self, user: str, client_id: str, request_bytes: int, now: int
    ) -> int:
        """acks=0: the byte rate only, as Kafka skips the request quota for these."""
        produce = self.engine.produce
        if not produce.enabled:
            return 0
        sensors = produce.sensors_for(user, client_id, now)
        throttle = produce.record_and_get_throttle_time_ms(sensors, request_bytes, now)
        if throttle:
            produce.record_throttle(sensors, throttle, now)
        return throttle

    def on_response(
        self,
        user: str,
        client_id: str,
        api_key: int,
        request_bytes: int,
        response_bytes: int,
        elapsed_ns: int,
        now: int,
    ) -> int:
        """The throttle for one answered request (0 = none); records into every sensor."""
        engine = self.engine
        bandwidth = 0
        bandwidth_manager = None
        if api_key == PRODUCE:
            bandwidth_manager, value = engine.produce, request_bytes
        elif api_key == FETCH:
            bandwidth_manager, value = engine.fetch, response_bytes
        if bandwidth_manager is not None and bandwidth_manager.enabled:
            bandwidth_sensors = bandwidth_manager.sensors_for(user, client_id, now)
            bandwidth = bandwidth_manager.record_and_get_throttle_time_ms(
                bandwidth_sensors, value, now
            )
        request_throttle = 0
        request = engine.request
        if request.enabled and api_key not in REQUEST_QUOTA_EXEMPT:
            request_sensors = request.sensors_for(user, client_id, now)
            request_throttle = request.record_and_get_throttle_time_ms(
                request_sensors, elapsed_ns * _NANOS_TO_PERCENTAGE, now
            )
        if bandwidth > request_throttle:
            assert bandwidth_manager is not None
            bandwidth_manager.record_throttle(bandwidth_sensors, bandwidth, now)
            return bandwidth
        if request_throttle:
            request.record_throttle(request_sensors, request_throttle, now)
        return request_throttle
