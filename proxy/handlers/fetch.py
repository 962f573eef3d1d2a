"""Fetch: response bytes charged to consumer_byte_rate, fetches capped to one quota window."""

from __future__ import annotations

from protocol.apis import FETCH
from protocol.fetch import empty_fetch_response, prepare_fetch
from proxy.handlers.addresses import advertised
from proxy.handlers.base import (
    Answer,
    Exchange,
    Forward,
    Handler,
    Outcome,
    Reply,
    Request,
    Session,
)


class FetchHandler(Handler):
    def on_request(self, session: Session, request: Request) -> Outcome:
        header = request.header
        throttle, max_bytes = session.enforcer.before_fetch(
            session.principal(request.client_id), request.now_ms
        )
        if throttle:
            response = empty_fetch_response(header.correlation_id, header.api_version, throttle)
            return Answer(response, mute_ms=throttle)
        frame, wait_ms = prepare_fetch(request.frame, header, max_bytes)
        # a fetch under a consumer quota is charged when its response comes back, and a broker
        # reads nothing more from a connection while it handles a request: held so, a client
        # pipelining fetches cannot have several cross the quota at once
        return Forward(frame, held=max_bytes is not None, wait_ns=wait_ms * 1_000_000)

    def on_response(self, session: Session, frame: bytes, exchange: Exchange, now_ms: int) -> Reply:
        frame = advertised(session, frame, FETCH, exchange.api_version)
        bandwidth = session.enforcer.on_fetch_response(
            session.principal(exchange.client_id), len(frame) - 4, now_ms
        )
        return Reply(frame, bandwidth)
