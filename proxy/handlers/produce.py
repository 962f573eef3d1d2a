"""Produce: new producer ids admitted per user (KIP-936), then bytes charged to
producer_byte_rate as each request is read (KafkaApis' order)."""

from __future__ import annotations

from protocol.apis import PRODUCE
from protocol.mutations import THROTTLING_QUOTA_EXCEEDED
from protocol.produce import produce_acks, produced_topics, producer_ids, refuse_produce
from proxy.enforcement import Decision, Principal
from proxy.handlers.addresses import advertised
from proxy.handlers.base import (
    Answer,
    Drop,
    Exchange,
    Forward,
    Handler,
    Outcome,
    Reply,
    Request,
    Session,
)


def _refused_producer_id(
    session: Session, request: Request, principal: Principal, acks: int
) -> Answer | Drop | None:
    """The answer to a request carrying an unseen producer id over its user's quota: it
    never reaches the broker, so the broker never holds that producer's state. None when
    the request may go on."""
    enforcer, now = session.enforcer, request.now_ms
    sensors = enforcer.producer_id_sensors(principal, now)
    if sensors is None:
        return None
    frame, header = request.frame, request.header
    ids = producer_ids(frame, header)
    if not ids:
        return None
    verdict = enforcer.admit_producer_ids(principal, sensors, ids, now)
    decision = verdict.decision
    usage = request.usage
    if usage is not None:
        usage.producer_ids_admitted += verdict.new_ids
        usage.producer_ids_rejected += verdict.refused  # the first unseen id refused
    if not verdict.refused:
        if decision is not None:
            enforcer.settle_without_response(decision, now)  # shadow mode: reported only
        return None
    applied = enforcer.settle_without_response(decision, now) if decision is not None else 0
    if acks == 0:
        enforcer.dropped(sensors, now)
        return Drop(mute_ms=applied)
    throttle = decision.throttle_ms if decision is not None else 0
    topics = produced_topics(frame, header)
    response = refuse_produce(header, topics, THROTTLING_QUOTA_EXCEEDED, throttle)
    return Answer(response, mute_ms=applied)


class ProduceHandler(Handler):
    def on_request(self, session: Session, request: Request) -> Outcome:
        """A client pipelining requests is judged on each in turn, and a broker reads nothing
        more from a connection whose request is over quota until its throttle has passed."""
        frame, enforcer, now = request.frame, session.enforcer, request.now_ms
        principal = session.principal(request.client_id)
        acks = produce_acks(frame, request.header)
        refused = _refused_producer_id(session, request, principal, acks)
        if refused is not None:
            return refused
        decision = enforcer.on_produce(principal, len(frame) - 4, now)
        if acks == 0:
            # no response will carry the throttle: the byte rate alone, applied as a mute
            throttle = enforcer.settle_without_response(decision, now) if decision else 0
            return Forward(frame, expects_response=False, mute_ms=throttle)
        return Forward(frame, decision, held=decision is not None and enforcer.holds(decision))

    def on_response(self, session: Session, frame: bytes, exchange: Exchange, now_ms: int) -> Reply:
        decision = exchange.state
        assert decision is None or isinstance(decision, Decision)
        if decision is not None and decision.throttle_ms:
            decision = session.enforcer.produce_throttle(decision, now_ms)
        return Reply(advertised(session, frame, PRODUCE, exchange.api_version), decision)
