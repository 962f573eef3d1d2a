"""Fetch: response bytes charged to consumer_byte_rate, the principal's and, where topic
quotas apply, each topic's; fetches capped to one quota window."""

from __future__ import annotations

from protocol.fetch import empty_fetch_response, fetched_bytes, prepare_fetch
from proxy.handlers.addresses import advertised
from proxy.handlers.base import Answer, Channel, Forward, Handler, Outcome, Request
from quotas.entities import QuotaType


class FetchHandler(Handler):
    quotas = (QuotaType.FETCH,)

    def on_request(self, channel: Channel, request: Request) -> Outcome:
        header, fetch = request.header, channel.runtime.quotas.fetch
        throttle = fetch.owed(request)
        if not throttle and fetch.ceilings:
            throttle = fetch.ceiling_owed(request, channel.broker)
        if throttle:
            return Answer(empty_fetch_response(header.correlation_id, header.api_version, throttle))
        max_bytes = fetch.cap(request)
        if fetch.topic_quotas:
            topic_cap = fetch.topics_cap(channel.fetched_topics, request.now_ms)
            if topic_cap is not None:
                max_bytes = topic_cap if max_bytes is None else min(max_bytes, topic_cap)
        frame, long_poll = prepare_fetch(request.frame, header, request.body_offset, max_bytes)
        # a fetch under a consumer quota is charged when its response comes back, and a broker
        # reads nothing more from a connection while it handles a request: reading stops so,
        # and a client pipelining fetches cannot have several cross the quota at once
        return Forward(frame, stops_reading=max_bytes is not None, waits=long_poll)

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        frame = advertised(channel, frame, request)
        fetch = channel.runtime.quotas.fetch
        fetch.charge(request, len(frame) - 4)
        if fetch.ceilings:
            fetch.charge_ceiling(request, channel.broker, len(frame) - 4)
        if fetch.topic_quotas:
            read = channel.runtime.topics.named(fetched_bytes(frame, request.header.api_version))
            channel.fetched_topics.update(read)
            fetch.charge_topics(request, read)
        return frame

    def held_ms(self, channel: Channel, request: Request) -> int:
        """A topic's throttle holds every connection that reads it (as a Produce's)."""
        fetch = channel.runtime.quotas.fetch
        if not fetch.topic_quotas:
            return 0
        return fetch.topics_held_ms(channel.fetched_topics, request.now_ms)
