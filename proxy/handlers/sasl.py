"""SaslHandshake and SaslAuthenticate: the principal, learned from the exchange passed on."""

from __future__ import annotations

import logging

from proxy.handlers.base import Exchange, Forward, Handler, Outcome, Reply, Request, Session

log = logging.getLogger(__name__)


class SaslHandshakeHandler(Handler):
    def on_request(self, session: Session, request: Request) -> Outcome:
        session.sasl.on_handshake_request(request.frame, request.header)
        return Forward(request.frame)

    def on_response(self, session: Session, frame: bytes, exchange: Exchange, now_ms: int) -> Reply:
        sasl = session.sasl
        sasl.on_handshake_response(frame, exchange.api_version)
        if sasl.mechanism is not None and not sasl.learnable:
            log.warning(
                "client %s authenticates with %s, whose principal the proxy cannot learn: "
                "its quotas are those of User:%s",
                session.peer,
                sasl.mechanism,
                session.user,
            )
        return Reply(frame)


class SaslAuthenticateHandler(Handler):
    def on_request(self, session: Session, request: Request) -> Outcome:
        session.sasl.on_authenticate_request(request.frame, request.header)
        return Forward(request.frame)

    def on_response(self, session: Session, frame: bytes, exchange: Exchange, now_ms: int) -> Reply:
        user = session.sasl.on_authenticate_response(frame, exchange.api_version)
        if user is not None:
            log.info("client %s authenticated as User:%s", session.peer, user)
            session.user = user
        return Reply(frame)
