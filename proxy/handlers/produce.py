"""Produce: new producer ids admitted per user (KIP-936), then bytes charged to
producer_byte_rate as each request is read (KafkaApis' order), the principal's and, where
topic quotas apply, each topic's."""

from __future__ import annotations

import uuid

from protocol.mutations import THROTTLING_QUOTA_EXCEEDED
from protocol.produce import (
    ProduceRequestView,
    produced_bytes,
    produced_partition_bytes,
    produced_topics,
    producer_ids,
    read_produce,
    refuse_produce,
)
from proxy.handlers.addresses import advertised
from proxy.handlers.base import Answer, Channel, Drop, Forward, Handler, Outcome, Request
from quotas.entities import QuotaType


class ProduceHandler(Handler):
    quotas = (QuotaType.PRODUCE, QuotaType.PRODUCER_IDS)

    def on_request(self, channel: Channel, request: Request) -> Outcome:
        """A client pipelining requests is judged on each in turn, and a broker reads nothing
        more from a connection whose request is over quota until its throttle has passed."""
        frame = request.frame
        produce = read_produce(frame, request.header, request.body_offset)
        quotas = channel.runtime.quotas
        ids = quotas.producer_ids
        if ids.limited(request) and not ids.admit(request, producer_ids(frame, produce)):
            # an unseen producer id over its user's quota never reaches the broker, so the
            # broker never holds that producer's state
            if produce.acks == 0:
                ids.dropped(request)
                return Drop()
            verdict = request.verdict
            throttle = verdict.throttle_ms if verdict is not None else 0
            topics = produced_topics(frame, produce)
            return Answer(
                refuse_produce(request.header, topics, THROTTLING_QUOTA_EXCEEDED, throttle)
            )
        over_quota = quotas.produce.charge(request, len(frame) - 4)
        if quotas.produce.topic_quotas:
            written = self._written(channel, request, produce)
            over_quota = quotas.produce.charge_topics(request, written) or over_quota
        if quotas.produce.ceilings:
            size = len(frame) - 4
            over_quota = quotas.produce.charge_ceiling(request, channel.broker, size) or over_quota
        if quotas.produce.disk_guard:
            partitions = self._partitions(channel, frame, produce)
            over_quota = quotas.produce.charge_disks(request, partitions) or over_quota
        if produce.acks == 0:  # no response will carry the throttle: it is applied as a mute
            return Forward(frame, expects_response=False)
        # acks=all: the broker answers once its followers have the records; the wait holds no
        # thread, and what the round trip counts is bounded as an append
        # (quotas/thread_time.py)
        return Forward(frame, stops_reading=over_quota)

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        return advertised(channel, frame, request)

    def held_ms(self, channel: Channel, request: Request) -> int:
        """A topic's throttle holds every connection that writes it, as a principal's holds
        the principal's: charged per connection, several writers would each send another
        request into a topic already over its quota."""
        produce = channel.runtime.quotas.produce
        if not produce.topic_quotas:
            return 0
        return produce.topics_held_ms(self._written(channel, request), request.now_ms)

    @staticmethod
    def _partitions(
        channel: Channel, frame: bytes, view: ProduceRequestView
    ) -> dict[tuple[str, int], int]:
        """The record bytes by partition, topics by name (v13 names them by id, which the
        topic cache maps back; an id not known yet is left out, as for topic quotas)."""
        named: dict[tuple[str, int], int] = {}
        for (topic, partition), size in produced_partition_bytes(frame, view).items():
            if isinstance(topic, uuid.UUID):
                known = channel.runtime.topics.by_id(topic)
                if known is None:
                    continue
                topic = known.name
            named[(topic, partition)] = size
        return named

    @staticmethod
    def _written(
        channel: Channel, request: Request, view: ProduceRequestView | None = None
    ) -> dict[str, int]:
        """The record bytes by topic, read once per request (kept in `parsed`)."""
        written = request.parsed
        if written is None:
            if view is None:
                view = read_produce(request.frame, request.header, request.body_offset)
            sizes = produced_bytes(request.frame, view)
            # names before v13; ids from it, which the topic cache maps back
            written = request.parsed = (
                channel.runtime.topics.named(sizes) if view.version >= 13 else sizes
            )
        assert isinstance(written, dict)
        return written
