"""SaslHandshake and SaslAuthenticate: passed on, while the principal builder learns the
principal from the exchange."""

from __future__ import annotations

from proxy.handlers.base import Forward, Handler, Outcome, Request, Session, Stage


class SaslHandshakeHandler(Handler):
    stage = Stage.AUTHENTICATION

    def on_request(self, session: Session, request: Request) -> Outcome:
        session.runtime.principals.on_handshake_request(session, request)
        return Forward(request.frame)

    def on_response(self, session: Session, frame: bytes, request: Request) -> bytes:
        session.runtime.principals.on_handshake_response(session, frame, request)
        return frame


class SaslAuthenticateHandler(Handler):
    stage = Stage.AUTHENTICATION

    def on_request(self, session: Session, request: Request) -> Outcome:
        session.runtime.principals.on_authenticate_request(session, request)
        return Forward(request.frame)

    def on_response(self, session: Session, frame: bytes, request: Request) -> bytes:
        session.runtime.principals.on_authenticate_response(session, frame, request)
        return frame
