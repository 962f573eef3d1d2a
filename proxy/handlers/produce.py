"""Produce: bytes charged to producer_byte_rate as each request is read (KafkaApis' order)."""

from __future__ import annotations

from protocol.apis import PRODUCE
from protocol.produce import produce_acks
from proxy.enforcement import Decision
from proxy.handlers.addresses import advertised
from proxy.handlers.base import Exchange, Forward, Handler, Outcome, Reply, Request, Session


class ProduceHandler(Handler):
    def on_request(self, session: Session, request: Request) -> Outcome:
        """A client pipelining requests is judged on each in turn, and a broker reads nothing
        more from a connection whose request is over quota until its throttle has passed."""
        frame, enforcer, now = request.frame, session.enforcer, request.now_ms
        decision = enforcer.on_produce(session.principal(request.client_id), len(frame) - 4, now)
        if produce_acks(frame, request.header) == 0:
            # no response will carry the throttle: the byte rate alone, applied as a mute
            throttle = enforcer.settle_without_response(decision, now) if decision else 0
            return Forward(frame, expects_response=False, mute_ms=throttle)
        return Forward(frame, decision, held=decision is not None and enforcer.holds(decision))

    def on_response(self, session: Session, frame: bytes, exchange: Exchange, now_ms: int) -> Reply:
        decision = exchange.state
        assert decision is None or isinstance(decision, Decision)
        return Reply(advertised(session, frame, PRODUCE, exchange.api_version), decision)
